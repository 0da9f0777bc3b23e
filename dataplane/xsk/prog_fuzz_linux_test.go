package xsk

import (
	"os"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// FuzzXDPProgram runs random frames through the real XDP programs
// (BPF_PROG_TEST_RUN, on a random queue of a real NIC), single-buffer
// and multi-buffer, and compares their verdicts and counters with the Go
// model (xdpModel); it also checks that the programs never change a
// frame and that every frame they redirect is one the return path
// accepts (ethernet.IsIP). pad appends zeros, so that the oversize rules are
// reached; linear (modulo the frame's length plus one; 0: as much as
// fits, about 3.5 KB) is how much of the frame the multi-buffer program
// gets in its linear part, the rest in fragments. The seed corpus is
// testdata/fuzz/FuzzXDPProgram and the rule cases of the multi-buffer
// program with a few linear parts.
func FuzzXDPProgram(f *testing.F) {
	if os.Geteuid() != 0 {
		f.Skip("needs CAP_NET_ADMIN: run as root")
	}
	for _, c := range xdpRuleCases(progMACA, progMACB, xdpHarnessChain*rxFrameLen(xdpHarnessFrameSize)) {
		for _, linear := range []uint16{0, 20, 54} {
			f.Add(c.frame, uint8(c.queue), uint16(0), linear)
		}
	}
	h := newXDPHarness(f)
	f.Fuzz(func(t *testing.T, frame []byte, queue uint8, pad uint16, linear uint16) {
		// BPF_PROG_TEST_RUN refuses less than an Ethernet header, and
		// more fragments than an skb has.
		n := len(frame) + int(pad)
		if n < header.EthernetMinimumSize || n > xdpTestRunMax {
			t.Skip()
		}
		if pad > 0 {
			frame = append(frame, make([]byte, pad)...)
		}
		q := uint32(queue) % progQueues
		h.check(t, h.frags, frame, q, int(linear)%(n+1))
		// It hands a program without frags only the first 3.5 KB or so
		// (the rest goes to fragments it does not see).
		if n <= xdpTestRunLinear {
			h.check(t, h.single, frame, q, 0)
		}
	})
}
