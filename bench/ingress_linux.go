package main

// Scenario "ingress": one TCP stream from C to B, where C
// is a container behind a veth into A whose side keeps TSO (netlab
// AddIngress), and so hands A 64 KiB super-packets:
//
//	floor:   the floor (floor_linux.go): a packet socket on gw-c, one on
//	         gw-a, whole super-packets, two copies, nothing else;
//	xdp:     the gateway's ingress port on gw-c (GatewayConfig.Ingress,
//	         AF_XDP in generic mode, which keeps the peer's TSO: native
//	         XDP on a veth turns it off) cuts them to gw-a's MTU
//	         (pipeline.WireSource) and sends them through its AF_XDP port;
//	packet:  both ports AF_PACKET: each super-packet leaves whole with
//	         its virtio-net header, gw-a's TSO cuts it;
//	packet-cut: the same, the gateway cutting every super-packet itself
//	         (PacketGSOPartial, checksums by gw-a): what packet saves;
//	kernel:  no gateway, A forwards as a router (GRO and GSO by the
//	         kernel);
//	tun:     the gso scenario's xdp row: the same gateway build with
//	         the TUN source, the stream from A.

import (
	"context"
	"errors"

	"github.com/gsoplane/gsoplane/dataplane"
	"github.com/gsoplane/gsoplane/dataplane/afpacket"
	"github.com/gsoplane/gsoplane/dataplane/xsk"
)

func ingressRows() []rowSpec {
	return []rowSpec{
		ingressTCPRow("packet", false, ingressPacket(afpacket.GSOModeAuto)).copying(inPlaceCopies),
		ingressTCPRow("floor", false, func(l *lab) (dataplaneUnderTest, error) { return startIngressFloor(l) }).copying(floorCopies),
		ingressTCPRow("xdp", false, func(l *lab) (dataplaneUnderTest, error) {
			g, err := startGateway(l, ingressConfig(dataplane.PortXDP, xsk.ModeGeneric, nil))
			if err != nil {
				return nil, err
			}
			return gwDataplane{gateway: g}, nil
		}).copying(forwardCopies + wireCopies + chainCopies),
		ingressTCPRow("packet-cut", false, ingressPacket(afpacket.GSOModePartial)).copying(forwardCopies),
		ingressTCPRow("kernel", true, func(l *lab) (dataplaneUnderTest, error) {
			return nil, errors.Join(l.A.Sysctl("net/ipv4/ip_forward", "1"), l.RouteKernel())
		}).copying(kernelCopies),
		gatewayTCPRow("tun", xdpTUNConfig(true)),
	}
}

// ingressPacket starts a gateway whose ports, on gw-c and gw-a, are
// AF_PACKET in the given mode.
func ingressPacket(mode afpacket.GSOMode) func(l *lab) (dataplaneUnderTest, error) {
	return func(l *lab) (dataplaneUnderTest, error) {
		cfg := ingressConfig(dataplane.PortPacket, xsk.ModeAuto, nil)
		cfg.XDP, cfg.Packet.GSO = dataplane.XDPOptions{}, mode
		g, err := startGateway(l, cfg)
		if err != nil {
			return nil, err
		}
		return gwDataplane{gateway: g}, nil
	}
}

// ingressTCPRow is a row of one TCP stream from C to B, through what
// setup builds in A (a nil dataplane: the kernel forwards; ppsAtB then
// counts gw-b's packets).
func ingressTCPRow(name string, ppsAtB bool, setup func(l *lab) (dataplaneUnderTest, error)) rowSpec {
	return rowSpec{name: name, units: tcpUnits, retrans: true, ppsAtB: ppsAtB, start: func(ctx context.Context) (trial, error) {
		return withLab(func(l *lab) (*labTrial, error) {
			if err := l.AddIngress(ingressMTU, 2); err != nil {
				return nil, err
			}
			dp, err := setup(l)
			if err != nil {
				return nil, err
			}
			s, err := startStream(l.C, l.B, srv4, tcpPort)
			if err != nil {
				if dp != nil {
					err = errors.Join(err, dp.stop())
				}
				return nil, err
			}
			return &labTrial{dp: dp, tr: tcpTraffic{tcpStreams{s}}, rxAtB: true}, nil
		})
	}}
}

func ingressRatios(rows []*rowResult) []ratio {
	return append(throughputRatios(rows, []ratioSpec{
		{"packet", "floor", "TCP throughput C→B, AF_PACKET ports, super-packets leaving whole / the floor (packet socket → packet socket)"},
		{"floor", "kernel", "TCP throughput C→B, the floor / the kernel forwarding: what two copies each way cost"},
		{"xdp", "kernel", "TCP throughput C→B, the gateway's AF_XDP ingress port / the kernel forwarding"},
		{"packet", "kernel", "TCP throughput C→B, AF_PACKET ports, super-packets leaving whole / the kernel forwarding"},
		{"packet", "packet-cut", "TCP throughput C→B, AF_PACKET ports, super-packets leaving whole / cut by the gateway"},
		{"packet", "xdp", "TCP throughput C→B, AF_PACKET ports leaving whole / AF_XDP ports"},
		{"xdp", "tun", "TCP throughput, the AF_XDP ingress port (C→B) / the TUN source (A→B), same TX path"},
		{"tun", "kernel", "TCP throughput, the TUN source (A→B) / the kernel forwarding C→B"},
	}), costRatios(rows, []ratioSpec{
		{"packet", "floor", "the gateway's cores per Gbit/s, AF_PACKET ingress / the floor"},
	})...)
}
