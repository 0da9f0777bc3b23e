package xsk

import (
	"net/netip"
	"testing"
)

// BenchmarkXDPProgram times the XDP program in the kernel with
// BPF_PROG_TEST_RUN repeat (rx queue 0, whose socket is registered),
// single-buffer and multi-buffer side by side: ns/pkt is the kernel's
// own timing per run, the run loop's overhead included. The fast path
// is "udp4 redirect" and "udp6 redirect"; "udp4 redirect 9000" is a
// multi-buffer frame (the multi-buffer program only).
func BenchmarkXDPProgram(b *testing.B) {
	l := newProgLab(b)
	port := l.open(b, Config{Queues: []int{0}, NumFrames: 64, RingSize: 32, Redirect: progRedirect})
	maxLen := rxFrameLen(DefaultFrameSize)
	progs := []*xdpTestProgram{
		newXDPTestProgram(b, l, port, maxLen, false),
		newXDPTestProgram(b, l, port, defaultMaxChain(Config{FrameSize: DefaultFrameSize, NumFrames: DefaultNumFrames,
			RingSize: DefaultRingSize})*maxLen, true),
	}
	src4, src6 := netip.MustParseAddrPort(progPeer4+":1000"), netip.MustParseAddrPort("["+progPeer6+"]:1000")
	payload := make([]byte, 1400)
	cases := []struct {
		name string
		pkt  []byte
	}{
		{"udp4 redirect", progUDP(l.macA, l.macB, src4, netip.MustParseAddrPort("198.18.200.9:53"), 64, payload)},
		{"udp6 redirect", progUDP(l.macA, l.macB, src6, netip.MustParseAddrPort("[2001:2:0:200::9]:53"), 64, payload)},
		{"udp4 pass", progUDP(l.macA, l.macB, src4, netip.MustParseAddrPort(progNIC4+":53"), 64, payload)},
		{"udp6 pass", progUDP(l.macA, l.macB, src6, netip.MustParseAddrPort("["+progNIC6+"]:53"), 64, payload)},
		{"arp", append(append(progUDP(l.macA, l.macB, src4, src4, 64, nil)[:12:12], 0x08, 0x06), make([]byte, 28)...)},
		{"udp4 redirect 9000", progUDP(l.macA, l.macB, src4, netip.MustParseAddrPort("198.18.200.9:53"), 64, make([]byte, 9000-28))},
	}
	for _, c := range cases {
		for _, p := range progs {
			if len(c.pkt) > xdpTestRunLinear && !p.prog.frags {
				continue
			}
			b.Run(c.name+map[bool]string{false: "/single", true: "/multi"}[p.prog.frags], func(b *testing.B) {
				const repeat = 1 << 20
				var total float64
				runs := 0
				for b.Loop() {
					_, d, err := p.prog.asv.Program.Benchmark(c.pkt, repeat, nil)
					if err != nil {
						b.Fatal(err)
					}
					total += float64(d.Nanoseconds())
					runs++
				}
				b.ReportMetric(total/float64(runs), "ns/pkt")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
