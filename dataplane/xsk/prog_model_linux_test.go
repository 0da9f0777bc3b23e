package xsk

// A Go model of the XDP program's rules (prog_linux.go), the table of
// cases that pins both down, and the harness that runs frames through the
// real program with BPF_PROG_TEST_RUN.

import (
	"bytes"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/internal/ethernet"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// XDP return codes, and the offsets and values of the frame fields the
// program reads (bpf/xdp.c), as the model and the tests use them.
const (
	xdpPass           = 2 // XDP_PASS
	xdpRedirectAction = 4 // XDP_REDIRECT
	xdpEthLen         = 14
	xdpIPv4End        = xdpEthLen + 20
	xdpIPv6NextHdrOff = xdpEthLen + 6
	xdpIPv6End        = xdpEthLen + 40
	xdpICMPv6Proto    = 58
)

// xdpModelConfig is what the program is loaded and filled with.
type xdpModelConfig struct {
	mac      net.HardwareAddr
	maxLen   int      // the longest frame the sockets take
	sockets  []uint32 // queues with a registered socket
	prefixes []netip.Prefix
}

// xdpVerdict is what the program does with a frame: its action and the
// counter of the frame's queue it bumps (-1: none).
type xdpVerdict struct {
	action  uint32
	counter int
}

func (v xdpVerdict) String() string {
	name := map[uint32]string{xdpPass: "pass", xdpRedirectAction: "redirect"}[v.action]
	if v.counter >= 0 {
		name += "+" + []string{"other_host", "not_unicast", "oversize", "version"}[v.counter]
	}
	return name
}

var (
	xdpVerdictPass     = xdpVerdict{xdpPass, -1}
	xdpVerdictRedirect = xdpVerdict{xdpRedirectAction, -1}
)

func xdpPassCounted(c int) xdpVerdict { return xdpVerdict{xdpPass, c} }

// xdpModel is the program as a pure function: the verdict on frame,
// received on queue, under cfg.
func xdpModel(cfg *xdpModelConfig, frame []byte, queue uint32) xdpVerdict {
	if !slices.Contains(cfg.sockets, queue) || len(frame) < header.EthernetMinimumSize {
		return xdpVerdictPass
	}
	eth := header.Ethernet(frame)
	ip := frame[header.EthernetMinimumSize:]
	var dst netip.Addr
	switch eth.Type() {
	case header.IPv4ProtocolNumber:
		if len(ip) < header.IPv4MinimumSize {
			return xdpVerdictPass
		}
		if header.IPVersion(ip) != header.IPv4Version {
			return xdpPassCounted(xdpCountVersion)
		}
		dst = netip.AddrFrom4(header.IPv4(ip).DestinationAddress().As4())
	case header.IPv6ProtocolNumber:
		if len(ip) < header.IPv6MinimumSize {
			return xdpVerdictPass
		}
		if header.IPVersion(ip) != header.IPv6Version {
			return xdpPassCounted(xdpCountVersion)
		}
		h := header.IPv6(ip)
		if h.NextHeader() == uint8(header.ICMPv6ProtocolNumber) {
			if len(ip) == header.IPv6MinimumSize {
				return xdpVerdictPass
			}
			// The type right after the fixed header, whatever the
			// payload length says.
			if t := header.ICMPv6(ip[header.IPv6MinimumSize:]).Type(); t >= header.ICMPv6RouterSolicit && t <= header.ICMPv6RedirectMsg {
				return xdpVerdictPass // neighbour discovery
			}
		}
		dst = netip.AddrFrom16(h.DestinationAddress().As16())
	default:
		return xdpVerdictPass
	}
	if !slices.ContainsFunc(cfg.prefixes, func(p netip.Prefix) bool { return p.Contains(dst) }) {
		return xdpVerdictPass
	}
	to := net.HardwareAddr(eth.DestinationAddress())
	switch {
	case !bytes.Equal(to, cfg.mac) && to[0]&1 != 0:
		return xdpPassCounted(xdpCountNotUnicast)
	case !bytes.Equal(to, cfg.mac):
		return xdpPassCounted(xdpCountOtherHost)
	case len(frame) > cfg.maxLen:
		return xdpPassCounted(xdpCountOversize)
	}
	return xdpVerdictRedirect
}

// xdpMd is struct xdp_md, BPF_PROG_TEST_RUN's context of an XDP program.
type xdpMd struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// xdpHarness is the program loaded twice for test runs, single-buffer
// and multi-buffer, with sockets of a real port registered, and the
// models of them.
type xdpHarness struct {
	lab           *progLab
	single, frags *xdpTestProgram
}

// xdpTestProgram is one of the harness's programs and its model.
type xdpTestProgram struct {
	prog  *xdpProgram
	model xdpModelConfig
}

// The harness's programs: 2048-byte frames (so that BPF_PROG_TEST_RUN,
// which hands a program without frags at most about 3.5 KB linear,
// reaches the oversize rule), one of them or chains of up to
// xdpHarnessChain of them (7168 bytes), sockets on queues 0 and 2 of
// four (queue 1 has a map entry but no socket, queue 3 none), prefixes
// of every kind of length.
var xdpHarnessPrefixes = []netip.Prefix{
	netip.MustParsePrefix("198.18.200.0/24"),
	netip.MustParsePrefix("198.19.0.7/32"),
	netip.MustParsePrefix("198.19.128.0/17"),
	netip.MustParsePrefix("2001:2:0:200::/64"),
	netip.MustParsePrefix("2001:2::1/128"),
	netip.MustParsePrefix("2001:2:8000::/33"),
}

const (
	xdpHarnessMaxQueue  = 2 // the highest queue of the harness's queue maps
	xdpHarnessFrameSize = 2048
	xdpHarnessChain     = 4
	// xdpTestRunMax is the longest frame BPF_PROG_TEST_RUN takes for a
	// program with frags: a 3520-byte linear part and 17
	// (MAX_SKB_FRAGS) pages of fragments, less one for the linear part
	// the caller may make shorter.
	xdpTestRunMax = 3520 + 16*4096
	// xdpTestRunLinear is the longest frame BPF_PROG_TEST_RUN hands a
	// program without frags whole (in its linear part).
	xdpTestRunLinear = 3400
)

// newXDPHarness builds the lab, opens a port for its sockets and loads
// the harness's programs with them.
func newXDPHarness(t testing.TB) *xdpHarness {
	t.Helper()
	l := newProgLab(t)
	port := l.open(t, Config{Queues: []int{0, 2}, NumFrames: 64, RingSize: 32, FrameSize: xdpHarnessFrameSize})
	h := &xdpHarness{lab: l}
	maxLen := rxFrameLen(xdpHarnessFrameSize)
	h.single = newXDPTestProgram(t, l, port, maxLen, false)
	h.frags = newXDPTestProgram(t, l, port, xdpHarnessChain*maxLen, true)
	return h
}

// newXDPTestProgram loads a program for the lab's NIC with the port's
// sockets and the harness's prefixes.
func newXDPTestProgram(t testing.TB, l *progLab, port *Port, maxLen int, frags bool) *xdpTestProgram {
	t.Helper()
	prog, err := newXDPProgram(xdpHarnessMaxQueue)
	netlab.Must(t, err)
	t.Cleanup(func() { prog.close() })
	prog.setReceive(maxLen, frags)
	netlab.Must(t, prog.load(l.macA))
	for _, x := range port.Sockets() {
		netlab.Must(t, prog.register(x.queueID, x.fd))
	}
	netlab.Must(t, prog.setPrefixes(xdpHarnessPrefixes))
	return &xdpTestProgram{prog: prog, model: xdpModelConfig{mac: l.macA, maxLen: maxLen, sockets: []uint32{0, 2},
		prefixes: xdpHarnessPrefixes}}
}

// run runs the program on frame as received on queue of the lab's NIC,
// with the first linear bytes in the frame's linear part and the rest in
// fragments (0: as much as fits, about 3.5 KB), and returns its action;
// it fails the test if the program changed the frame.
func (h *xdpHarness) run(t testing.TB, p *xdpTestProgram, frame []byte, queue uint32, linear int) uint32 {
	t.Helper()
	if linear == 0 {
		linear = len(frame)
	}
	out := make([]byte, len(frame)+64)
	opts := &ebpf.RunOptions{Data: frame, DataOut: out, Context: xdpMd{DataEnd: uint32(linear),
		IngressIfindex: uint32(h.lab.ifindexA), RxQueueIndex: queue}}
	var got uint32
	var err error
	// The ingress interface is looked up in the caller's namespace.
	h.lab.gw.Do(t, func() { got, err = p.prog.asv.Program.Run(opts) })
	if err != nil {
		t.Fatalf("BPF_PROG_TEST_RUN (%d bytes, %d linear, queue %d): %v", len(frame), linear, queue, err)
	}
	if !bytes.Equal(opts.DataOut, frame) {
		t.Fatalf("the program changed the frame:\n in %x\nout %x", frame, opts.DataOut)
	}
	return got
}

// check runs frame through the program and its model and compares the
// verdicts and what the counters of the queue gained.
func (h *xdpHarness) check(t testing.TB, p *xdpTestProgram, frame []byte, queue uint32, linear int) xdpVerdict {
	t.Helper()
	want := xdpModel(&p.model, frame, queue)
	before := p.counters(t, queue)
	got := h.run(t, p, frame, queue, linear)
	var gained, wantGained xdpProgramCounters
	after := p.counters(t, queue)
	for i := range gained {
		gained[i] = after[i] - before[i]
	}
	if want.counter >= 0 {
		wantGained[want.counter] = 1
	}
	if got != want.action || gained != wantGained {
		t.Fatalf("frags %v, queue %d, %d-byte frame (%d linear) %x:\nprogram %d, counters gained %v\nmodel   %v, counters gained %v",
			p.prog.frags, queue, len(frame), linear, frame[:min(len(frame), 128)], got, gained, want, wantGained)
	}
	if got == xdpRedirectAction && !ethernet.IsIP(frame) {
		t.Fatalf("the program redirects a frame the return path refuses: %x", frame)
	}
	return want
}

// counters returns the program's counters of queue (zero for a queue
// without slots).
func (p *xdpTestProgram) counters(t testing.TB, queue uint32) xdpProgramCounters {
	t.Helper()
	if int(queue) > xdpHarnessMaxQueue {
		return xdpProgramCounters{}
	}
	c, err := p.prog.counters(int(queue))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// xdpRuleCases are frames with their verdict, written down by hand, for
// a program whose sockets take frames of up to maxLen bytes.
func xdpRuleCases(mac, peer net.HardwareAddr, maxLen int) []struct {
	name  string
	frame []byte
	queue uint32
	want  xdpVerdict
} {
	src4, src6 := netip.MustParseAddrPort(progPeer4+":1000"), netip.MustParseAddrPort("["+progPeer6+"]:1000")
	in4, out4 := netip.MustParseAddrPort("198.18.200.9:53"), netip.MustParseAddrPort("198.18.201.9:53")
	host4 := netip.MustParseAddrPort("198.19.0.7:53")
	in6, out6 := netip.MustParseAddrPort("[2001:2:0:200::9]:53"), netip.MustParseAddrPort("[2001:2:0:201::9]:53")
	host6 := netip.MustParseAddrPort("[2001:2::1]:53")
	udp4 := progUDP(mac, peer, src4, in4, 64, []byte("x"))
	udp6 := progUDP(mac, peer, src6, in6, 64, []byte("x"))
	with := func(b []byte, edit func([]byte)) []byte {
		b = slices.Clone(b)
		edit(b)
		return b
	}
	icmp6 := func(typ byte) []byte {
		return with(progUDP(mac, peer, src6, in6, 255, make([]byte, 16)), func(b []byte) {
			b[xdpIPv6NextHdrOff], b[xdpIPv6End] = xdpICMPv6Proto, typ
		})
	}
	vlan := slices.Concat(udp4[:12], []byte{0x81, 0, 0, 5}, udp4[12:])
	arp := slices.Concat(udp4[:12], []byte{0x08, 0x06}, make([]byte, 28))
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	mcast6 := net.HardwareAddr{0x33, 0x33, 0, 0, 0, 9}
	other := net.HardwareAddr{0x02, 0x00, 0x5e, 0x00, 0x53, 0x99}
	// Frames of exactly maxLen bytes, one more, and longer.
	fits := progUDP(mac, peer, src4, in4, 64, make([]byte, maxLen-14-20-8))
	over := progUDP(mac, peer, src4, in4, 64, make([]byte, maxLen+1-14-20-8))
	over6 := progUDP(mac, peer, src6, in6, 64, make([]byte, maxLen+1000))
	return []struct {
		name  string
		frame []byte
		queue uint32
		want  xdpVerdict
	}{
		{"udp4 in prefix", udp4, 0, xdpVerdictRedirect},
		{"udp4 on queue 2", udp4, 2, xdpVerdictRedirect},
		{"udp4 on queue 1 (no socket)", udp4, 1, xdpVerdictPass},
		{"udp4 on queue 3 (not in the map)", udp4, 3, xdpVerdictPass},
		{"udp4 outside", progUDP(mac, peer, src4, out4, 64, nil), 0, xdpVerdictPass},
		{"udp4 /32", progUDP(mac, peer, src4, host4, 64, nil), 0, xdpVerdictRedirect},
		{"udp4 /17", progUDP(mac, peer, src4, netip.MustParseAddrPort("198.19.200.1:1"), 64, nil), 0, xdpVerdictRedirect},
		{"udp4 next to /32", progUDP(mac, peer, src4, netip.MustParseAddrPort("198.19.0.8:53"), 64, nil), 0, xdpVerdictPass},
		{"udp6 in prefix", udp6, 0, xdpVerdictRedirect},
		{"udp6 outside", progUDP(mac, peer, src6, out6, 64, nil), 0, xdpVerdictPass},
		{"udp6 /128", progUDP(mac, peer, src6, host6, 64, nil), 0, xdpVerdictRedirect},
		{"udp6 /33", progUDP(mac, peer, src6, netip.MustParseAddrPort("[2001:2:ffff::1]:1"), 64, nil), 0, xdpVerdictRedirect},
		{"udp6 next to /33", progUDP(mac, peer, src6, netip.MustParseAddrPort("[2001:2:7fff::1]:1"), 64, nil), 0, xdpVerdictPass},
		{"ttl 1", progUDP(mac, peer, src4, in4, 1, nil), 0, xdpVerdictRedirect},
		{"ttl 0", progUDP(mac, peer, src4, in4, 0, nil), 0, xdpVerdictRedirect},
		{"nd solicitation", icmp6(135), 0, xdpVerdictPass},
		{"nd router solicitation", icmp6(133), 0, xdpVerdictPass},
		{"nd redirect", icmp6(137), 0, xdpVerdictPass},
		{"icmp6 echo", icmp6(128), 0, xdpVerdictRedirect},
		{"icmp6 mld report", icmp6(143), 0, xdpVerdictRedirect},
		{"icmp6 without type", icmp6(135)[:xdpIPv6End], 0, xdpVerdictPass},
		{"arp", arp, 0, xdpVerdictPass},
		{"vlan", vlan, 0, xdpVerdictPass},
		{"ethertype ipv4, version 6", with(udp4, func(b []byte) { b[14] = 0x65 }), 0, xdpPassCounted(xdpCountVersion)},
		{"ethertype ipv4, version 0", with(udp4, func(b []byte) { b[14] = 0x05 }), 2, xdpPassCounted(xdpCountVersion)},
		{"ethertype ipv6, version 4", with(udp6, func(b []byte) { b[14] = 0x45 }), 0, xdpPassCounted(xdpCountVersion)},
		{"ipv6 packet as ethertype ipv4", with(udp6, func(b []byte) { b[12], b[13] = 0x08, 0x00 }), 0, xdpPassCounted(xdpCountVersion)},
		{"ipv4 version mismatch, queue 1", with(udp4, func(b []byte) { b[14] = 0x65 }), 1, xdpVerdictPass},
		{"ipv4 version mismatch, truncated", with(udp4, func(b []byte) { b[14] = 0x65 })[:33], 0, xdpVerdictPass},
		{"another host's mac", progUDP(other, peer, src4, in4, 64, nil), 0, xdpPassCounted(xdpCountOtherHost)},
		{"another host's mac, outside", progUDP(other, peer, src4, out4, 64, nil), 0, xdpVerdictPass},
		{"another host's mac, ipv6", progUDP(other, peer, src6, in6, 64, nil), 0, xdpPassCounted(xdpCountOtherHost)},
		{"broadcast", progUDP(bcast, peer, src4, in4, 64, nil), 0, xdpPassCounted(xdpCountNotUnicast)},
		{"broadcast, outside", progUDP(bcast, peer, src4, out4, 64, nil), 0, xdpVerdictPass},
		{"ipv6 multicast mac", progUDP(mcast6, peer, src6, in6, 64, nil), 2, xdpPassCounted(xdpCountNotUnicast)},
		{"our mac but the group bit", progUDP(append(net.HardwareAddr{mac[0] | 1}, mac[1:]...), peer, src4, in4, 64, nil), 0, xdpPassCounted(xdpCountNotUnicast)},
		{"last byte of the mac differs", progUDP(append(slices.Clone(mac[:5]), mac[5]^0x80), peer, src4, in4, 64, nil), 0, xdpPassCounted(xdpCountOtherHost)},
		{"fits a frame", fits, 0, xdpVerdictRedirect},
		{"one byte too long", over, 0, xdpPassCounted(xdpCountOversize)},
		{"too long, ipv6", over6, 2, xdpPassCounted(xdpCountOversize)},
		{"too long, not ours", progUDP(other, peer, src4, in4, 64, make([]byte, maxLen+200)), 0, xdpPassCounted(xdpCountOtherHost)},
		{"too long, outside", progUDP(mac, peer, src4, out4, 64, make([]byte, maxLen+200)), 0, xdpVerdictPass},
		{"truncated ipv4", udp4[:xdpIPv4End-1], 0, xdpVerdictPass},
		{"ipv4 header only", udp4[:xdpIPv4End], 0, xdpVerdictRedirect},
		{"truncated ipv6", udp6[:xdpIPv6End-1], 0, xdpVerdictPass},
		{"ethernet header only", udp4[:14], 0, xdpVerdictPass},
	}
}

// TestXDPProgramRules runs the hand-written cases through the model and
// the real programs, single-buffer and multi-buffer (BPF_PROG_TEST_RUN
// on the queue of each case; the multi-buffer program also with the
// frame cut into a linear part and fragments at every offset around the
// headers it reads), and checks the verdicts, the counters and that no
// frame is changed.
func TestXDPProgramRules(t *testing.T) {
	for _, maxLen := range []int{rxFrameLen(xdpHarnessFrameSize), xdpHarnessChain * rxFrameLen(xdpHarnessFrameSize)} {
		model := &xdpModelConfig{mac: progMACA, maxLen: maxLen, sockets: []uint32{0, 2}, prefixes: xdpHarnessPrefixes}
		for _, c := range xdpRuleCases(progMACA, progMACB, maxLen) {
			if got := xdpModel(model, c.frame, c.queue); got != c.want {
				t.Errorf("model, %d-byte frames: %s: %v, want %v", maxLen, c.name, got, c.want)
			}
		}
	}
	h := newXDPHarness(t)
	for _, p := range []*xdpTestProgram{h.single, h.frags} {
		for _, c := range xdpRuleCases(h.lab.macA, h.lab.macB, p.model.maxLen) {
			for _, linear := range xdpLinearSplits(p, len(c.frame)) {
				if got := h.check(t, p, c.frame, c.queue, linear); got != c.want {
					t.Errorf("frags %v, %d linear: %s: %v, want %v", p.prog.frags, linear, c.name, got, c.want)
				}
			}
		}
	}
	// The kernel refuses a frame shorter than an Ethernet header.
	var err error
	h.lab.gw.Do(t, func() {
		_, err = h.single.prog.asv.Program.Run(&ebpf.RunOptions{Data: make([]byte, 13), Context: xdpMd{DataEnd: 13,
			IngressIfindex: uint32(h.lab.ifindexA)}})
	})
	if err == nil {
		t.Error("BPF_PROG_TEST_RUN took a 13-byte frame")
	}
}

// xdpLinearSplits are the linear parts to run a frame of n bytes with
// (see xdpHarness.run): as much as fits, and for a program with frags
// also the frame cut before, inside and after each header field the
// program reads.
func xdpLinearSplits(p *xdpTestProgram, n int) []int {
	splits := []int{0}
	if !p.prog.frags {
		return splits
	}
	for _, l := range []int{1, 6, 12, 13, 14, 15, 16, 20, 21, 30, 33, 34, 38, 46, 53, 54, 55, 56} {
		if l < n {
			splits = append(splits, l)
		}
	}
	return splits
}
