package main

// Scenario "gro": the return path (NIC → TUN), measured with TCP streams
// from B to the application in A. The gateway's return path takes the
// packets from its AF_XDP sockets and writes them into the TUN device:
// with GRO merged into super-packets (one write each), without one write
// per packet. With the AF_PACKET port and GRO on the NIC (packet-gro),
// the kernel's GRO merges before the port, and the return path writes
// its super-packets into the TUN as they are. The kernel alone,
// wireguard-go's TUN writer, the forward direction of the same build and
// a two-queue gateway are the comparisons, in the same run.

import (
	"context"
	"errors"
	"fmt"

	"github.com/gsoplane/gsoplane/dataplane"
)

func groRows() []rowSpec {
	tcpUnits := units{sent: "bytes", received: "packets at gw-b"}
	gw := gatewayRow
	on := dataplane.GatewayConfig{Port: dataplane.PortXDP}
	off := on
	off.DisableGRO = true
	packet := on
	packet.Port = dataplane.PortPacket
	return []rowSpec{
		packetGRORow("packet-gro", packet).copying(returnCopies).asProduct(),
		floorRow(true),
		rowSpec{name: "kernel", units: tcpUnits, retrans: true, start: func(ctx context.Context) (trial, error) {
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
		}}.copying(kernelCopies),
		rowSpec{name: "wireguard-go", units: tcpUnits, retrans: true, start: func(ctx context.Context) (trial, error) {
			return withLab(func(l *lab) (*labTrial, error) {
				host, _, err := wireguardHost(l)
				if err != nil {
					return nil, err
				}
				g, err := startGateway(l, dataplane.GatewayConfig{Host: host, Port: dataplane.PortXDP, DisableGRO: true})
				if err != nil {
					return nil, errors.Join(err, host.Close())
				}
				s, err := startTCPStreams(l, 1, true, tcpPort)
				if err != nil {
					return nil, errors.Join(err, g.stop())
				}
				return &labTrial{dp: gwDataplane{gateway: g, reverse: true}, tr: tcpTraffic{s}}, nil
			})
		}}.copying(returnCopies + peerCopies),
		gw("xdp-gro", on, 1, true),
		gw("xdp-no-gro", off, 1, true),
		gw("xdp-forward", on, 1, false),
	}
}

// gatewayRow runs streams TCP streams through a gateway configured by
// cfg, from B to A (toA: the return path) or from A to B.
func gatewayRow(name string, cfg dataplane.GatewayConfig, streams int, toA bool) rowSpec {
	n := forwardCopies
	if toA {
		n = returnCopies
	}
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
	}}.copying(n)
}

// packetGRORow is one TCP stream B→A through a gateway with the AF_PACKET
// port configured by cfg, with GRO on gw-a: the kernel merges what gw-b
// sends before the port's sockets see it. Its Mpps counts the packets
// gw-a received from the wire (gw-b checksums and so segments in
// software, one skb per packet), as the AF_XDP rows' counts the packets
// their return path took; pkts/write is those per TUN write.
func packetGRORow(name string, cfg dataplane.GatewayConfig) rowSpec {
	return rowSpec{name: name, units: units{sent: "bytes", received: "packets at gw-b"}, retrans: true, start: func(ctx context.Context) (trial, error) {
		return withLab(func(l *lab) (*labTrial, error) {
			if err := l.A.SetFeatures(nicA, map[string]bool{"gro": true}); err != nil {
				return nil, err
			}
			g, err := startGateway(l, cfg)
			if err != nil {
				return nil, err
			}
			s, err := startTCPStreams(l, 1, true, tcpPort)
			if err != nil {
				return nil, errors.Join(err, g.stop())
			}
			return &labTrial{dp: wireCounted{gwDataplane{gateway: g, reverse: true}, l}, tr: tcpTraffic{s}}, nil
		})
	}}
}

// wireCounted is a gateway's return path measured by the packets its NIC
// received, for a port that hands it the kernel's GRO super-packets
// (which its return path counts once each).
type wireCounted struct {
	gwDataplane
	l *lab
}

func (w wireCounted) counters(c *counters) {
	w.gwDataplane.counters(c)
	c.Segments = w.l.rxPacketsA()
	c.RetPackets = c.Segments // writes/pkt: TUN writes per packet from the wire
}

// rxPacketsA returns how many packets gw-a has received: on a veth,
// before GRO, one per skb gw-b sent.
func (l *lab) rxPacketsA() uint64 {
	dev, err := l.A.Link(nicA)
	if err != nil || dev.Attrs().Statistics == nil {
		return 0
	}
	return dev.Attrs().Statistics.RxPackets
}

func groRatios(rows []*rowResult) []ratio {
	return append(throughputRatios(rows, []ratioSpec{
		{"packet-gro", "floor", "TCP B→A throughput, the default gateway's return path / the floor (packet socket → TUN, GRO on gw-a)"},
		{"floor", "kernel", "TCP B→A throughput, the floor / kernel only: what two copies each way cost"},
		{"xdp-gro", "xdp-no-gro", "TCP B→A throughput, AF_XDP, our GRO on / off"},
		{"packet-gro", "xdp-no-gro", "TCP B→A throughput, AF_PACKET with the kernel's GRO / AF_XDP per packet"},
		{"packet-gro", "xdp-gro", "TCP B→A throughput, AF_PACKET with the kernel's GRO / AF_XDP with ours"},
		{"packet-gro", "kernel", "TCP B→A throughput, AF_PACKET with the kernel's GRO / kernel only (upper bound)"},
		{"xdp-gro", "xdp-forward", "TCP throughput, AF_XDP, return path with GRO / forward path, same build"},
		{"xdp-gro", "wireguard-go", "TCP B→A throughput, our GRO / wireguard-go's TUN writer"},
		{"xdp-gro", "kernel", "TCP B→A throughput, AF_XDP with our GRO / kernel only (upper bound)"},
	}), costRatios(rows, []ratioSpec{
		{"packet-gro", "floor", "the gateway's cores per Gbit/s, the default gateway's return path / the floor"},
	})...)
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
				cfg := dataplane.GatewayConfig{TUN: dataplane.TUNOptions{Queues: q}, Port: dataplane.PortXDP}
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
