package main

// Scenario "hook" is our pktgen before/after of "Introduce egress hook"
// (seeds/egress-hook-pktgen.txt): the small-packet forwarding rate of the
// fast path with no hook, with a hook that does nothing, and with a hook
// that parses the IP and transport headers and looks the destination port
// up in a port set, as a filter would. 64-byte UDP payloads from many
// flows (one source port each) go from A through the gateway; B drops
// them at gw-b's tc ingress with a tcx program (the seed's "drop point in
// tc"), so that B costs as little as it can. The rate is the gateway's forwarded segments
// per second (Gateway.Stats).

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/dataplane"
	"github.com/gsoplane/gsoplane/dataplane/pipeline"
)

const (
	hookPayload = 64 // UDP payload bytes
	hookFlows   = 64 // sockets, each its own source port
	hookSenders = 1  // sending goroutines
	hookPort    = 9  // discard
)

// noopHook passes every segment.
func noopHook(pkt []byte) bool { return true }

// blockedPorts is the inspecting hook's port set (ports a filter might
// refuse); our traffic uses none of them, so every segment passes and the
// rows stay comparable.
var blockedPorts = func() *[1024]uint64 {
	var set [1024]uint64
	for _, p := range []uint16{0, 19, 135, 137, 138, 139, 445, 1900, 5353, 11211} {
		set[p/64] |= 1 << (p % 64)
	}
	return &set
}()

// inspectHook parses the IPv4 or IPv6 header and the UDP or TCP header
// (gVisor header views) and refuses segments to a port in blockedPorts.
func inspectHook(pkt []byte) bool {
	if len(pkt) == 0 {
		return false
	}
	var proto uint8
	var l4 []byte
	switch header.IPVersion(pkt) {
	case header.IPv4Version:
		ip := header.IPv4(pkt)
		if !ip.IsValid(len(pkt)) {
			return false
		}
		proto, l4 = ip.Protocol(), ip.Payload()
	case header.IPv6Version:
		ip := header.IPv6(pkt)
		if !ip.IsValid(len(pkt)) {
			return false
		}
		proto, l4 = ip.NextHeader(), ip.Payload()
	default:
		return false
	}
	var port uint16
	switch proto {
	case uint8(header.UDPProtocolNumber):
		if len(l4) < header.UDPMinimumSize {
			return false
		}
		port = header.UDP(l4).DestinationPort()
	case uint8(header.TCPProtocolNumber):
		if len(l4) < header.TCPMinimumSize {
			return false
		}
		port = header.TCP(l4).DestinationPort()
	default:
		return true
	}
	return blockedPorts[port/64]&(1<<(port%64)) == 0
}

func hookRows() []rowSpec {
	return []rowSpec{
		hookRow("none", dataplane.PortXDP, nil), hookRow("noop", dataplane.PortXDP, noopHook),
		hookRow("inspect", dataplane.PortXDP, inspectHook), hookRow("packet", dataplane.PortPacket, nil),
	}
}

// hookRow is a row of the small-packet flood from A through the TUN
// device and the gateway's fast path to port, with hook (nil: none).
func hookRow(name string, port dataplane.PortKind, hook pipeline.Hook) rowSpec {
	return rowSpec{
		name: name, ppsMain: true,
		units: units{sent: "datagrams", received: "packets at gw-b"},
		start: func(ctx context.Context) (trial, error) {
			return withLab(func(l *lab) (*labTrial, error) {
				onStop := l.dropFloodAtB()
				g, err := startGateway(l, dataplane.GatewayConfig{Port: port, DisableGRO: true, Hook: hook})
				if err != nil {
					return nil, err
				}
				f, err := startSmallFlood(l, netip.AddrPortFrom(srv4, hookPort), hookFlows, hookSenders, hookPayload)
				if err != nil {
					return nil, errors.Join(err, g.stop())
				}
				return &labTrial{
					dp: gwDataplane{gateway: g, ipBytesAsRx: true}, tr: floodTraffic{f}, rxAtB: true, onStop: onStop,
				}, nil
			})
		},
	}.copying(forwardCopies)
}

func hookRatios(rows []*rowResult) []ratio {
	none := findRow(rows, "none")
	var out []ratio
	for _, name := range []string{"noop", "inspect"} {
		if r := findRow(rows, name); r != nil && none != nil {
			q := ratioOf(name+"/none", "forwarding rate (pps), "+name+" hook vs no hook", r, none, true)
			q.Form = delta
			out = append(out, q)
		}
	}
	if none != nil {
		if m, lo, hi, ok := none.median(); ok && m.PPS > 0 && len(none.runs) > 1 {
			out = append(out, ratio{
				Key: "none-spread", Text: "run-to-run spread of the no-hook row ((max-min)/median): the noise floor",
				Value: (hi - lo) / m.PPS, Form: percent,
				A: operand{"none max−min", hi - lo, "pps"}, B: operand{"none median", m.PPS, "pps"},
			})
		}
	}
	out = append(out, throughputRatios(rows, []ratioSpec{
		{"packet", "none", "forwarding rate (pps), AF_PACKET port(s) / AF_XDP copy mode, no hook"},
	})...)
	// The hooks' own cost, measured in isolation, and the most it can take
	// from the no-hook rate.
	var pps float64
	if none != nil {
		m, _, _, _ := none.median()
		pps = m.PPS
	}
	for _, h := range []struct {
		name string
		fn   pipeline.Hook
	}{{"noop", noopHook}, {"inspect", inspectHook}} {
		ns := hookCost(h.fn)
		out = append(out, ratio{
			Key: h.name + " ns/segment", Value: ns,
			Text: "the hook's cost per call measured in isolation (10M calls through a pipeline.Hook value, best of 5)",
			Show: fmt.Sprintf("%.2f ns", ns),
		})
		if pps > 0 {
			out = append(out, ratio{
				Key: h.name + " bound", Value: ns * pps / 1e9, Form: percent,
				Show: fmt.Sprintf("≤ %.3f%%", ns*pps/1e7),
				Text: fmt.Sprintf("most the %s hook can take from the rate: its ns/segment × the no-hook %.3f Mpps", h.name, pps/1e6),
			})
		}
	}
	return out
}
