package main

import (
	"errors"
)

// dataplaneUnderTest is what forwards between A and B in a trial: a
// gateway, a hand-built pipeline, or nothing (the kernel).
type dataplaneUnderTest interface {
	counters(c *counters)
	stop() error
}

// trafficUnderTest is the traffic of a trial.
type trafficUnderTest interface {
	counters(c *counters)
	stop() (final, error)
}

// labTrial is a trial on a fresh lab: a dataplane (nil: the kernel
// routes) and traffic through it.
type labTrial struct {
	l      *lab
	dp     dataplaneUnderTest
	tr     trafficUnderTest
	rxAtB  bool           // Received counts packets arriving at gw-b
	onStop func(f *final) // adds facts to f.Extra before the lab goes
}

func (t *labTrial) snapshot() counters {
	var c counters
	if t.dp != nil {
		t.dp.counters(&c)
	}
	t.tr.counters(&c)
	if t.rxAtB {
		c.Received = t.l.rxPacketsB()
	}
	return c
}

// finish stops the traffic, then the dataplane, then removes the lab.
func (t *labTrial) finish() (final, error) {
	var errs []error
	f, err := t.tr.stop()
	errs = append(errs, err)
	if t.dp != nil {
		errs = append(errs, t.dp.stop())
	}
	if f.Extra == nil {
		f.Extra = map[string]float64{}
	}
	if t.onStop != nil {
		t.onStop(&f)
	}
	if x, ok := t.dp.(interface{ extra() map[string]float64 }); ok {
		for k, v := range x.extra() {
			f.Extra[k] = v
		}
	}
	errs = append(errs, t.l.close())
	return f, errors.Join(errs...)
}

// udpTraffic adapts udpStream.
type udpTraffic struct{ *udpStream }

func (u udpTraffic) stop() (final, error) {
	lost := u.udpStream.stop()
	sent := float64(u.sent.Load()) * float64(u.segs)
	return final{Lost: &lost, Extra: map[string]float64{"datagrams_sent": sent}}, nil
}

// tcpTraffic adapts tcpStreams.
type tcpTraffic struct{ tcpStreams }

func (t tcpTraffic) stop() (final, error) { return final{}, t.tcpStreams.stop() }

// floodTraffic adapts smallFlood.
type floodTraffic struct{ *smallFlood }

func (f floodTraffic) stop() (final, error) {
	f.smallFlood.stop()
	return final{}, nil
}

// gwDataplane adapts gateway.
type gwDataplane struct {
	*gateway
	ipBytesAsRx bool // report the IP bytes forwarded as RxBytes (no receiver counts)
	// reverse measures the return path: Mpps counts the packets it took
	// from the NIC, segs/read the packets per TUN write.
	reverse bool
}

func (g gwDataplane) counters(c *counters) {
	g.gateway.counters(c)
	c.GatewayCPU = gatewayCPU()
	if g.ipBytesAsRx {
		c.RxBytes = g.g.Stats().Forward.Bytes
	}
	if g.reverse {
		c.Segments, c.Reads = c.RetPackets, c.RetWrites
	}
}

func (g gwDataplane) stop() error { return g.gateway.stop() }

// withLab builds a lab and calls fn with it; the lab is removed if fn
// fails.
func withLab(fn func(l *lab) (*labTrial, error)) (trial, error) {
	l, err := newLab()
	if err != nil {
		return nil, err
	}
	t, err := fn(l)
	if err != nil {
		return nil, errors.Join(err, l.close())
	}
	t.l = l
	return t, nil
}
