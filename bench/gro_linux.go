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
	"fmt"

	"github.com/gsoplane/gsoplane/dataplane"
	"github.com/gsoplane/gsoplane/dataplane/tun"
)

func groRows() []rowSpec {
	tcpUnits := units{sent: "bytes", received: "packets at gw-b"}
	gw := gatewayRow
	on := dataplane.GatewayConfig{TUN: tun.Config{Offload: true}, Backpressure: true, GRO: true}
	off := on
	off.GRO = false
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
	}
}

// gatewayRow runs streams TCP streams through a gateway configured by
// cfg, from B to A (toA: the return path) or from A to B.
func gatewayRow(name string, cfg dataplane.GatewayConfig, streams int, toA bool) rowSpec {
	return rowSpec{name: name, units: units{sent: "bytes", received: "packets at gw-b"}, retrans: true, start: func(ctx context.Context) (trial, error) {
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

func groRatios(rows []*rowResult) []ratio {
	var out []ratio
	for _, c := range []struct{ a, b, text string }{
		{"gro", "no-gro", "TCP B→A throughput, GRO on / off"},
		{"gro", "forward", "TCP throughput, return path with GRO / forward path, same build"},
		{"gro", "wireguard-go", "TCP B→A throughput, our GRO / wireguard-go's TUN writer"},
		{"gro", "kernel", "TCP B→A throughput, gsoplane / kernel only (upper bound)"},
	} {
		if a, b := findRow(rows, c.a), findRow(rows, c.b); a != nil && b != nil {
			out = append(out, ratioOf(c.a+"/"+c.b, c.text, a, b, false))
		}
	}
	return out
}

// queuesRows are the gateway with one and two queues (TUN and NIC), with
// one and two TCP streams, forward (A→B) and reverse (B→A).
func queuesRows() []rowSpec {
	var rows []rowSpec
	for _, dir := range []struct {
		name string
		toA  bool
	}{{"fwd", false}, {"rev", true}} {
		for _, q := range []int{1, 2} {
			for _, flows := range []int{1, 2} {
				cfg := dataplane.GatewayConfig{TUN: tun.Config{Offload: true, Queues: q}, Backpressure: true, GRO: true}
				rows = append(rows, gatewayRow(fmt.Sprintf("%s-%dq-%df", dir.name, q, flows), cfg, flows, dir.toA))
			}
		}
	}
	return rows
}

func queuesRatios(rows []*rowResult) []ratio {
	var out []ratio
	for _, dir := range []string{"fwd", "rev"} {
		for _, flows := range []int{1, 2} {
			a, b := fmt.Sprintf("%s-2q-%df", dir, flows), fmt.Sprintf("%s-1q-%df", dir, flows)
			if ra, rb := findRow(rows, a), findRow(rows, b); ra != nil && rb != nil {
				out = append(out, ratioOf(a+"/"+b, fmt.Sprintf("%d stream(s) %s, two queues / one queue", flows, dir), ra, rb, false))
			}
		}
	}
	return out
}
