package wireguard

import (
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// TestSourceLimiter: a source gets its burst, then SourceRate a second;
// IPv6 sources are counted by /64 and IPv4 ones also when mapped; the
// table holds MaxSources, and forgets the quiet ones after a second.
func TestSourceLimiter(t *testing.T) {
	ms := int64(time.Millisecond)
	l := sourceLimiter{buckets: map[netip.Addr]sourceBucket{}}
	a := netip.MustParseAddr("192.0.2.1")
	m := int64(1)
	for i := range SourceBurst {
		if !l.allow(a, m) {
			t.Fatalf("message %d of the burst refused", i)
		}
	}
	if l.allow(a, m) || l.allow(netip.MustParseAddr("::ffff:192.0.2.1"), m) {
		t.Fatal("past the burst, at once, allowed")
	}
	if !l.allow(netip.MustParseAddr("192.0.2.2"), m) {
		t.Fatal("another address refused")
	}
	// Ten seconds of a message every 10 ms: the rate's 200 more.
	allowed := 0
	for i := 1; i <= 1000; i++ {
		if l.allow(a, m+int64(i)*10*ms) {
			allowed++
		}
	}
	if want := 10 * SourceRate; allowed != want {
		t.Errorf("%d allowed in 10 s at 100 a second, want %d", allowed, want)
	}

	v6 := netip.MustParseAddr("2001:db8:1:2::1")
	for range SourceBurst {
		l.allow(v6, m)
	}
	if l.allow(netip.MustParseAddr("2001:db8:1:2:ffff::9"), m) {
		t.Error("the same /64 allowed past its burst")
	}
	if !l.allow(netip.MustParseAddr("2001:db8:1:3::1"), m) {
		t.Error("another /64 refused")
	}

	full := sourceLimiter{buckets: map[netip.Addr]sourceBucket{}}
	for i := range MaxSources {
		src := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		if !full.allow(src, m) {
			t.Fatalf("source %d of %d refused", i, MaxSources)
		}
	}
	if full.allow(netip.MustParseAddr("192.0.2.9"), m) {
		t.Error("a source past MaxSources allowed")
	}
	if !full.allow(netip.AddrFrom4([4]byte{10, 0, 0, 1}), m) {
		t.Error("a remembered source refused with the table full")
	}
	if !full.allow(netip.MustParseAddr("192.0.2.9"), m+int64(time.Second)) || len(full.buckets) != 1 {
		t.Errorf("after a second: %d sources remembered, want only the new one", len(full.buckets))
	}
}

// TestSourceLimited: under load, an initiation with a valid MAC2 sent
// again and again from one source costs the responder its work
// SourceBurst times at once, then is refused with SourceLimited before
// any Diffie-Hellman; not under load, no source is limited.
func TestSourceLimited(t *testing.T) {
	s := newPair(t, Key{}, nil)
	reply, _, _ := s.b.Handle(nil, s.fresh(t), addrA, true)
	if _, _, err := s.a.Handle(nil, reply, addrB, false); err != nil {
		t.Fatalf("cookie reply: %v", err)
	}
	init := s.fresh(t)
	var got []string
	for range SourceBurst + 2 {
		_, _, err := s.b.Handle(nil, init, addrA, true)
		got = append(got, fmt.Sprint(err))
	}
	want := fmt.Sprint([]any{nil, OldTimestamp, OldTimestamp, OldTimestamp, OldTimestamp, SourceLimited, SourceLimited})
	if fmt.Sprint(got) != want {
		t.Errorf("initiation %d times under load: %v, want %v", SourceBurst+2, got, want)
	}
	if _, _, err := s.b.Handle(nil, init, addrA, false); err != OldTimestamp {
		t.Errorf("not under load: %v, want %v", err, OldTimestamp)
	}
}
