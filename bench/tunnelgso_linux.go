package main

// Scenario "tunnel-gso": one TCP stream from A to B through a VXLAN
// overlay whose underlay goes through the gateway:
//
//	on:      the default port (AF_PACKET on the veth), the TUN with the
//	         UDP-tunnel offloads (Linux 6.17): the kernel hands over whole
//	         VXLAN super-packets and gsoplane cuts them;
//	off:     the same gateway with the TUN's tunnel offloads switched off
//	         (ethtool -K tx-udp_tnl-segmentation off): the kernel cuts the
//	         VXLAN traffic before the TUN and the gateway reads one packet
//	         at a time;
//	xdp-on, xdp-off: the same two with the AF_XDP port;
//	kernel:  no userspace: A routes the underlay straight out of gw-a.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/gsoplane/gsoplane/dataplane"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// The overlay: a VXLAN device in A and one in B, these addresses on them.
var (
	overlayA = netip.MustParseAddr("198.18.202.1")
	overlayB = netip.MustParseAddr("198.18.202.2")
)

const (
	vxlanName = "vx0"
	vxlanMTU  = 1450 // VXLAN over IPv4 in the veth's 1500
)

var tunnelGSOScenario = scenarioDef{
	name: "tunnel-gso",
	title: func(o options) string {
		return "tunnel-gso: one TCP stream A→B through a VXLAN overlay whose underlay goes through the gateway (the default port, AF_PACKET here, and AF_XDP) — the TUN's UDP-tunnel offloads on (gsoplane cuts VXLAN super-packets) vs off (the kernel cuts before the TUN) vs kernel only"
	},
	rows:   func(o options) []rowSpec { return tunnelGSORows() },
	ratios: func(rows []*rowResult, o options) []ratio { return tunnelGSORatios(rows) },
	notes: []string{
		"Mbit/s = bytes read by the receiving socket (inner TCP payload); retrans = tcpi_total_retrans of the sender;",
		"Mpps = VXLAN segments the gateway sent (kernel: packets at gw-b). VXLAN devices: MTU 1450, outer UDP checksums on.",
		"on needs Linux 6.17 (TUN_F_UDP_TUNNEL_GSO); on an older kernel on and off are the same path.",
	},
}

func tunnelGSORows() []rowSpec {
	gw := func(name string, port dataplane.PortKind, offloads bool) rowSpec {
		return rowSpec{name: name, units: tcpUnits, retrans: true, start: func(ctx context.Context) (trial, error) {
			return withLab(func(l *lab) (*labTrial, error) {
				g, err := startGateway(l, dataplane.GatewayConfig{Port: port, DisableGRO: true})
				if err != nil {
					return nil, err
				}
				if !offloads {
					err = l.A.SetFeatures(tunName, map[string]bool{"tx-udp_tnl-segmentation": false, "tx-udp_tnl-csum-segmentation": false})
				}
				s, err := overlayStream(l, netlab.App4, srv4, err)
				if err != nil {
					return nil, errors.Join(err, g.stop())
				}
				return &labTrial{dp: gwDataplane{gateway: g}, tr: tcpTraffic{s}, rxAtB: true}, nil
			})
		}}
	}
	return []rowSpec{
		gw("on", dataplane.PortAuto, true),
		gw("off", dataplane.PortAuto, false),
		gw("xdp-on", dataplane.PortXDP, true),
		gw("xdp-off", dataplane.PortXDP, false),
		{name: "kernel", units: tcpUnits, retrans: true, ppsAtB: true, start: func(ctx context.Context) (trial, error) {
			return withLab(func(l *lab) (*labTrial, error) {
				s, err := overlayStream(l, netlab.NICA4, netlab.NICB4, l.RouteKernel())
				if err != nil {
					return nil, err
				}
				return &labTrial{tr: tcpTraffic{s}, rxAtB: true}, nil
			})
		}},
	}
}

// overlayStream builds the overlay between underlay addresses a (in A)
// and b (in B), unless err is set already, and starts one TCP stream
// across it from A to B.
func overlayStream(l *lab, a, b netip.Addr, err error) (tcpStreams, error) {
	if err == nil {
		err = errors.Join(addVXLAN(l.A, a, b, overlayA), addVXLAN(l.B, b, a, overlayB))
	}
	if err != nil {
		return nil, fmt.Errorf("overlay: %w", err)
	}
	s, err := startStream(l.A, l.B, overlayB, tcpPort)
	if err != nil {
		return nil, err
	}
	return tcpStreams{s}, nil
}

// addVXLAN adds the overlay's VXLAN device to ns, from local to remote,
// with the overlay address ovl.
func addVXLAN(ns *netlab.NS, local, remote, ovl netip.Addr) error {
	vx := &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: vxlanName, MTU: vxlanMTU}, VxlanId: 42,
		SrcAddr: net.IP(local.AsSlice()), Group: net.IP(remote.AsSlice()), Port: 4789, UDPCSum: true}
	if err := ns.Netlink().LinkAdd(vx); err != nil {
		return fmt.Errorf("add %s in %s: %w", vxlanName, ns.Name, err)
	}
	return errors.Join(ns.LinkUp(vxlanName), ns.AddAddr(vxlanName, netip.PrefixFrom(ovl, 24).String()))
}

func tunnelGSORatios(rows []*rowResult) []ratio {
	return throughputRatios(rows, []ratioSpec{
		{"on", "off", "TCP over VXLAN, gsoplane cutting tunnel super-packets / the kernel cutting before the TUN"},
		{"xdp-on", "xdp-off", "the same with the AF_XDP port"},
		{"on", "kernel", "TCP over VXLAN, gsoplane / kernel only (upper bound)"},
	})
}
