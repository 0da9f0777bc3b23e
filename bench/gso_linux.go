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
//	    bound; nothing is segmented anywhere);
//	(default) through the gateway as its zero GatewayConfig opens it:
//	    PortAuto's choice (on the veth, without AF_XDP zero-copy, the
//	    AF_PACKET port handing super-packets to the veth whole), GRO on;
//	(d) through the gateway with the AF_PACKET port in place of AF_XDP,
//	    in each of its TX modes: offload (afpacket.GSOModeAuto: the veth
//	    advertises TSO, so whole super-packets go to it, as they would to
//	    a NIC with TSO, and cross it unsegmented), partial (gsoplane
//	    segments, the NIC completes the checksums) and full (complete
//	    segments, as from AF_XDP).
//
// (a) and (b) use the AF_XDP port. With iperf3 installed, a last row runs
// iperf3 through (a).

import (
	"context"
	"errors"
	"os/exec"

	"github.com/gsoplane/gsoplane/dataplane"
)

const tcpPort = 5201

// tcpUnits are the units of the rows of one TCP stream.
var tcpUnits = units{sent: "bytes", received: "packets at gw-b"}

// gatewayTCPRow is a row of one TCP stream from A to B through a gateway
// configured by cfg.
func gatewayTCPRow(name string, cfg dataplane.GatewayConfig) rowSpec {
	return rowSpec{name: name, units: tcpUnits, retrans: true, start: func(ctx context.Context) (trial, error) {
		return withLab(func(l *lab) (*labTrial, error) {
			g, err := startGateway(l, cfg)
			if err != nil {
				return nil, err
			}
			s, err := startTCPStreams(l, 1, false, tcpPort)
			if err != nil {
				return nil, errors.Join(err, g.stop())
			}
			return &labTrial{dp: gwDataplane{gateway: g}, tr: tcpTraffic{s}, rxAtB: true}, nil
		})
	}}.copying(forwardCopies)
}

// xdpTUNConfig is the gateway of the gso scenario's AF_XDP rows: the TUN
// device with or without offloads, the AF_XDP port, backpressure.
func xdpTUNConfig(offload bool) dataplane.GatewayConfig {
	return dataplane.GatewayConfig{TUN: dataplane.TUNOptions{DisableOffload: !offload}, Port: dataplane.PortXDP, DisableGRO: true}
}

// xdpNoCsum is the gsoplane row's gateway computing every checksum
// itself: AF_XDP without TX checksum offload.
func xdpNoCsum() dataplane.GatewayConfig {
	cfg := xdpTUNConfig(true)
	cfg.XDP.DisableTXChecksum = true
	return cfg
}

func gsoRows(opts measureOpts) []rowSpec {
	gw, xdp := gatewayTCPRow, xdpTUNConfig
	packet := func(mode dataplane.PacketGSO) dataplane.GatewayConfig {
		return dataplane.GatewayConfig{Port: dataplane.PortPacket, Packet: dataplane.PacketOptions{GSO: mode}, DisableGRO: true}
	}
	rows := []rowSpec{
		gw("default", dataplane.GatewayConfig{}).copying(inPlaceCopies),
		gw("gsoplane", xdp(true)),
		gw("xdp-no-csum", xdpNoCsum()),
		gw("no-offload", xdp(false)),
		rowSpec{name: "kernel", units: tcpUnits, retrans: true, ppsAtB: true, start: func(ctx context.Context) (trial, error) {
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
		}}.copying(kernelCopies),
		gw("packet-offload", packet(dataplane.PacketGSOAuto)).copying(inPlaceCopies),
		gw("packet-partial", packet(dataplane.PacketGSOPartial)),
		gw("packet-full", packet(dataplane.PacketGSOFull)),
	}
	if iperf3Skipped() == "" {
		rows = append(rows, rowSpec{name: "gsoplane-iperf3", units: tcpUnits, retrans: true, start: func(ctx context.Context) (trial, error) {
			return withLab(func(l *lab) (*labTrial, error) {
				g, err := startGateway(l, xdp(true))
				if err != nil {
					return nil, err
				}
				ip, err := startIperf3(ctx, l, srv4, opts.warmup, opts.duration)
				if err != nil {
					return nil, errors.Join(err, g.stop())
				}
				return &labTrial{dp: gwDataplane{gateway: g, ipBytesAsRx: true}, tr: ip, rxAtB: true}, nil
			})
		}}.copying(forwardCopies))
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
	return throughputRatios(rows, []ratioSpec{
		{"default", "kernel", "TCP throughput, the default gateway (GatewayConfig's zero value: PortAuto) / kernel only"},
		{"gsoplane", "no-offload", "TCP throughput, gsoplane GSO / kernel-segmented TUN (no offloads)"},
		{"gsoplane", "xdp-no-csum", "TCP throughput, AF_XDP with TX checksum offload (Linux 6.11) / without"},
		{"gsoplane", "kernel", "TCP throughput, gsoplane / kernel only (upper bound)"},
		{"packet-offload", "kernel", "TCP throughput, AF_PACKET with the NIC segmenting / kernel only"},
		{"packet-full", "gsoplane", "TCP throughput, AF_PACKET with complete segments / AF_XDP"},
		{"packet-partial", "packet-full", "TCP throughput, AF_PACKET, partial checksums / complete segments"},
		{"packet-offload", "gsoplane", "TCP throughput, AF_PACKET with the NIC segmenting / AF_XDP"},
	})
}
