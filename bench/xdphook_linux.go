package main

// Scenario "xdphook" is the hook experiment of scenario "hook" with a
// source that makes no system call per packet, as the seed's pktgen:
// a generator in namespace C (an xsk.Generator on app0: prebuilt
// Ethernet frames of hookFlows UDP flows, hookPayload bytes of payload
// each, a TX-ring batch per wake-up) sends into gw-c, the gateway's
// AF_XDP ingress port (pipeline.WireSource), which forwards through the
// hook to its AF_XDP port on gw-a; B drops the frames at gw-b's tc
// ingress. Rows: no hook, the no-op hook, the inspecting hook; the
// generator alone, into an XDP program on gw-c that counts and drops
// (the ceiling on this machine); and the TUN fast path of scenario hook
// with no hook, for the ratio between the two sources.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/dataplane"
	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/dataplane/xsk"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// The generator's UMEM: 1024 TX frames, and a ring (and so a batch per
// wake-up, xsk.Socket.TxBudget) of 256.
const (
	genFrames = 2048
	genRing   = 256
)

// ingressMTU is the MTU of the veth between C and A.
const ingressMTU = 1500

// ingressConfig is a gateway from the ingress device gw-c to gw-a, both
// ports of kind port (AF_XDP: the XDP programs in mode).
func ingressConfig(port dataplane.PortKind, mode xsk.Mode, hook pipeline.Hook) dataplane.GatewayConfig {
	return dataplane.GatewayConfig{
		Ingress: dataplane.IngressOptions{Device: netlab.Ingress, Routes: netlab.SrvRoutes}, NextHop: netlab.NICB4,
		Port: port, XDP: dataplane.XDPOptions{Mode: mode}, DisableGRO: true, Hook: hook,
	}
}

func xdphookRows() []rowSpec {
	return []rowSpec{
		xdphookRow("none", dataplane.PortXDP, nil), xdphookRow("noop", dataplane.PortXDP, noopHook),
		xdphookRow("inspect", dataplane.PortXDP, inspectHook), xdphookRow("packet", dataplane.PortPacket, nil),
		generatorRow(), hookRow("tun", dataplane.PortXDP, nil),
	}
}

// genUnits are the units of the generator's rows.
var genUnits = units{sent: "frames", received: "packets at gw-b"}

// xdphookRow is a row of the generator's flood through the gateway's
// ingress port to its NIC port, both of kind port, with hook (nil:
// none).
func xdphookRow(name string, port dataplane.PortKind, hook pipeline.Hook) rowSpec {
	return rowSpec{name: name, ppsMain: true, units: genUnits, start: func(ctx context.Context) (trial, error) {
		return withLab(func(l *lab) (*labTrial, error) {
			if err := l.AddIngress(ingressMTU, 2); err != nil {
				return nil, err
			}
			onStop := l.dropFloodAtB()
			g, err := startGateway(l, ingressConfig(port, xsk.ModeAuto, hook))
			if err != nil {
				return nil, err
			}
			f, err := startXDPGen(l)
			if err != nil {
				return nil, errors.Join(err, g.stop())
			}
			return &labTrial{dp: gwDataplane{gateway: g, ipBytesAsRx: true}, tr: f, rxAtB: true, onStop: onStop}, nil
		})
	}}.copying(forwardCopies + wireCopiesOf(port))
}

// wireCopiesOf is wireCopies for an ingress port of kind port.
func wireCopiesOf(port dataplane.PortKind) int {
	if port == dataplane.PortPacket {
		return 0
	}
	return wireCopies
}

// generatorRow is the generator alone: gw-c drops and counts its frames
// (countAtIngress), no gateway.
func generatorRow() rowSpec {
	return rowSpec{name: "generator", ppsMain: true, units: genUnits, start: func(ctx context.Context) (trial, error) {
		return withLab(func(l *lab) (*labTrial, error) {
			if err := l.AddIngress(ingressMTU, 2); err != nil {
				return nil, err
			}
			m, err := l.countAtIngress()
			if err != nil {
				return nil, err
			}
			f, err := startXDPGen(l)
			if err != nil {
				return nil, err
			}
			return &labTrial{dp: xdpCount{m}, tr: f}, nil
		})
	}}
}

func xdphookRatios(rows []*rowResult) []ratio {
	out := hookRatios(rows)
	if none := findRow(rows, "none"); none != nil {
		m, _, _, _ := none.median()
		out = append(out, ratio{
			Key:   "none Mpps",
			Text:  "the no-hook row's forwarding rate (the project aims at 1 Mpps; no target here: a rate alone has no peer in the run)",
			Value: m.PPS / 1e6, Show: fmt.Sprintf("%.3f Mpps", m.PPS/1e6),
		})
	}
	return append(out, throughputRatios(rows, []ratioSpec{
		{"none", "tun", "forwarding rate (pps), AF_XDP ingress / the TUN fast path (the hook scenario's no-hook row)"},
		{"none", "generator", "forwarding rate (pps) / what the generator alone pushes into gw-c (the ceiling)"},
	})...)
}

// dropFloodAtB drops the flood to B's discard port at gw-b's tc ingress
// (dropUDPAtB; without it, B's stack drops them: costlier for B, still
// correct) and returns what the trial adds to its final facts.
func (l *lab) dropFloodAtB() func(fin *final) {
	tcDrop := 1.0
	if l.dropUDPAtB(hookPort) != nil {
		tcDrop = 0
	}
	return func(fin *final) {
		// Datagrams B's stack saw: the drop program should leave none.
		fin.Extra["b_udp_noports"] = float64(l.udpCounterB("NoPorts"))
		fin.Extra["b_tc_drop"] = tcDrop
	}
}

// xdpGen is the generator: an xsk.Generator on C's app0 sending
// hookFlows flows (source ports from hookSrcPort) of hookPayload-byte
// UDP datagrams to B's discard port, batch after batch, until stopped.
type xdpGen struct {
	g        *xsk.Generator
	stopping atomic.Bool
	done     chan error
}

// startXDPGen opens the generator in C and starts it.
func startXDPGen(l *lab) (*xdpGen, error) {
	gwc, err := l.A.Link(netlab.Ingress)
	if err != nil {
		return nil, err
	}
	app, err := l.C.Link(netlab.AppIf)
	if err != nil {
		return nil, err
	}
	frames := make([][]byte, hookFlows)
	for i := range frames {
		frames[i] = etherFrame(gwc.Attrs().HardwareAddr, app.Attrs().HardwareAddr, smallPacket(hookPayload, uint16(hookSrcPort+i)))
	}
	x := &xdpGen{done: make(chan error, 1)}
	err = l.C.Run(func() error {
		x.g, err = xsk.OpenGenerator(xsk.GeneratorConfig{Ifname: netlab.AppIf, Frames: frames, NumFrames: genFrames, RingSize: genRing})
		return err
	})
	if err != nil {
		return nil, err
	}
	go x.run()
	return x, nil
}

// etherFrame puts an Ethernet header from src to dst before the IPv4
// packet pkt.
func etherFrame(dst, src net.HardwareAddr, pkt []byte) []byte {
	b := make([]byte, header.EthernetMinimumSize+len(pkt))
	header.Ethernet(b).Encode(&header.EthernetFields{
		SrcAddr: tcpip.LinkAddress(src), DstAddr: tcpip.LinkAddress(dst), Type: header.IPv4ProtocolNumber,
	})
	copy(b[header.EthernetMinimumSize:], pkt)
	return b
}

// run sends until stop, waiting for completions only when every frame
// is in flight.
func (x *xdpGen) run() {
	defer trafficThread()()
	for !x.stopping.Load() {
		n, err := x.g.Send()
		if err == nil && n == 0 {
			err = x.g.Wait(time.Millisecond)
		}
		if err != nil {
			x.done <- fmt.Errorf("generator: %w", err)
			return
		}
	}
	x.done <- nil
}

// counters: Sent counts the frames the kernel took from the generator.
func (x *xdpGen) counters(c *counters) { c.Sent = x.g.Stats().Completed }

func (x *xdpGen) stop() (final, error) {
	x.stopping.Store(true)
	err := <-x.done
	st := x.g.Stats()
	fin := final{Extra: map[string]float64{
		"gen_frames":          float64(st.Completed),
		"gen_frames_per_kick": float64(st.TX) / float64(max(st.Kicks, 1)),
	}}
	return fin, errors.Join(err, x.g.Close())
}

// countAtIngress attaches to gw-c, in the driver, an XDP program that
// counts every frame in the returned map (an array of one uint64) and
// drops it.
func (l *lab) countAtIngress() (*ebpf.Map, error) {
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "gsob_count", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		return nil, fmt.Errorf("counter map: %w", err)
	}
	l.bpf = append(l.bpf, m)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "gsob_xdp_count", Type: ebpf.XDP, License: "GPL", Instructions: countDropInstructions(m.FD()),
	})
	if err != nil {
		return nil, fmt.Errorf("load the counting XDP program: %w", err)
	}
	l.bpf = append(l.bpf, prog)
	dev, err := l.A.Link(netlab.Ingress)
	if err != nil {
		return nil, err
	}
	err = l.A.Run(func() error { // the interface index is A's
		lk, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: dev.Attrs().Index, Flags: link.XDPDriverMode})
		if err != nil {
			return fmt.Errorf("attach the counting XDP program to %s: %w", netlab.Ingress, err)
		}
		l.bpf = append(l.bpf, lk)
		return nil
	})
	return m, err
}

// countDropInstructions is, in C:
//
//	__u32 key = 0;
//	__u64 *n = bpf_map_lookup_elem(&count, &key);
//	if (n) __sync_fetch_and_add(n, 1);
//	return XDP_DROP;
func countDropInstructions(mapFD int) asm.Instructions {
	const xdpDrop = 1
	return asm.Instructions{
		asm.StoreImm(asm.R10, -4, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, mapFD),
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "drop"),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, xdpDrop).WithSymbol("drop"),
		asm.Return(),
	}
}

// xdpCount is the generator row's dataplane: the counting XDP program.
type xdpCount struct{ m *ebpf.Map }

// counters: the frames counted are the row's segments; their IP bytes its
// throughput.
func (d xdpCount) counters(c *counters) {
	var n uint64
	if d.m.Lookup(uint32(0), &n) == nil {
		c.Segments = n
		c.RxBytes = n * uint64(header.IPv4MinimumSize+header.UDPMinimumSize+hookPayload)
	}
}

func (d xdpCount) stop() error { return nil } // the lab closes the program
