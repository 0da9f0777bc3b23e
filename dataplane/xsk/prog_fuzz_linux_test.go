package xsk

import (
	"os"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// FuzzXDPProgram runs random frames through the real XDP program
// (BPF_PROG_TEST_RUN, on a random queue of a real NIC) and compares its
// verdict and counters with the Go model (xdpModel); it also checks that
// the program never changes a frame and that every frame it redirects is
// one the return path accepts (ipFrame). pad appends zeros, so that the
// oversize rule is reached. The seed corpus is testdata/fuzz/FuzzXDPProgram.
func FuzzXDPProgram(f *testing.F) {
	if os.Geteuid() != 0 {
		f.Skip("needs CAP_NET_ADMIN: run as root")
	}
	h := newXDPHarness(f)
	f.Fuzz(func(t *testing.T, frame []byte, queue uint8, pad uint16) {
		// BPF_PROG_TEST_RUN refuses less than an Ethernet header, and
		// hands a program without multi-buffer support only the first
		// 3.5 KB or so (the rest goes to fragments it does not see).
		pad %= 2048
		if n := len(frame) + int(pad); n < header.EthernetMinimumSize || n > 3400 {
			t.Skip()
		}
		if pad > 0 {
			frame = append(frame, make([]byte, pad)...)
		}
		h.check(t, frame, uint32(queue)%progQueues)
	})
}

// FuzzReceiverFrame checks the return path's frame test (ipFrame in
// receiver_linux.go) against its definition, written with gVisor's
// header views: an Ethernet frame with at least one byte after the
// header, whose EtherType is IPv4 or IPv6 and whose IP version nibble
// says the same. It also checks that only the first 15 bytes matter.
func FuzzReceiverFrame(f *testing.F) {
	for _, s := range [][]byte{
		nil,
		make([]byte, 14),
		progUDP(progMACA, progMACB, progSrc4, progDst4, 64, []byte("x")),
		progUDP(progMACA, progMACB, progSrc6, progDst6, 64, []byte("x")),
		{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x08, 0x00, 0x45},
		{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x08, 0x00, 0x65},
		{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x86, 0xdd, 0x60},
		{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x86, 0xdd, 0x45},
		{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x81, 0x00, 0, 5, 0x08, 0x00, 0x45},
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		want := false
		if len(frame) > header.EthernetMinimumSize {
			v := header.IPVersion(frame[header.EthernetMinimumSize:])
			switch header.Ethernet(frame).Type() {
			case header.IPv4ProtocolNumber:
				want = v == header.IPv4Version
			case header.IPv6ProtocolNumber:
				want = v == header.IPv6Version
			}
		}
		got := ipFrame(frame)
		if got != want {
			t.Fatalf("ipFrame(%x) = %v, want %v", frame, got, want)
		}
		if len(frame) > 15 && ipFrame(frame[:15]) != got {
			t.Fatalf("ipFrame(%x) depends on more than 15 bytes", frame)
		}
	})
}
