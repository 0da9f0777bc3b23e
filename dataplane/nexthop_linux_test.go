package dataplane

import (
	"errors"
	"net/netip"
	"testing"
	"time"
)

// TestNeighbours resolves on-link and routed destinations through the
// kernel, with no static neighbour entries, over IPv4 and IPv6.
func TestNeighbours(t *testing.T) {
	gw, peer := newNetns(t), newNetns(t)
	addVeth(t, gw, "nh-a", peer, "nh-b")
	nlGW, nlPeer := netlinkIn(t, gw), netlinkIn(t, peer)
	addAddr(t, nlGW, "nh-a", "198.18.110.1/24")
	addAddr(t, nlGW, "nh-a", "2001:2:0:110::1/64")
	addAddr(t, nlPeer, "nh-b", "198.18.110.2/24")
	addAddr(t, nlPeer, "nh-b", "2001:2:0:110::2/64")
	addRoute(t, nlGW, "198.19.110.0/24", "nh-a", "198.18.110.2")
	addRoute(t, nlGW, "2001:2:0:111::/64", "nh-a", "2001:2:0:110::2")
	want := mustLink(t, nlPeer, "nh-b").Attrs().HardwareAddr.String()

	// The main table sends 198.19.120.0/24 elsewhere (as it sends the
	// gateway's destinations into its TUN): only routes through nh-a count.
	addVeth(t, gw, "nh-c", peer, "nh-d")
	addRoute(t, nlGW, "198.19.120.0/24", "nh-c", "")
	var n, viaGW *neighbours
	inNetns(t, gw, func() {
		ifindex := mustLink(t, nlGW, "nh-a").Attrs().Index
		var err error
		if n, err = newNeighbours(ifindex, netip.Addr{}); err != nil {
			t.Fatal(err)
		}
		if viaGW, err = newNeighbours(ifindex, netip.MustParseAddr("198.18.110.2")); err != nil {
			t.Fatal(err)
		}
	})
	defer n.close()
	defer viaGW.close()
	if mac, err := viaGW.lookup(netip.MustParseAddr("198.19.120.5")); err != nil || mac.String() != want {
		t.Errorf("through the configured gateway: %v, %v; want %s", mac, err, want)
	}
	for _, dst := range []string{"198.18.110.2", "198.19.110.7", "2001:2:0:110::2", "2001:2:0:111::9"} {
		mac, err := n.lookup(netip.MustParseAddr(dst))
		if err != nil || mac.String() != want {
			t.Errorf("%s: %v, %v; want %s", dst, mac, err, want)
		}
	}
	n.timeout = 300 * time.Millisecond // for the lookups that fail
	if _, err := n.lookup(netip.MustParseAddr("198.18.110.99")); !errors.Is(err, ErrNoNeighbour) {
		t.Errorf("absent host: %v, want ErrNoNeighbour", err)
	}
	if _, err := n.lookup(netip.MustParseAddr("198.19.120.5")); !errors.Is(err, ErrNoNeighbour) {
		t.Errorf("routed elsewhere, so taken as on link and unresolved: %v", err)
	}
}
