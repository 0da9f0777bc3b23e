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
//	(floor) the floor (floor_linux.go): TUN ⇄ packet socket, whole
//	    super-packets, two copies each way, nothing else.
//
// (a) and (b) use the AF_XDP port (rows xdp and xdp-no-offload). With iperf3 installed, three last rows
// run iperf3 processes through (a), the default gateway and the kernel
// alone.

import (
	"context"
	"errors"
	"os/exec"

	"github.com/gsoplane/gsoplane/dataplane"
	"github.com/gsoplane/gsoplane/dataplane/afpacket"
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

// xdpNoCsum is the xdp row's gateway computing every checksum
// itself: AF_XDP without TX checksum offload.
func xdpNoCsum() dataplane.GatewayConfig {
	cfg := xdpTUNConfig(true)
	cfg.XDP.DisableTXChecksum = true
	return cfg
}

func gsoRows(opts measureOpts) []rowSpec {
	gw, xdp := gatewayTCPRow, xdpTUNConfig
	packet := func(mode afpacket.GSOMode) dataplane.GatewayConfig {
		return dataplane.GatewayConfig{Port: dataplane.PortPacket, Packet: dataplane.PacketOptions{GSO: mode}, DisableGRO: true}
	}
	rows := []rowSpec{
		gw("default", dataplane.GatewayConfig{}).copying(inPlaceCopies).asProduct(),
		floorRow(false),
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
		gw("packet-offload", packet(afpacket.GSOModeAuto)).copying(inPlaceCopies),
		gw("packet-partial", packet(afpacket.GSOModePartial)),
		gw("packet-full", packet(afpacket.GSOModeFull)),
		gw("xdp", xdp(true)),
		gw("xdp-no-csum", xdpNoCsum()),
		gw("xdp-no-offload", xdp(false)),
	}
	if iperf3Skipped() == "" {
		def, xdpCfg := dataplane.GatewayConfig{}, xdp(true)
		rows = append(rows,
			iperf3Row("default-iperf3", &def, opts).copying(inPlaceCopies),
			iperf3Row("xdp-iperf3", &xdpCfg, opts).copying(forwardCopies),
			iperf3Row("kernel-iperf3", nil, opts).copying(kernelCopies))
	}
	return rows
}

// iperf3Row is a row of one iperf3 TCP stream from A to B (processes of
// their own, as a deployment's applications are) through a gateway
// configured by cfg, or, for nil, routed by the kernel alone.
func iperf3Row(name string, cfg *dataplane.GatewayConfig, opts measureOpts) rowSpec {
	return rowSpec{name: name, units: tcpUnits, retrans: true, ppsAtB: cfg == nil, start: func(ctx context.Context) (trial, error) {
		return withLab(func(l *lab) (*labTrial, error) {
			if cfg == nil {
				if err := l.RouteKernel(); err != nil {
					return nil, err
				}
				ip, err := startIperf3(ctx, l, srv4, opts.warmup, opts.duration)
				if err != nil {
					return nil, err
				}
				return &labTrial{tr: ip, rxAtB: true}, nil
			}
			g, err := startGateway(l, *cfg)
			if err != nil {
				return nil, err
			}
			ip, err := startIperf3(ctx, l, srv4, opts.warmup, opts.duration)
			if err != nil {
				return nil, errors.Join(err, g.stop())
			}
			return &labTrial{dp: gwDataplane{gateway: g, ipBytesAsRx: true}, tr: ip, rxAtB: true}, nil
		})
	}}
}

// iperf3Skipped says why the iperf3 rows are left out, or "".
func iperf3Skipped() string {
	if _, err := exec.LookPath("iperf3"); err != nil {
		return "iperf3 is not installed: the *-iperf3 rows are skipped (apt-get install iperf3 adds them)"
	}
	return ""
}

func gsoRatios(rows []*rowResult) []ratio {
	return append(throughputRatios(rows, []ratioSpec{
		{"default", "floor", "TCP throughput, the default gateway / the floor (TUN ⇄ packet socket, two copies each way)"},
		{"default", "kernel", "TCP throughput, the default gateway (GatewayConfig's zero value: PortAuto) / kernel only"},
		{"floor", "kernel", "TCP throughput, the floor / kernel only: what two copies each way cost"},
		{"xdp", "xdp-no-offload", "TCP throughput, gsoplane GSO over AF_XDP / kernel-segmented TUN (no offloads)"},
		{"xdp", "xdp-no-csum", "TCP throughput, AF_XDP with TX checksum offload (Linux 6.11) / without"},
		{"xdp", "kernel", "TCP throughput, the AF_XDP port / kernel only (upper bound)"},
		{"packet-offload", "kernel", "TCP throughput, AF_PACKET with the NIC segmenting / kernel only"},
		{"packet-full", "xdp", "TCP throughput, AF_PACKET with complete segments / AF_XDP"},
		{"packet-partial", "packet-full", "TCP throughput, AF_PACKET, partial checksums / complete segments"},
		{"packet-offload", "xdp", "TCP throughput, AF_PACKET with the NIC segmenting / AF_XDP"},
		{"default-iperf3", "kernel-iperf3", "TCP throughput, iperf3 processes: the default gateway / kernel only"},
		{"xdp-iperf3", "xdp", "TCP throughput, the AF_XDP row with iperf3 processes / with the bench's own streams"},
	}), costRatios(rows, []ratioSpec{
		{"default", "floor", "the gateway's cores per Gbit/s, the default gateway / the floor"},
	})...)
}
