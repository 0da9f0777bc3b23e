package tunnel_test

import (
	"math"
	"net/netip"
	"testing"

	"github.com/gsoplane/gsoplane/dataplane/tunnel"
	"github.com/gsoplane/gsoplane/dataplane/udp"
	"github.com/gsoplane/gsoplane/internal/copycount"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// TestCopies counts the copies user space makes of each inner packet
// through a tunnel, both ends together, in a build that counts them
// (-tags copycount; internal/copycount): one, the sender's cut of each
// super-packet read from its TUN into datagrams. The receiver's UDP_GRO
// batches go into its TUN with vectored writes, and Seal and Open work
// in place (here a stand-in that rewrites every byte, as a cipher would):
// they touch the bytes, they copy none. A copy added on either side
// fails it; it asserts no speed.
func TestCopies(t *testing.T) {
	netlab.RequireRoot(t)
	if !copycount.Enabled {
		t.Skip("counts copies only when built with -tags copycount (make test runs it so)")
	}
	flip := func(dgrams [][]byte) {
		for _, d := range dgrams {
			for i := 16; i < len(d)-16; i++ {
				d[i] ^= 0x5a
			}
		}
	}
	for _, c := range []struct {
		name string
		cfg  tunnel.Config
	}{
		{"plaintext", tunnel.Config{}},
		{"sealed", tunnel.Config{Tailroom: 16,
			Seal: func(d [][]byte, _ []int) { flip(d) }, Open: func(d [][]byte, _ []int, _ []udp.Verdict) { flip(d) }}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, _, _ := newTunnel(t, c.cfg)
			for i, toA := range []bool{false, true} {
				before := copycount.Bytes()
				netlab.TCPTransfer(t, p.A, p.B, netip.AddrPortFrom(innerB, uint16(5001+i)), tcpBytes, toA)
				per := float64(copycount.Bytes()-before) / tcpBytes
				t.Logf("to A %v: %.3f bytes copied by user space per byte moved", toA, per)
				if math.Round(per) != 1 || math.Abs(per-1) > 0.2 {
					t.Errorf("to A %v: user space copies each byte %.3f times, want 1", toA, per)
				}
			}
		})
	}
}
