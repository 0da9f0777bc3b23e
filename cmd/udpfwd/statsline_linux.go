package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/gsoplane/gsoplane/dataplane"
)

// printStats writes one line per interval with the rates since the last
// line, until ctx ends (-v).
func printStats(ctx context.Context, w io.Writer, stats func() dataplane.GatewayStats, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	prev, last := stats(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			cur := stats()
			fmt.Fprintln(w, statsLine(prev, cur, now.Sub(last)))
			prev, last = cur, now
		}
	}
}

// statsLine describes the change from a to b over d.
func statsLine(a, b dataplane.GatewayStats, d time.Duration) string {
	sec := d.Seconds()
	rate := func(x, y uint64) float64 { return float64(y-x) / sec }
	segs := float64(b.Forward.Segments - a.Forward.Segments)
	sps := float64(b.Forward.SuperPackets - a.Forward.SuperPackets)
	pkts := float64(b.Return.Packets - a.Return.Packets)
	writes := float64(b.Return.Writes - a.Return.Writes)
	return fmt.Sprintf("udpfwd: tun->nic %.0f super/s %.0f seg/s (%.1f seg/super) %.1f Mbit/s | nic->tun %.0f pkt/s %.0f writes/s (%.2f writes/pkt) %.1f Mbit/s | drops %d | budget %d/%d B | queue %d | stalls %.0f/s",
		sps/sec, segs/sec, segs/max(sps, 1), rate(a.Forward.Bytes, b.Forward.Bytes)*8/1e6,
		pkts/sec, writes/sec, writes/max(pkts, 1), rate(a.Return.Bytes, b.Return.Bytes)*8/1e6,
		totalDrops(b)-totalDrops(a), b.Budget.InFlight, b.Budget.Limit,
		b.Queue.Pending+b.Queue.InFlight,
		rate(a.Budget.Stalls+a.Queue.Stalls+a.Forward.FrameStalls, b.Budget.Stalls+b.Queue.Stalls+b.Forward.FrameStalls))
}

// totalDrops sums the drops of both directions.
func totalDrops(s dataplane.GatewayStats) uint64 {
	return s.Forward.Drops.Total() + s.Return.Drops.Total()
}
