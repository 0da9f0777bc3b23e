package main

// Scenario "gro": the return path (NIC → TUN), measured with TCP streams
// from B to the application in A. The gateway's return path takes the
// packets from its AF_XDP sockets and writes them into the TUN device:
// with GRO merged into super-packets (one write each), without one write
// per packet. The kernel alone, wireguard-go's TUN writer, the forward
// direction of the same build and a two-queue gateway are the
// comparisons, in the same run.

import (
	"context"
	"errors"

	"github.com/gsoplane/gsoplane/dataplane"
	"github.com/gsoplane/gsoplane/dataplane/tun"
)

func groRows() []rowSpec {
	tcpUnits := units{sent: "bytes", received: "packets at gw-b"}
	// gw runs streams TCP streams through a gateway configured by cfg,
	// from B to A (toA) or from A to B.
	gw := func(name string, cfg dataplane.GatewayConfig, streams int, toA bool) rowSpec {
		return rowSpec{name: name, units: tcpUnits, retrans: true, start: func(ctx context.Context) (trial, error) {
			return withLab(func(l *lab) (*labTrial, error) {
				g, err := startGateway(l, cfg)
				if err != nil {
					return nil, err
				}
				s, err := startTCPStreams(l, streams, toA, tcpPort)
				if err != nil {
					return nil, errors.Join(err, g.stop())
				}
				return &labTrial{dp: gwDataplane{gateway: g, reverse: toA}, tr: tcpTraffic{s}, rxAtB: !toA}, nil
			})
		}}
	}
	on := dataplane.GatewayConfig{TUN: tun.Config{Offload: true}, Backpressure: true, GRO: true}
	off, twoQueues := on, on
	off.GRO = false
	twoQueues.TUN.Queues = 2
	return []rowSpec{
		gw("gro", on, 1, true),
		gw("no-gro", off, 1, true),
		{name: "kernel", units: tcpUnits, retrans: true, start: func(ctx context.Context) (trial, error) {
			return withLab(func(l *lab) (*labTrial, error) {
				// No TUN: the application's address lives on A's lo.
				if err := errors.Join(l.A.AddAddr("lo", app4.String()+"/32"), l.RouteKernel()); err != nil {
					return nil, err
				}
				s, err := startTCPStreams(l, 1, true, tcpPort)
				if err != nil {
					return nil, err
				}
				return &labTrial{tr: tcpTraffic{s}}, nil
			})
		}},
		{name: "wireguard-go", units: tcpUnits, retrans: true, start: func(ctx context.Context) (trial, error) {
			return withLab(func(l *lab) (*labTrial, error) {
				host, _, err := wireguardHost(l)
				if err != nil {
					return nil, err
				}
				g, err := startGateway(l, dataplane.GatewayConfig{Host: host, Backpressure: true})
				if err != nil {
					return nil, errors.Join(err, host.Close())
				}
				s, err := startTCPStreams(l, 1, true, tcpPort)
				if err != nil {
					return nil, errors.Join(err, g.stop())
				}
				return &labTrial{dp: gwDataplane{gateway: g, reverse: true}, tr: tcpTraffic{s}}, nil
			})
		}},
		gw("forward", on, 1, false),
		gw("gro-1q-2s", on, 2, true),
		gw("gro-2q-2s", twoQueues, 2, true),
	}
}

func groRatios(rows []*rowResult) []ratio {
	var out []ratio
	for _, c := range []struct{ a, b, text string }{
		{"gro", "no-gro", "TCP B→A throughput, GRO on / off"},
		{"gro", "forward", "TCP throughput, return path with GRO / forward path, same build"},
		{"gro", "wireguard-go", "TCP B→A throughput, our GRO / wireguard-go's TUN writer"},
		{"gro", "kernel", "TCP B→A throughput, gsoplane / kernel only (upper bound)"},
		{"gro-2q-2s", "gro-1q-2s", "two streams B→A, two queues / one queue"},
	} {
		if a, b := findRow(rows, c.a), findRow(rows, c.b); a != nil && b != nil {
			out = append(out, ratioOf(c.a+"/"+c.b, c.text, a, b, false))
		}
	}
	return out
}
