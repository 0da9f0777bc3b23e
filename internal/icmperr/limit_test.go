package icmperr

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// clock is a fake clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

// cost is a rand.Source whose value makes every error cost the global
// bucket exactly one credit, the kernel's average, so that counts are
// exact.
type cost uint64

func (c cost) Uint64() uint64 { return uint64(c) }

// newTestLimiter returns a limiter with the kernel's defaults on a fake
// clock, each error costing one credit.
func newTestLimiter(peers int) (*Limiter, *clock) {
	c := &clock{t: time.Unix(1e9, 0)}
	l := NewLimiter(LinuxLimits(), peers, c.now)
	l.rng = cost(1)
	return l, c
}

// from returns a small packet from src, IPv4 or IPv6.
func from(src netip.Addr) []byte {
	if src.Is4() {
		return pkt4{src: src.String(), dst: host4b, flags: df, proto: header.UDPProtocolNumber, payload: udp(8)}.bytes()
	}
	return pkt6{src: src.String(), dst: host6b, proto: header.UDPProtocolNumber, payload: udp(8)}.bytes()
}

// nth returns the n-th distinct IPv4 or IPv6 source.
func nth(v6 bool, n int) netip.Addr {
	if v6 {
		a := netip.MustParseAddr(host6a).As16()
		binary.BigEndian.PutUint32(a[12:], uint32(n))
		return netip.AddrFrom16(a)
	}
	var a [4]byte
	binary.BigEndian.PutUint32(a[:], 198<<24|18<<16+uint32(n))
	return netip.AddrFrom4(a)
}

// count returns how many of n errors of kind k answering orig are allowed.
func count(l *Limiter, orig []byte, k Kind, n int) int {
	allowed := 0
	for range n {
		if l.Allow(orig, k) {
			allowed++
		}
	}
	return allowed
}

// TestPerDestination: a destination gets a burst of 6 errors, then one
// per icmp_ratelimit (1 s) for ICMP and per net.ipv6.icmp.ratelimit
// (100 ms) for ICMPv6, as inet_peer_xrlim_allow with
// XRLIM_BURST_FACTOR 6 and a new peer's full bucket.
func TestPerDestination(t *testing.T) {
	for _, tc := range []struct {
		name     string
		v6       bool
		interval time.Duration
		inTenSec int // one error tried every 10 ms for 10 s
	}{
		// t=0..50ms: 6000 tokens minus 6 errors plus 50 earned; then
		// one at t=1s, 2s, ... 9s.
		{"ICMP", false, time.Second, 6 + 9},
		// t=0..50ms: 6 errors; then one at t=100ms, ... 9.9s.
		{"ICMPv6", true, 100 * time.Millisecond, 6 + 99},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, c := newTestLimiter(0)
			orig := from(nth(tc.v6, 1))
			if n := count(l, orig, Unreachable, 100); n != 6 {
				t.Errorf("burst: %d allowed, want 6", n)
			}
			c.advance(tc.interval - time.Millisecond)
			if n := count(l, orig, Unreachable, 10); n != 0 {
				t.Errorf("%v later: %d allowed, want 0", tc.interval-time.Millisecond, n)
			}
			c.advance(time.Millisecond)
			if n := count(l, orig, Unreachable, 10); n != 1 {
				t.Errorf("%v later: %d allowed, want 1", tc.interval, n)
			}
			l, c = newTestLimiter(0)
			allowed := 0
			for range 1000 {
				allowed += count(l, orig, Unreachable, 1)
				c.advance(10 * time.Millisecond)
			}
			if allowed != tc.inTenSec {
				t.Errorf("one try every 10 ms for 10 s: %d allowed, want %d", allowed, tc.inTenSec)
			}
		})
	}
}

// TestTimeExceededLimited: time exceeded (ICMP type 11, ICMPv6 type 3)
// is limited per destination, as icmp_ratemask and
// net.ipv6.icmp.ratemask have it by default.
func TestTimeExceededLimited(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		l, _ := newTestLimiter(0)
		if n := count(l, from(nth(v6, 1)), TimeExceeded, 100); n != 6 {
			t.Errorf("IPv6 %v: a burst of %d, want 6", v6, n)
		}
	}
}

// TestGlobal: over all destinations, a burst of icmp_msgs_burst (50),
// then icmp_msgs_per_sec (1000/s) refilled at most every 20 ms (HZ/50),
// shared by ICMP and ICMPv6.
func TestGlobal(t *testing.T) {
	l, c := newTestLimiter(0)
	dst := 0
	spray := func(n int) int { // one error to each of n new destinations, alternating families
		allowed := 0
		for range n {
			dst++
			allowed += count(l, from(nth(dst%2 == 0, dst)), Unreachable, 1)
		}
		return allowed
	}
	if n := spray(100); n != 50 {
		t.Errorf("burst: %d allowed, want 50", n)
	}
	c.advance(19 * time.Millisecond)
	if n := spray(100); n != 0 {
		t.Errorf("19 ms later: %d allowed, want 0", n)
	}
	c.advance(time.Millisecond)
	if n := spray(100); n != 20 {
		t.Errorf("20 ms later: %d allowed, want 20 (20 ms at 1000/s)", n)
	}
	c.advance(5 * time.Second)
	if n := spray(100); n != 50 {
		t.Errorf("after 5 s: %d allowed, want the burst, 50", n)
	}
	// 5 tries a millisecond for 10 s: the burst, then 20 every 20 ms.
	l, c = newTestLimiter(0)
	allowed := 0
	for range 10_000 {
		allowed += spray(5)
		c.advance(time.Millisecond)
	}
	if want := 50 + 499*20; allowed != want {
		t.Errorf("5000/s for 10 s: %d allowed, want %d", allowed, want)
	}
}

// TestRandomCost: with the kernel's random cost (0, 1 or 2 credits), the
// long-run rate is still icmp_msgs_per_sec.
func TestRandomCost(t *testing.T) {
	c := &clock{t: time.Unix(1e9, 0)}
	l := NewLimiter(LinuxLimits(), 0, c.now)
	l.rng = rand.NewPCG(1, 2)
	allowed := 0
	for i := range 100_000 { // 10 s at 10000/s
		allowed += count(l, from(nth(false, i)), Unreachable, 1)
		c.advance(100 * time.Microsecond)
	}
	if allowed < 9500 || allowed > 10600 {
		t.Errorf("10 s of floods: %d allowed, want about 10050", allowed)
	}
}

// TestUnlimited: path MTU discovery is never limited and does not touch
// the buckets; types outside the ratemask neither; icmp_ratelimit 0 lifts
// the per-destination limit but not the global one.
func TestUnlimited(t *testing.T) {
	l, _ := newTestLimiter(0)
	for _, src := range []netip.Addr{nth(false, 1), nth(true, 1)} {
		if n := count(l, from(src), TooBig, 10_000); n != 10_000 {
			t.Errorf("too big to %v: %d of 10000 allowed", src, n)
		}
	}
	for _, m := range []struct {
		v6        bool
		typ, code uint8
	}{{false, 0, 0}, {false, 5, 0}, {false, 19, 0}, {false, 255, 0}, {true, 2, 0}, {true, 128, 0}, {true, 255, 0}} {
		to := nth(m.v6, 1)
		for range 1000 {
			if !l.allow(to, m.typ, m.code) {
				t.Fatalf("type %d code %d to %v limited", m.typ, m.code, to)
			}
		}
	}
	if l.credit != 0 || l.stamp != -refillMax {
		t.Errorf("the global bucket was touched: credit %d stamp %d", l.credit, l.stamp)
	}
	lim := LinuxLimits()
	lim.Ratelimit4 = 0
	l = NewLimiter(lim, 0, (&clock{t: time.Unix(1e9, 0)}).now)
	l.rng = cost(1)
	if n := count(l, from(nth(false, 1)), Unreachable, 100); n != 50 {
		t.Errorf("icmp_ratelimit 0: %d allowed to one destination, want 50 (the global burst)", n)
	}
}

// TestUnanswerable: no decision, and no charge, for a packet Build would
// not answer.
func TestUnanswerable(t *testing.T) {
	l, _ := newTestLimiter(0)
	noDF := pkt4{src: host4a, dst: host4b, proto: header.UDPProtocolNumber, payload: udp(8)}.bytes()
	for _, tc := range []struct {
		orig []byte
		kind Kind
	}{
		{pkt4{src: host4a, dst: host4b, proto: header.ICMPv4ProtocolNumber, payload: icmp4(header.ICMPv4DstUnreachable, 8)}.bytes(), Unreachable},
		{pkt6{src: host6a, dst: host6b, proto: header.ICMPv6ProtocolNumber, payload: icmp6(header.ICMPv6TimeExceeded, 8)}.bytes(), TooBig},
		{pkt6{src: host6a, dst: "ff02::1", proto: header.UDPProtocolNumber, payload: udp(8)}.bytes(), Unreachable},
		{noDF, TooBig},
		{from(nth(false, 1)), 0},
		{[]byte{0x45, 0}, Unreachable},
		{nil, TooBig},
	} {
		if l.Allow(tc.orig, tc.kind) || Answers(tc.orig, tc.kind) {
			t.Errorf("allowed or answers %v for %x", tc.kind, tc.orig)
		}
	}
	if l.credit != 0 || l.stamp != -refillMax {
		t.Errorf("the global bucket was touched: credit %d stamp %d", l.credit, l.stamp)
	}
	if !Answers(noDF, Unreachable) || !l.Allow(noDF, Unreachable) {
		t.Error("refused the first error")
	}
}

// TestPeerTable: the table stays at its bound and a destination keeps its
// bucket while others come and go.
func TestPeerTable(t *testing.T) {
	l, _ := newTestLimiter(64)
	if n := len(l.peers.sets) * ways; n != 64 {
		t.Fatalf("table for 64 destinations has %d", n)
	}
	l.lim.MsgsPerSec, l.lim.MsgsBurst = 1e9, 1e9 // the global bucket never runs dry
	for i := range 10_000 {
		count(l, from(nth(i%2 == 0, i)), Unreachable, 1)
	}
	if n := len(l.peers.sets) * ways; n != 64 {
		t.Errorf("table grew to %d", n)
	}
	l, _ = newTestLimiter(0)
	l.lim.MsgsPerSec, l.lim.MsgsBurst = 1e9, 1e9 // the global bucket never runs dry
	kept := from(nth(false, 0))
	count(l, kept, Unreachable, 6)
	for i := 1; i <= 100; i++ {
		count(l, from(nth(false, i)), Unreachable, 1)
	}
	if l.Allow(kept, Unreachable) {
		t.Error("a destination that used its burst was forgotten among 100 others in a table of 4096")
	}
}

// TestLimiterAllocs: a decision allocates nothing, for a known or a new
// destination.
func TestLimiterAllocs(t *testing.T) {
	l, c := newTestLimiter(0)
	v4, v6 := from(nth(false, 1)), from(nth(true, 1))
	i := uint32(0)
	if a := testing.AllocsPerRun(10_000, func() {
		i++
		binary.BigEndian.PutUint32(v6[header.IPv6MinimumSize-20:], i) // a new source each time
		l.Allow(v4, Unreachable)
		l.Allow(v6, Unreachable)
		c.advance(time.Millisecond)
	}); a != 0 {
		t.Errorf("%v allocations per pair of decisions", a)
	}
}

// TestLimiterConcurrent: decisions from several goroutines (run with
// -race).
func TestLimiterConcurrent(t *testing.T) {
	l := NewLimiter(LinuxLimits(), 128, nil)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				l.Allow(from(nth(g%2 == 0, i%300)), Unreachable)
			}
		})
	}
	wg.Wait()
}

func BenchmarkAllow(b *testing.B) {
	l := NewLimiter(LinuxLimits(), 0, nil)
	orig := from(nth(false, 1))
	b.ReportAllocs()
	for b.Loop() {
		l.Allow(orig, Unreachable)
	}
}
