package main

import (
	"context"
	"log/slog"
	"math"
	"time"

	"github.com/gsoplane/gsoplane/dataplane"
)

// logStats logs one "stats" record per interval with the rates since the
// last one, until ctx ends (-v).
func logStats(ctx context.Context, log *slog.Logger, stats func() dataplane.GatewayStats, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	prev, last := stats(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			cur := stats()
			log.Info("stats", statsAttrs(prev, cur, now.Sub(last))...)
			prev, last = cur, now
		}
	}
}

// statsAttrs describes the change from a to b over d: rates per second
// each way, drops, budget, queue and stalls.
func statsAttrs(a, b dataplane.GatewayStats, d time.Duration) []any {
	sec := d.Seconds()
	rate := func(x, y uint64) float64 { return round(float64(y-x) / sec) }
	segs := float64(b.Forward.Segments - a.Forward.Segments)
	sps := float64(b.Forward.SuperPackets - a.Forward.SuperPackets)
	pkts := float64(b.Return.Packets - a.Return.Packets)
	writes := float64(b.Return.Writes - a.Return.Writes)
	return []any{
		slog.Group("tun_to_nic",
			"super_per_s", rate(a.Forward.SuperPackets, b.Forward.SuperPackets),
			"segments_per_s", rate(a.Forward.Segments, b.Forward.Segments),
			"segments_per_super", round(segs/max(sps, 1)),
			"mbit_per_s", round(rate(a.Forward.Bytes, b.Forward.Bytes)*8/1e6)),
		slog.Group("nic_to_tun",
			"packets_per_s", rate(a.Return.Packets, b.Return.Packets),
			"writes_per_s", rate(a.Return.Writes, b.Return.Writes),
			"writes_per_packet", round(writes/max(pkts, 1)),
			"mbit_per_s", round(rate(a.Return.Bytes, b.Return.Bytes)*8/1e6)),
		"drops", totalDrops(b) - totalDrops(a),
		"budget_bytes", b.Budget.InFlight, "budget_limit_bytes", b.Budget.Limit,
		"queue_segments", b.Queue.Pending + b.Queue.InFlight,
		"stalls_per_s", rate(a.Budget.Stalls+a.Queue.Stalls+a.Forward.FrameStalls, b.Budget.Stalls+b.Queue.Stalls+b.Forward.FrameStalls),
	}
}

// round keeps two decimals.
func round(x float64) float64 { return math.Round(x*100) / 100 }

// totalDrops sums the drops of both directions.
func totalDrops(s dataplane.GatewayStats) uint64 {
	return s.Forward.Drops.Total() + s.Return.Drops.Total()
}
