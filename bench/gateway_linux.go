package main

import (
	"context"
	"errors"

	"github.com/gsoplane/gsoplane/dataplane"
	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/txqueue"
)

// gateway is a dataplane.Gateway running between the TUN device in A and
// gw-a.
type gateway struct {
	g      *dataplane.Gateway
	cancel context.CancelFunc
	done   chan error
}

// startGateway opens a gateway in A configured by cfg (names and routes
// are filled in), brings its TUN device up with A's addresses and routes
// (a Host's device is the caller's to set up; with an ingress device
// there is none), and runs it.
func startGateway(l *lab, cfg dataplane.GatewayConfig) (*gateway, error) {
	cfg.TUN.Name, cfg.NIC, cfg.Routes = tunName, nicA, aRoutes
	gw := &gateway{done: make(chan error, 1)}
	err := l.A.Run(func() error {
		var err error
		gw.g, err = dataplane.OpenGateway(cfg)
		return err
	})
	if err != nil {
		return nil, err
	}
	if cfg.Host == nil && cfg.Ingress.Device == "" {
		if err := l.TUNUp(tunName); err != nil {
			return nil, errors.Join(err, gw.g.Close())
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	gw.cancel = cancel
	go func() { gw.done <- gw.g.Run(ctx) }()
	return gw, nil
}

// stop stops the gateway and closes it.
func (gw *gateway) stop() error {
	gw.cancel()
	return errors.Join(<-gw.done, gw.g.Close())
}

// counters fills in the dataplane side of c.
func (gw *gateway) counters(c *counters) {
	st := gw.g.Stats()
	c.Segments = st.Forward.Transmitted
	if st.Forward.Offloaded > 0 {
		// A super-packet the NIC segments (AF_PACKET) counts once in
		// Transmitted; Segments counts each segment it becomes.
		c.Segments = st.Forward.Segments
	}
	c.Reads = st.Forward.SuperPackets
	// Not the host's own link-local traffic into the TUN (MLD reports,
	// router solicitations), which a router does not forward: it is
	// not the measured traffic, and it comes at random times.
	c.Drops = st.Forward.Drops.Total() - st.Forward.Drops[frame.DropNotRouted] + st.Return.Drops.Total()
	c.RetPackets, c.RetWrites = st.Return.Packets, st.Return.Writes
	c.BudgetInFlight, c.BudgetLimit = st.Budget.InFlight, st.Budget.Limit
}

// extra are the gateway's whole-run waits (where the forwarder held
// back) and its kernel crossings: AF_XDP kicks, or AF_PACKET sendmmsg
// calls, per super-packet read, and what the AF_PACKET port handed the
// NIC (whole super-packets, partial checksums) and took from it (the
// kernel's GRO super-packets).
func (gw *gateway) extra() map[string]float64 {
	st := gw.g.Stats()
	m := waits(st.Forward, st.Budget, st.Queue)
	per := func(n uint64) float64 { return float64(n) / float64(max(st.Forward.SuperPackets, 1)) }
	switch gw.g.Port() {
	case dataplane.PortXDP:
		var kicks uint64
		for _, x := range st.Port.Sockets {
			kicks += x.Counter("kicks")
		}
		m["xsk_kicks_per_super_packet"] = per(kicks)
	case dataplane.PortPacket:
		var rx, tx uint64
		sum := map[string]uint64{}
		for _, x := range st.Port.Sockets {
			rx, tx = rx+x.RX, tx+x.TX
			for _, c := range x.Counters {
				sum[c.Name] += c.Value
			}
		}
		m["packet_sendmmsg_per_super_packet"] = per(sum["tx_calls"])
		m["packet_tx_frames"] = float64(tx)
		m["packet_tx_super"] = float64(sum["tx_super"])
		m["packet_tx_partial"] = float64(sum["tx_partial"])
		m["packet_tx_busy"] = float64(sum["tx_busy"])
		m["packet_rx_frames"] = float64(rx)
		m["packet_rx_super"] = float64(sum["rx_super"])
		m["packet_rx_per_recvmmsg"] = float64(rx) / float64(max(sum["rx_calls"], 1))
		m["packet_rx_kernel_drops"] = float64(sum["rx_kernel_drop"])
	}
	return m
}

// waits summarises a forwarder's waits for the JSON "extra" object.
func waits(f pipeline.Stats, b txqueue.BudgetStats, q txqueue.Stats) map[string]float64 {
	m := map[string]float64{
		"frame_stalls":       float64(f.FrameStalls),
		"budget_stalls":      float64(b.Stalls),
		"budget_stall_ms":    float64(b.StallTime.Milliseconds()),
		"budget_peak_bytes":  float64(b.Peak),
		"queue_stalls":       float64(q.Stalls),
		"queue_stall_ms":     float64(q.StallTime.Milliseconds()),
		"tx_latency_mean_us": 0,
	}
	if f.Completed > 0 {
		m["tx_latency_mean_us"] = float64(f.TxLatencySum.Microseconds()) / float64(f.Completed)
	}
	return m
}
