package main

// Scenario "gso" is the TCP half of "disabling GSO the wrong way"
// (seeds/gso-disabled-wrong-way.txt): one TCP stream from A to B
//
//	(a) through the gateway with TUN offloads: the kernel hands over
//	    64 KiB super-packets and gsoplane segments them;
//	(b) through the same gateway with TUN offloads off: the kernel
//	    segments before the TUN and the gateway reads one packet at a time;
//	(c) with no userspace at all: A routes B's prefix straight out of gw-a
//	    and the kernel carries super-packets across the veth (the upper
//	    bound; nothing is segmented anywhere).
//
// With iperf3 installed, a fourth row runs iperf3 through (a).

import (
	"context"
	"errors"
	"os/exec"

	"github.com/gsoplane/gsoplane/dataplane"
	"github.com/gsoplane/gsoplane/dataplane/tun"
)

const tcpPort = 5201

func gsoRows(opts measureOpts) []rowSpec {
	tcpUnits := units{sent: "bytes", received: "packets at gw-b"}
	gw := func(name string, offload bool) rowSpec {
		return rowSpec{name: name, units: tcpUnits, retrans: true, start: func(ctx context.Context) (trial, error) {
			return withLab(func(l *lab) (*labTrial, error) {
				g, err := startGateway(l, dataplane.GatewayConfig{TUN: tun.Config{Offload: offload}, Backpressure: true})
				if err != nil {
					return nil, err
				}
				s, err := startTCPStreams(l, 1, false, tcpPort)
				if err != nil {
					return nil, errors.Join(err, g.stop())
				}
				return &labTrial{dp: gwDataplane{gateway: g}, tr: tcpTraffic{s}, rxAtB: true}, nil
			})
		}}
	}
	rows := []rowSpec{
		gw("gsoplane", true),
		gw("no-offload", false),
		{name: "kernel", units: tcpUnits, retrans: true, ppsAtB: true, start: func(ctx context.Context) (trial, error) {
			return withLab(func(l *lab) (*labTrial, error) {
				if err := l.RouteKernel(); err != nil {
					return nil, err
				}
				s, err := startTCPStreams(l, 1, false, tcpPort)
				if err != nil {
					return nil, err
				}
				return &labTrial{tr: tcpTraffic{s}, rxAtB: true}, nil
			})
		}},
	}
	if iperf3Skipped() == "" {
		rows = append(rows, rowSpec{name: "gsoplane-iperf3", units: tcpUnits, retrans: true, start: func(ctx context.Context) (trial, error) {
			return withLab(func(l *lab) (*labTrial, error) {
				g, err := startGateway(l, dataplane.GatewayConfig{TUN: tun.Config{Offload: true}, Backpressure: true})
				if err != nil {
					return nil, err
				}
				ip, err := startIperf3(ctx, l, srv4, opts.warmup, opts.duration)
				if err != nil {
					return nil, errors.Join(err, g.stop())
				}
				return &labTrial{dp: gwDataplane{gateway: g, ipBytesAsRx: true}, tr: ip, rxAtB: true}, nil
			})
		}})
	}
	return rows
}

// iperf3Skipped says why the gsoplane-iperf3 row is left out, or "".
func iperf3Skipped() string {
	if _, err := exec.LookPath("iperf3"); err != nil {
		return "iperf3 is not installed: the gsoplane-iperf3 row is skipped (apt-get install iperf3 adds it)"
	}
	return ""
}

func gsoRatios(rows []*rowResult) []ratio {
	g, n, k := findRow(rows, "gsoplane"), findRow(rows, "no-offload"), findRow(rows, "kernel")
	var out []ratio
	if g != nil && n != nil {
		out = append(out, ratioOf("gsoplane/no-offload", "TCP throughput, gsoplane GSO / kernel-segmented TUN (no offloads)", g, n, false))
	}
	if g != nil && k != nil {
		out = append(out, ratioOf("gsoplane/kernel", "TCP throughput, gsoplane / kernel only (upper bound)", g, k, false))
	}
	return out
}
