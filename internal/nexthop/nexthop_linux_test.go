package nexthop

import (
	"errors"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/internal/netlab"
)

func TestMain(m *testing.M) { os.Exit(netlab.Main(m)) }

// TestNeighbours resolves on-link and routed destinations through the
// kernel, with no static neighbour entries, over IPv4 and IPv6.
func TestNeighbours(t *testing.T) {
	gw, peer := netlab.NewT(t, "nh"), netlab.NewT(t, "nh")
	must := func(err error) { t.Helper(); netlab.Must(t, err) }
	must(netlab.AddVeth(gw, "nh-a", peer, "nh-b", 0))
	must(gw.AddAddr("nh-a", "198.18.110.1/24"))
	must(gw.AddAddr("nh-a", "2001:2:0:110::1/64"))
	must(peer.AddAddr("nh-b", "198.18.110.2/24"))
	must(peer.AddAddr("nh-b", "2001:2:0:110::2/64"))
	must(gw.AddRoute("198.19.110.0/24", "nh-a", "198.18.110.2"))
	must(gw.AddRoute("2001:2:0:111::/64", "nh-a", "2001:2:0:110::2"))
	peerLink, err := peer.Link("nh-b")
	must(err)
	want := peerLink.Attrs().HardwareAddr.String()

	// The main table sends 198.19.120.0/24 elsewhere (as it sends the
	// gateway's destinations into its TUN): only routes through nh-a count.
	must(netlab.AddVeth(gw, "nh-c", peer, "nh-d", 0))
	must(gw.AddRoute("198.19.120.0/24", "nh-c", ""))
	link, err := gw.Link("nh-a")
	must(err)
	var n, viaGW *Resolver
	must(gw.Run(func() (err error) {
		if n, err = New(link.Attrs().Index, netip.Addr{}); err != nil {
			return err
		}
		viaGW, err = New(link.Attrs().Index, netip.MustParseAddr("198.18.110.2"))
		return err
	}))
	defer n.Close()
	defer viaGW.Close()
	if mac, err := viaGW.Lookup(netip.MustParseAddr("198.19.120.5")); err != nil || mac.String() != want {
		t.Errorf("through the configured gateway: %v, %v; want %s", mac, err, want)
	}
	for _, dst := range []string{"198.18.110.2", "198.19.110.7", "2001:2:0:110::2", "2001:2:0:111::9"} {
		mac, err := n.Lookup(netip.MustParseAddr(dst))
		if err != nil || mac.String() != want {
			t.Errorf("%s: %v, %v; want %s", dst, mac, err, want)
		}
	}
	n.timeout = 300 * time.Millisecond // for the lookups that fail
	if _, err := n.Lookup(netip.MustParseAddr("198.18.110.99")); !errors.Is(err, ErrUnresolved) {
		t.Errorf("absent host: %v, want ErrUnresolved", err)
	}
	if _, err := n.Lookup(netip.MustParseAddr("198.19.120.5")); !errors.Is(err, ErrUnresolved) {
		t.Errorf("routed elsewhere, so taken as on link and unresolved: %v", err)
	}
}
