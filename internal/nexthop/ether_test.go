package nexthop

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/internal/dirtybuf"
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
	if a := e.Header(eth, v4); a != Hold {
		t.Fatalf("first packet: %v, want hold", a)
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
	if a := e.Header(eth, v6); a != Hold {
		t.Errorf("IPv6 packet to a new destination: %v, want hold", a)
	}
}

// TestEtherHold: a pending destination holds the batch for HoldTime,
// then its frames are dropped; holds draw on a bucket of HoldBurst that
// refills at HoldShare percent of the time, a hold lasts no longer than
// the credit the bucket has, and a destination that resolves early gives
// back what it did not use; a failed one is unreachable.
func TestEtherHold(t *testing.T) {
	if HoldBurst != HoldTime {
		t.Fatalf("the test takes the bucket to hold one HoldTime, not %v", HoldBurst)
	}
	r := newTestResolver(t, Config{})
	e := NewEther(r, [6]byte{})
	start := time.Unix(1000, 0)
	now := start
	e.now = func() time.Time { return now }
	eth := make([]byte, EtherLen)
	step := func(d time.Duration, n int, want Action) {
		t.Helper()
		now = now.Add(d)
		if a := e.Header(eth, ipv4To(addr(n))); a != want {
			t.Errorf("at +%v, destination %d: %v, want %v", now.Sub(start), n, a, want)
		}
	}
	step(0, 1, Hold)
	step(HoldTime-1, 1, Hold)
	step(1, 1, Drop)                     // the hold is over, and it took the whole bucket
	refill := HoldTime * HoldShare / 100 // what came back during it
	step(0, 2, Hold)                     // for as long as that lasts
	step(0, 3, Drop)                     // the bucket is empty
	step(refill-1, 2, Hold)
	step(1, 2, Drop)
	wait := 100 * time.Millisecond
	credit := (refill + wait) * HoldShare / 100 // since the last hold began
	step(wait, 4, Hold)
	resolve(r, addr(4), macA)
	step(credit/5, 4, Send) // resolved early: 4/5 of the hold back
	if want := credit * 4 / 5; e.credit != want {
		t.Errorf("credit after an early resolution: %v, want %v", e.credit, want)
	}
	step(0, 5, Hold) // with what is left in the bucket
	step(e.holdEnd.Sub(now), 5, Drop)
	e.Reset() // the link came back: the destination held before may be held again, for all of HoldTime
	step(0, 5, Hold)
	step(HoldTime-1, 5, Hold)
	step(1, 5, Drop)
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
	r.setHop(addr(1), addr(1))
	r.settle(addr(1), neigh{kind: failed}, false)
	step(0, 1, Unreachable)
}

// TestEtherWait: Wait returns when the resolver learns something, or when
// the hold or d ends.
func TestEtherWait(t *testing.T) {
	r := newTestResolver(t, Config{})
	e := NewEther(r, [6]byte{})
	eth, pkt := make([]byte, EtherLen), ipv4To(addr(3))
	if e.Header(eth, pkt) != Hold {
		t.Fatal("want a hold")
	}
	start := time.Now()
	e.Wait(time.Millisecond)
	if d := time.Since(start); d < time.Millisecond {
		t.Errorf("Wait(1ms) returned after %v", d)
	}
	go func() { time.Sleep(time.Millisecond); resolve(r, addr(3), macA) }()
	start = time.Now()
	e.Wait(time.Hour)
	if d := time.Since(start); d >= HoldTime+time.Second {
		t.Errorf("Wait returned after %v: past the hold", d)
	}
	if e.Header(eth, pkt) != Send {
		t.Error("not resolved after the wait")
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
