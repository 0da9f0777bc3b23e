package udp

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/gsoplane/gsoplane/dataplane/frame"
)

func pfxs(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// NewPeers refuses what cannot be routed unambiguously, saying which
// peer and why, in an error that wraps ErrInvalidPeers and
// frame.ErrInvalidConfig.
func TestNewPeersErrors(t *testing.T) {
	ok := Peer{Endpoint: ap("192.0.2.1:51820"), Allowed: pfxs("10.0.0.0/24")}
	for _, c := range []struct {
		name  string
		peers []Peer
		want  PeerError
	}{
		{"none", nil, PeerError{Kind: NoPeers, Peer: -1, Other: -1}},
		{"no endpoint", []Peer{ok, {}}, PeerError{Kind: BadEndpoint, Peer: 1, Other: -1}},
		{"port 0", []Peer{{Endpoint: ap("192.0.2.2:0")}}, PeerError{Kind: BadEndpoint, Peer: 0, Other: -1, Endpoint: ap("192.0.2.2:0")}},
		{"unspecified", []Peer{{Endpoint: ap("[::]:51820")}}, PeerError{Kind: BadEndpoint, Peer: 0, Other: -1, Endpoint: ap("[::]:51820")}},
		{"same endpoint", []Peer{ok, {Endpoint: ap("192.0.2.1:51820")}}, PeerError{Kind: DuplicateEndpoint, Peer: 1, Other: 0, Endpoint: ap("192.0.2.1:51820")}},
		{"same endpoint, mapped", []Peer{ok, {Endpoint: ap("[::ffff:192.0.2.1]:51820")}}, PeerError{Kind: DuplicateEndpoint, Peer: 1, Other: 0, Endpoint: ap("[::ffff:192.0.2.1]:51820")}},
		{"invalid prefix", []Peer{{Endpoint: ap("192.0.2.2:1"), Allowed: []netip.Prefix{{}}}}, PeerError{Kind: BadPrefix, Peer: 0, Other: -1}},
		{"unmasked prefix", []Peer{{Endpoint: ap("192.0.2.2:1"), Allowed: pfxs("10.0.0.1/24")}}, PeerError{Kind: BadPrefix, Peer: 0, Other: -1, Prefix: netip.MustParsePrefix("10.0.0.1/24")}},
		{"prefix of two peers", []Peer{ok, {Endpoint: ap("192.0.2.2:1"), Allowed: pfxs("10.1.0.0/16", "10.0.0.0/24")}}, PeerError{Kind: DuplicatePrefix, Peer: 1, Other: 0, Prefix: netip.MustParsePrefix("10.0.0.0/24")}},
		{"prefix twice", []Peer{{Endpoint: ap("192.0.2.2:1"), Allowed: pfxs("::/0", "::/0")}}, PeerError{Kind: DuplicatePrefix, Peer: 0, Other: 0, Prefix: netip.MustParsePrefix("::/0")}},
	} {
		_, err := NewPeers(c.peers)
		var pe *PeerError
		switch {
		case !errors.As(err, &pe):
			t.Errorf("%s: error %v, want a *PeerError", c.name, err)
		case *pe != c.want:
			t.Errorf("%s: %+v, want %+v", c.name, *pe, c.want)
		case !errors.Is(err, ErrInvalidPeers) || !errors.Is(err, frame.ErrInvalidConfig):
			t.Errorf("%s: %v wraps neither sentinel", c.name, err)
		default:
			t.Logf("%s: %v", c.name, err)
		}
	}
	if _, err := NewPeers([]Peer{ok, {Endpoint: ap("192.0.2.1:51821")}}); err != nil {
		t.Errorf("another port of the same address, no prefixes: %v", err)
	}
}

// Route matches the longest prefix, per family; ByEndpoint finds a
// peer by its endpoint, mapped or not; Allows is Route back to the
// peer; none of them allocates.
func TestPeersRoute(t *testing.T) {
	peers, err := NewPeers([]Peer{
		{Endpoint: ap("192.0.2.1:51820"), Allowed: pfxs("0.0.0.0/0", "::/0")},
		{Endpoint: ap("192.0.2.2:51820"), Allowed: pfxs("10.0.0.0/8", "2001:db8::/32")},
		{Endpoint: ap("[2001:db8:ffff::3]:51820"), Allowed: pfxs("10.1.0.0/16", "10.1.2.3/32", "2001:db8:1::/48")},
		{Endpoint: ap("[::ffff:192.0.2.4]:4"), Allowed: pfxs("10.1.2.0/24", "2001:db8:1:2::/64", "2001:db8:1:2::1/128")},
		{Endpoint: ap("192.0.2.5:5")}, // nothing routed to it
	})
	if err != nil {
		t.Fatal(err)
	}
	if peers.Len() != 5 || peers.Peer(3).Endpoint != ap("192.0.2.4:4") {
		t.Errorf("Len %d, peer 3 %+v", peers.Len(), peers.Peer(3))
	}
	for _, c := range []struct {
		dst  string
		peer int
	}{
		{"198.51.100.1", 0}, {"10.0.0.1", 1}, {"10.1.0.1", 2}, {"10.1.2.2", 3}, {"10.1.2.3", 2}, {"10.1.3.255", 2},
		{"11.0.0.0", 0}, {"9.255.255.255", 0}, {"0.0.0.0", 0}, {"255.255.255.255", 0},
		{"2001:db7::1", 0}, {"2001:db8::1", 1}, {"2001:db8:1::1", 2}, {"2001:db8:1:2::2", 3}, {"2001:db8:1:2::1", 3},
		{"2001:db8:1:3::1", 2}, {"::ffff:10.1.2.3", 0}, {"::", 0},
	} {
		got, ok := peers.Route(netip.MustParseAddr(c.dst))
		if !ok || got != c.peer {
			t.Errorf("Route(%s) = %d, %v; want peer %d", c.dst, got, ok, c.peer)
		}
	}
	v4only, _ := NewPeers([]Peer{{Endpoint: ap("192.0.2.1:1"), Allowed: pfxs("10.0.0.0/8", "10.0.0.0/9")}})
	for _, dst := range []string{"11.0.0.1", "2001:db8::1", "::ffff:10.0.0.1"} {
		if p, ok := v4only.Route(netip.MustParseAddr(dst)); ok {
			t.Errorf("Route(%s) = %d with no prefix for it", dst, p)
		}
	}
	for _, c := range []struct {
		ep   string
		peer int // -1: none
	}{
		{"192.0.2.1:51820", 0}, {"[::ffff:192.0.2.2]:51820", 1}, {"192.0.2.4:4", 3}, {"[::ffff:192.0.2.4]:4", 3},
		{"[2001:db8:ffff::3]:51820", 2}, {"[2001:db8:ffff::3%eth0]:51820", 2},
		{"192.0.2.1:51821", -1}, {"192.0.2.3:51820", -1}, {"[2001:db8:ffff::3]:51821", -1},
	} {
		got, ok := peers.ByEndpoint(ap(c.ep))
		if ok != (c.peer >= 0) || ok && got != c.peer {
			t.Errorf("ByEndpoint(%s) = %d, %v; want %d", c.ep, got, ok, c.peer)
		}
	}
	for _, c := range []struct {
		peer  int
		src   string
		allow bool
	}{
		{3, "10.1.2.2", true}, {3, "10.1.2.3", false}, {2, "10.1.2.3", true}, {0, "10.1.2.3", false},
		{0, "203.0.113.9", true}, {1, "203.0.113.9", false}, {4, "203.0.113.9", false}, {1, "2001:db8::5", true},
	} {
		if got := peers.Allows(c.peer, netip.MustParseAddr(c.src)); got != c.allow {
			t.Errorf("Allows(%d, %s) = %v, want %v", c.peer, c.src, got, c.allow)
		}
	}
	dst4, dst6, ep := netip.MustParseAddr("10.1.2.2"), netip.MustParseAddr("2001:db8:1:2::2"), ap("[::ffff:192.0.2.4]:4")
	if allocs := testing.AllocsPerRun(100, func() {
		peers.Route(dst4)
		peers.Route(dst6)
		peers.ByEndpoint(ep)
		peers.Allows(3, dst4)
	}); allocs != 0 {
		t.Errorf("%.1f allocations per lookup", allocs)
	}
}

// A tally adds a run of one peer's datagrams to its counters at once,
// and Stats reports them.
func TestPeersTally(t *testing.T) {
	peers, err := NewPeers([]Peer{{Endpoint: ap("192.0.2.1:1")}, {Endpoint: ap("192.0.2.2:2")}})
	if err != nil {
		t.Fatal(err)
	}
	sent, recv := tally{t: peers.load()}, tally{t: peers.load(), received: true}
	for _, p := range []int{0, 0, 1, 0, 1, 1} {
		sent.add(p, 2, 100)
		recv.add(1-p, 1, 10)
	}
	sent.flush()
	recv.flush()
	sent.flush()
	want := []PeerStats{
		{Endpoint: ap("192.0.2.1:1"), SentDatagrams: 6, SentBytes: 300, ReceivedDatagrams: 3, ReceivedBytes: 30},
		{Endpoint: ap("192.0.2.2:2"), SentDatagrams: 6, SentBytes: 300, ReceivedDatagrams: 3, ReceivedBytes: 30},
	}
	for i, s := range peers.Stats() {
		if s != want[i] {
			t.Errorf("peer %d: %+v, want %+v", i, s, want[i])
		}
	}
}

// Set keeps a peer's counters by Key, or by Endpoint without one, and
// routes by the new list; SetEndpoint moves one endpoint and refuses
// another peer's, a bad one and a peer that is not there.
func TestPeersSet(t *testing.T) {
	peers, err := NewPeers([]Peer{
		{Endpoint: ap("192.0.2.1:1"), Allowed: pfxs("10.0.0.0/24"), Key: "a"},
		{Endpoint: ap("192.0.2.2:2"), Allowed: pfxs("10.0.1.0/24")},
	})
	if err != nil {
		t.Fatal(err)
	}
	sent := tally{t: peers.load()}
	sent.add(0, 1, 10)
	sent.add(1, 2, 20)
	sent.flush()
	if err := peers.Set([]Peer{
		{Endpoint: ap("192.0.2.3:3"), Allowed: pfxs("10.0.2.0/24")},
		{Endpoint: ap("192.0.2.2:2"), Allowed: pfxs("10.0.1.0/24")},
		{Endpoint: ap("192.0.2.9:9"), Allowed: pfxs("10.0.0.0/24"), Key: "a"},
	}); err != nil {
		t.Fatal(err)
	}
	got := peers.Stats()
	if got[0].SentDatagrams != 0 || got[1].SentDatagrams != 2 || got[2].SentDatagrams != 1 {
		t.Errorf("after Set: %+v: want the counters kept by key and endpoint", got)
	}
	if p, ok := peers.Route(netip.MustParseAddr("10.0.2.7")); !ok || p != 0 {
		t.Errorf("Route to the new peer's prefix: %d, %v", p, ok)
	}
	if err := peers.SetEndpoint(0, ap("192.0.2.4:4")); err != nil {
		t.Fatal(err)
	}
	if p, ok := peers.ByEndpoint(ap("192.0.2.4:4")); !ok || p != 0 {
		t.Errorf("ByEndpoint(moved) = %d, %v", p, ok)
	}
	if _, ok := peers.ByEndpoint(ap("192.0.2.3:3")); ok {
		t.Error("the old endpoint is still peer 0's")
	}
	for _, c := range []struct {
		i  int
		ep string
	}{{0, "192.0.2.2:2"}, {0, "0.0.0.0:4"}, {3, "192.0.2.5:5"}, {-1, "192.0.2.5:5"}} {
		if err := peers.SetEndpoint(c.i, ap(c.ep)); !errors.Is(err, ErrInvalidPeers) {
			t.Errorf("SetEndpoint(%d, %s) = %v, want ErrInvalidPeers", c.i, c.ep, err)
		}
	}
	if err := peers.Set(nil); !errors.Is(err, ErrInvalidPeers) || peers.Len() != 3 {
		t.Errorf("Set(nil) = %v, %d peers after: want ErrInvalidPeers and the table as it was", err, peers.Len())
	}
}
