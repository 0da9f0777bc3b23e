package nexthop

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/gsoplane/gsoplane/internal/testing/dirtybuf"
)

// ipv4To returns a minimal IPv4 header to dst.
func ipv4To(dst netip.Addr) []byte {
	p := make([]byte, 20)
	p[0] = 0x45
	copy(p[16:20], dst.AsSlice())
	return p
}

// resolve makes the fake kernel answer for dst with mac.
func resolve(r *Resolver, dst netip.Addr, mac [6]byte) {
	r.setHop(dst, dst)
	r.settle(dst, neigh{kind: usable, mac: mac}, false)
}

// TestEther writes headers for IPv4 and IPv6 packets as their next hops
// resolve and change, and refuses what is not IP.
func TestEther(t *testing.T) {
	r := newTestResolver(t, Config{})
	src := [6]byte{2, 0, 0, 0, 0, 1}
	e := NewEther(r, src)
	v4 := ipv4To(addr(1))
	v6 := make([]byte, 40)
	v6[0] = 0x60
	copy(v6[24:40], []byte{0x20, 0x01, 0, 2, 15: 1})
	eth := make([]byte, EtherLen)
	if a := e.Header(eth, v4); a != Queue {
		t.Fatalf("first packet: %v, want queue", a)
	}
	resolve(r, addr(1), macA)
	if a := e.Header(eth, v4); a != Send {
		t.Fatalf("after the kernel answered: %v, want send", a)
	}
	want := append(append(macA[:], src[:]...), 0x08, 0x00)
	if !bytes.Equal(eth, want) {
		t.Errorf("IPv4 header % x, want % x", eth, want)
	}
	// The same whatever the frame held (stale: an IPv6 frame to macB).
	stale := append(append(macB[:], macA[:]...), 0x86, 0xdd, 0x60)
	dirty := dirtybuf.Check(t, dirtybuf.New(1, EtherLen+len(v4)), dirtybuf.Leave(0, stale), func(bufs [][]byte) [][]byte {
		e.Header(bufs[0], v4)
		return [][]byte{bufs[0][:EtherLen]}
	})
	if !bytes.Equal(dirty[0], want) {
		t.Errorf("IPv4 header over a dirty frame % x, want % x", dirty[0], want)
	}
	r.settle(addr(1), neigh{kind: usable, mac: macB}, false) // the peer's MAC changed
	if e.Header(eth, v4); !bytes.Equal(eth[:6], macB[:]) {
		t.Errorf("after a MAC change: destination % x, want % x", eth[:6], macB)
	}
	for _, bad := range [][]byte{nil, make([]byte, 19), {0x45}, make([]byte, 64)} {
		if a := e.Header(eth, bad); a != Unreachable {
			t.Errorf("not an IP packet (% x): %v, want unreachable", bad, a)
		}
	}
	if a := e.Header(eth, v6); a != Queue {
		t.Errorf("IPv6 packet to a new destination: %v, want queue", a)
	}
}

// TestEtherActions: a destination being resolved is queued for as long
// as it is, a failed one is unreachable, and one a router does not
// forward to is not routed.
func TestEtherActions(t *testing.T) {
	r := newTestResolver(t, Config{})
	e := NewEther(r, [6]byte{})
	eth := make([]byte, EtherLen)
	for i := range 3 {
		if a := e.Header(eth, ipv4To(addr(1))); a != Queue {
			t.Errorf("lookup %d of a pending destination: %v, want queue", i, a)
		}
	}
	for _, dst := range []string{"224.0.0.22", "ff02::16", "169.254.1.1", "fe80::1", "127.0.0.1", "0.0.0.0"} {
		pkt := ipv4To(netip.MustParseAddr("198.18.0.1"))
		if a := netip.MustParseAddr(dst); a.Is6() {
			pkt = make([]byte, 40)
			pkt[0] = 0x60
			copy(pkt[24:40], a.AsSlice())
		} else {
			copy(pkt[16:20], a.AsSlice())
		}
		if a := e.Header(eth, pkt); a != NotRouted {
			t.Errorf("to %s: %v, want not routed", dst, a)
		}
	}
	mld := make([]byte, 56) // an MLDv2 report behind a hop-by-hop header, as the kernel sends it
	mld[0], mld[6], mld[40], mld[48] = 0x60, 0, 58, 143
	copy(mld[24:40], netip.MustParseAddr("ff02::16").AsSlice())
	if a := e.Header(eth, mld); a != Control {
		t.Errorf("an MLD report: %v, want link control", a)
	}
	e.Header(eth, ipv4To(addr(2)))
	r.setHop(addr(2), addr(2))
	r.settle(addr(2), neigh{kind: failed}, false)
	if a := e.Header(eth, ipv4To(addr(2))); a != Unreachable {
		t.Errorf("a failed destination: %v, want unreachable", a)
	}
}

// TestEtherAllocs: a resolved destination costs no allocation.
func TestEtherAllocs(t *testing.T) {
	r := newTestResolver(t, Config{})
	e := NewEther(r, [6]byte{})
	pkt, eth := ipv4To(addr(2)), make([]byte, EtherLen)
	e.Header(eth, pkt)
	resolve(r, addr(2), macA)
	if a := testing.AllocsPerRun(100, func() { e.Forget(); e.Header(eth, pkt) }); a != 0 {
		t.Errorf("%v allocations per header, want 0", a)
	}
}
