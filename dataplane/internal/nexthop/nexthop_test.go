package nexthop

import (
	"errors"
	"net/netip"
	"testing"
	"time"
)

// These tests drive the cache and its states without a kernel: the test
// plays the worker (reading the jobs) and the kernel (settle).

var (
	macA = [6]byte{2, 0, 0, 0, 0, 0xa}
	macB = [6]byte{2, 0, 0, 0, 0, 0xb}
)

// newTestResolver returns a resolver without its kernel side.
func newTestResolver(t *testing.T, cfg Config) *Resolver {
	t.Helper()
	cfg.Ifindex = 1
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return newResolver(cfg)
}

// jobs returns the jobs queued so far.
func jobs(r *Resolver) []job {
	var js []job
	for {
		select {
		case j := <-r.jobs:
			js = append(js, j)
		default:
			return js
		}
	}
}

// addr returns the n-th test address.
func addr(n int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18, byte(n >> 8), byte(n)})
}

func lookupState(r *Resolver, dst netip.Addr) State { _, st := r.Lookup(dst); return st }

// TestStates walks an entry through its states as the kernel would.
func TestStates(t *testing.T) {
	r := newTestResolver(t, Config{})
	dst := addr(1)
	if st := lookupState(r, dst); st != Pending {
		t.Fatalf("miss: %v, want pending", st)
	}
	if js := jobs(r); len(js) != 1 || js[0] != (job{key: dst}) {
		t.Fatalf("miss queued %v, want one resolution", js)
	}
	v := r.Changed()
	if !r.setHop(dst, dst) {
		t.Fatal("the resolution is not wanted")
	}
	r.settle(dst, neigh{kind: unsettled}, true) // NUD_INCOMPLETE: nothing yet
	if st := lookupState(r, dst); st != Pending || r.Changed() != v {
		t.Fatalf("incomplete: %v, version %d→%d", st, v, r.Changed())
	}
	r.settle(dst, neigh{kind: usable, mac: macA}, false)
	if mac, st := r.Lookup(dst); st != Resolved || mac != macA || r.Changed() == v {
		t.Fatalf("reachable: %v %v, version %d→%d", mac, st, v, r.Changed())
	}
	r.settle(dst, neigh{kind: usable, mac: macB}, true) // a stale query answer: ignored
	if mac, _ := r.Lookup(dst); mac != macA {
		t.Errorf("a query answer replaced the MAC address of a resolved entry")
	}
	v = r.Changed()
	r.settle(dst, neigh{kind: usable, mac: macB}, false) // the peer's MAC changed
	if mac, _ := r.Lookup(dst); mac != macB || r.Changed() == v {
		t.Errorf("MAC change: %v, version %d→%d", mac, v, r.Changed())
	}
	r.settle(dst, neigh{kind: failed}, false) // the kernel resolves again with the next packet, so do we
	if st := lookupState(r, dst); st != Pending || len(jobs(r)) != 1 {
		t.Errorf("NUD_FAILED of a resolved neighbour: %v, want pending and a new resolution", st)
	}
	r.settle(dst, neigh{kind: failed}, false)
	if st := lookupState(r, dst); st != Failed {
		t.Errorf("NUD_FAILED: %v, want failed", st)
	}
	r.advance(999) // FailedTTL not over: negative cache
	if st := lookupState(r, dst); st != Failed || len(jobs(r)) != 0 {
		t.Errorf("within FailedTTL: %v, want failed and no new resolution", st)
	}
	r.advance(1000)
	if lookupState(r, dst) != Pending || len(jobs(r)) != 1 {
		t.Errorf("after FailedTTL: want pending and a new resolution")
	}
	r.setHop(dst, dst)
	r.advance(1000 + 4999)
	if lookupState(r, dst) != Pending {
		t.Error("failed before Timeout")
	}
	r.advance(1000 + 5000)
	if lookupState(r, dst) != Failed {
		t.Error("pending after Timeout")
	}
	s := r.Stats()
	if want := (Stats{Hits: s.Hits, Misses: 2, Started: 3, Succeeded: 1, Failed: 2, Entries: 1}); s != want {
		t.Errorf("stats %+v, want %+v", s, want)
	}
}

// TestDeleted: a deleted neighbour has resolved entries resolved again,
// answering their MAC address meanwhile, and keeps failures and
// resolutions under way; a resolution that fails makes them Failed.
func TestDeleted(t *testing.T) {
	r := newTestResolver(t, Config{})
	a, b := addr(1), addr(2)
	r.Lookup(a)
	r.setHop(a, a)
	r.settle(a, neigh{kind: usable, mac: macA}, false)
	r.Lookup(b)
	r.setHop(b, b)
	jobs(r)
	v := r.Changed()
	r.settle(a, neigh{kind: gone}, false)
	r.settle(b, neigh{kind: gone}, false)
	if js := jobs(r); len(js) != 1 || js[0] != (job{key: a}) || r.Changed() == v {
		t.Errorf("deleted resolved neighbour: jobs %v, Changed moved %v; want it resolved again", js, r.Changed() != v)
	}
	if mac, st := r.Lookup(a); st != Resolved || mac != macA || r.Stats().Pending != 2 {
		t.Errorf("deleted resolved neighbour: %v %v, stats %+v; want its MAC while resolved again", mac, st, r.Stats())
	}
	if st := lookupState(r, b); st != Pending {
		t.Errorf("deleted neighbour under resolution: %v; want still pending", st)
	}
	r.settle(a, neigh{kind: failed}, true)
	if st := lookupState(r, a); st != Failed {
		t.Errorf("deleted neighbour whose resolution failed: %v, want failed", st)
	}
}

// TestRouted: destinations routed through one gateway follow its
// neighbour entry together.
func TestRouted(t *testing.T) {
	r := newTestResolver(t, Config{})
	gw := netip.MustParseAddr("198.18.0.254")
	dsts := []netip.Addr{addr(1), addr(2), gw}
	for _, d := range dsts {
		r.Lookup(d)
		r.setHop(d, gw)
	}
	jobs(r)
	r.settle(gw, neigh{kind: usable, mac: macA}, true)
	for _, d := range dsts {
		if mac, st := r.Lookup(d); st != Resolved || mac != macA {
			t.Errorf("%v through %v: %v %v", d, gw, mac, st)
		}
	}
	r.settle(gw, neigh{kind: failed}, false)
	if js := jobs(r); len(js) != len(dsts) {
		t.Errorf("%v failed: %d new resolutions, want %d", gw, len(js), len(dsts))
	}
	r.settle(gw, neigh{kind: failed}, false)
	for _, d := range dsts {
		if st := lookupState(r, d); st != Failed {
			t.Errorf("%v through a failed %v: %v", d, gw, st)
		}
	}
}

// TestGatewayKey: with a configured gateway, every destination shares
// the gateway's entry.
func TestGatewayKey(t *testing.T) {
	gw := netip.MustParseAddr("198.18.0.254")
	r := newTestResolver(t, Config{Gateway: gw})
	r.Lookup(addr(1))
	r.Lookup(netip.MustParseAddr("2001:2::1"))
	if js := jobs(r); len(js) != 1 || js[0].key != gw {
		t.Fatalf("jobs %v, want one resolution of %v", js, gw)
	}
	r.setHop(gw, gw)
	r.settle(gw, neigh{kind: usable, mac: macA}, true)
	if mac, st := r.Lookup(addr(7)); st != Resolved || mac != macA || r.Stats().Entries != 1 {
		t.Errorf("another destination: %v %v, %d entries", mac, st, r.Stats().Entries)
	}
}

// TestRecheck: a resolved entry in use is re-validated at most every
// Revalidate, and dropped if its route changed.
func TestRecheck(t *testing.T) {
	r := newTestResolver(t, Config{})
	dst := addr(1)
	r.Lookup(dst)
	jobs(r)
	r.setHop(dst, dst)
	r.settle(dst, neigh{kind: usable, mac: macA}, true)
	r.Lookup(dst)
	if js := jobs(r); len(js) != 0 {
		t.Fatalf("fresh entry re-validated: %v", js)
	}
	r.advance(1000)
	r.Lookup(dst)
	r.Lookup(dst)
	if js := jobs(r); len(js) != 1 || js[0] != (job{key: dst, recheck: true}) {
		t.Fatalf("after Revalidate: %v, want one re-validation", js)
	}
	if static, ok := r.rechecked(dst, dst); static || !ok {
		t.Errorf("same route: static %v ok %v", static, ok)
	}
	r.advance(1500)
	if r.Lookup(dst); len(jobs(r)) != 0 {
		t.Error("re-validated twice within Revalidate")
	}
	if _, ok := r.rechecked(dst, addr(9)); ok || r.Stats().Entries != 0 {
		t.Error("an entry whose route changed was kept")
	}
}

// TestResync: after lost notifications, resolved entries are re-validated
// at their next lookup and resolutions under way are asked again.
func TestResync(t *testing.T) {
	r := newTestResolver(t, Config{})
	done, doing := addr(1), addr(2)
	r.Lookup(done)
	r.setHop(done, done)
	r.settle(done, neigh{kind: usable, mac: macA}, true)
	r.Lookup(doing)
	jobs(r)
	r.resync()
	if js := jobs(r); len(js) != 1 || js[0] != (job{key: doing}) {
		t.Errorf("resync queued %v, want the resolution under way", js)
	}
	if r.Lookup(done); len(jobs(r)) != 1 || r.Stats().Resyncs != 1 {
		t.Errorf("the resolved entry was not re-validated at its next lookup")
	}
}

// TestLinkUp: when the link comes back, failures are forgotten,
// resolutions under way start again with a fresh solicitation, and
// resolved entries stay.
func TestLinkUp(t *testing.T) {
	r := newTestResolver(t, Config{})
	done, doing, dead := addr(1), addr(2), addr(3)
	for _, d := range []netip.Addr{done, doing, dead} {
		r.Lookup(d)
		r.setHop(d, d)
	}
	r.settle(done, neigh{kind: usable, mac: macA}, true)
	r.settle(dead, neigh{kind: failed}, true)
	jobs(r)
	v := r.Changed()
	r.LinkUp()
	if js := jobs(r); len(js) != 1 || js[0] != (job{key: doing, renew: true}) {
		t.Errorf("LinkUp queued %v, want the resolution under way renewed", js)
	}
	if r.Changed() == v {
		t.Error("the link came up, but Changed did not move")
	}
	if mac, st := r.Lookup(done); st != Resolved || mac != macA {
		t.Errorf("resolved entry after LinkUp: %v %v", mac, st)
	}
	if st := lookupState(r, dead); st != Pending {
		t.Errorf("failed entry after LinkUp: %v, want a new resolution (pending)", st)
	}
	if js := jobs(r); len(js) != 1 || js[0] != (job{key: dead}) {
		t.Errorf("a lookup of the forgotten failure queued %v, want its resolution", js)
	}
}

// TestBounded: many destinations keep the cache at MaxEntries and the
// resolutions under way at MaxPending; resolved entries in use survive
// the churn (second chance).
func TestBounded(t *testing.T) {
	r := newTestResolver(t, Config{MaxEntries: 64, MaxPending: 8})
	hot := addr(0)
	r.Lookup(hot)
	r.setHop(hot, hot)
	r.settle(hot, neigh{kind: usable, mac: macA}, true)
	for i := 1; i <= 10_000; i++ {
		d := addr(i)
		r.Lookup(d)
		for _, j := range jobs(r) { // the kernel answers half, fails the others but every 100th
			r.setHop(j.key, j.key)
			switch {
			case i%100 == 0:
			case i%2 == 1:
				r.settle(j.key, neigh{kind: usable, mac: macB}, true)
			default:
				r.settle(j.key, neigh{kind: failed}, true)
			}
		}
		r.Lookup(hot)
		if s := r.Stats(); s.Entries > 64 || s.Pending > 8 {
			t.Fatalf("after %d destinations: %+v", i, s)
		}
	}
	s := r.Stats()
	if s.Evictions == 0 || s.Refused == 0 || s.Entries != 64 || s.Pending != 8 {
		t.Errorf("stats %+v: want evictions, refusals, 64 entries, 8 pending", s)
	}
	if mac, st := r.Lookup(hot); st != Resolved || mac != macA {
		t.Errorf("the entry in use was evicted: %v %v", mac, st)
	}
}

// TestLookupAllocs: a lookup of a cached destination allocates nothing.
func TestLookupAllocs(t *testing.T) {
	r := newTestResolver(t, Config{})
	dst := netip.MustParseAddr("2001:2::1")
	r.Lookup(dst)
	r.setHop(dst, dst)
	r.settle(dst, neigh{kind: usable, mac: macA}, true)
	if a := testing.AllocsPerRun(1000, func() { r.Lookup(dst) }); a != 0 {
		t.Errorf("%v allocations per lookup", a)
	}
}

func TestConfig(t *testing.T) {
	for _, c := range []Config{
		{},
		{Ifindex: 1, MaxEntries: 10, MaxPending: 6},
		{Ifindex: 1, MaxEntries: 1},
		{Ifindex: 1, FailedTTL: -time.Second},
	} {
		if _, err := c.withDefaults(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", c, err)
		}
	}
	c, err := Config{Ifindex: 3}.withDefaults()
	if err != nil || c.MaxEntries != 4096 || c.MaxPending != 256 || c.FailedTTL != time.Second || c.Revalidate != time.Second || c.Timeout != 5*time.Second {
		t.Errorf("defaults: %+v, %v", c, err)
	}
}

func BenchmarkLookup(b *testing.B) {
	cfg, _ := Config{Ifindex: 1}.withDefaults()
	r := newResolver(cfg)
	dst := addr(1)
	r.Lookup(dst)
	r.setHop(dst, dst)
	r.settle(dst, neigh{kind: usable, mac: macA}, true)
	b.ReportAllocs()
	for b.Loop() {
		r.Lookup(dst)
	}
}
