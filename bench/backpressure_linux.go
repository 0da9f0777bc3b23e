package main

// Scenario "backpressure" reproduces the UDP_STREAM experiment of
// "Poor UDP throughput with virtual devices and UFO" (seeds/
// udp-ufo-backpressure.txt): a UDP sender with super-packets, unlimited
// rate, through a path that segments them in front of a slower line. With
// backpressure the segments are charged to a budget and the gateway stops
// reading the TUN while it is full, so the sender is held back (ENOBUFS,
// resent) and nothing is dropped; without it the queue in front of the
// line drops.
//
// UDP_SEGMENT allows at most 65507 bytes per send, so "64 × 1400 B" cannot
// be one datagram: the sender sends 46 × 1400 B (64 400 bytes). Where
// the TUN has no USO (before Linux 6.2) the kernel cuts a UDP_SEGMENT send
// before the TUN, and the drops of its segments at a full TUN ring never
// reach the sender; there the sender sends one datagram per send, the
// way a sender there can be held back.

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/gsoplane/gsoplane/dataplane"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

const (
	bpSegs    = 46   // datagrams per send (46 × 1400 = 64400 ≤ 65507)
	bpSize    = 1400 // bytes per datagram
	bpPort    = 9000
	bpTUNRing = 32 // TUN txqueuelen: the hold-back reaches the sender soon
)

// udpIPOverhead is the IPv4 and UDP header bytes of each datagram: the
// emulated line counts IP bytes, the receiver counts payload.
const udpIPOverhead = 28

// bpSendSegs is the datagrams per send: bpSegs where the TUN takes USO
// super-packets, else 1, with why.
func bpSendSegs() (int, string) {
	if err := netlab.VirtioNetUSO(); errors.Is(err, netlab.ErrMissingFeature) {
		return 1, err.Error()
	}
	return bpSegs, ""
}

func backpressureRows(lineRate int64) []rowSpec {
	row := func(name string, on bool) rowSpec {
		return rowSpec{
			name:  name,
			units: units{sent: "sends", received: "datagrams"},
			start: func(ctx context.Context) (trial, error) {
				return withLab(func(l *lab) (*labTrial, error) {
					gw, err := startGateway(l, dataplane.GatewayConfig{
						TUN:                 dataplane.TUNOptions{TxQueueLen: bpTUNRing},
						Port:                dataplane.PortXDP,
						DisableBackpressure: !on,
						DisableGRO:          true,
						TxRate:              lineRate,
					})
					if err != nil {
						return nil, err
					}
					segs, _ := bpSendSegs()
					s, err := startUDPStream(l, srv4, bpPort, segs, bpSize)
					if err != nil {
						return nil, errors.Join(err, gw.stop())
					}
					return &labTrial{
						dp: gwDataplane{gateway: gw}, tr: udpTraffic{s},
						onStop: func(f *final) { f.Extra["rx_socket_drops"] = float64(l.udpCounterB("RcvbufErrors")) },
					}, nil
				})
			},
		}.copying(forwardCopies)
	}
	return []rowSpec{row("on", true), row("off", false)}
}

// backpressureRatios compares the rows.
func backpressureRatios(rows []*rowResult, lineRate int64) []ratio {
	on, off := findRow(rows, "on"), findRow(rows, "off")
	var out []ratio
	if on != nil && off != nil {
		out = append(out, ratioOf("on/off", "receiver throughput (datagrams), backpressure on/off", on, off, false))
		mOn, _, _, _ := on.median()
		mOff, _, _, _ := off.median()
		segs, _ := bpSendSegs()
		q := ratio{Key: "on/off goodput", Text: fmt.Sprintf("message goodput (sends whose %d datagrams all arrived), backpressure on/off", segs)}
		if mOff.GoodputBps > 0 {
			q.Value = mOn.GoodputBps / mOff.GoodputBps
		} else {
			q.Text += "; off delivered no whole message, so the ratio is infinite"
			q.Value = math.Inf(1)
		}
		out = append(out, q)
	}
	for _, r := range []*rowResult{on, off} {
		if r == nil {
			continue
		}
		if m, _, _, ok := r.median(); ok && m.Lost != nil && m.Extra["datagrams_sent"] > 0 {
			sent := m.Extra["datagrams_sent"]
			out = append(out, ratio{
				Key:   r.spec.name + " delivered",
				Text:  "datagrams received / datagrams sent over the whole run, backpressure " + r.spec.name,
				Value: 1 - float64(*m.Lost)/sent, Form: percent,
				A: operand{r.spec.name + " received", sent - float64(*m.Lost), "datagrams"},
				B: operand{r.spec.name + " sent", sent, "datagrams"},
			})
		}
	}
	if on != nil && lineRate > 0 {
		if m, _, _, ok := on.median(); ok {
			out = append(out, ratio{
				Key:   "on/line-rate",
				Text:  "receiver throughput with backpressure on / line rate (IP bytes, as the pacer counts)",
				Value: m.ThroughputBps * (bpSize + udpIPOverhead) / bpSize / float64(lineRate),
				Form:  percent,
			})
		}
	}
	return out
}
