package ethtool_test

import (
	"os"
	"strings"
	"testing"

	"github.com/gsoplane/gsoplane/internal/ethtool"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

func TestMain(m *testing.M) { os.Exit(netlab.Main(m)) }

// TestVeth switches features of a veth and reads its channels.
func TestVeth(t *testing.T) {
	const a = "veth-a"
	ns := netlab.NewT(t, "ethtool")
	peer := netlab.NewT(t, "ethtool")
	netlab.Must(t, netlab.AddVeth(ns, a, peer, "veth-b", 2))
	ns.Do(t, func() {
		if err := ethtool.SetFeatures(a, map[string]bool{"tx": false, "gro": true}); err != nil {
			t.Fatal(err)
		}
		expect(t, a, map[string]bool{"tx-checksum-ip-generic": false, "tx-checksum-sctp": false, "rx-gro": true})
		if err := ethtool.SetFeatures(a, map[string]bool{"rx-udp-gro-forwarding": true}); err != nil {
			t.Fatal(err)
		}
		expect(t, a, map[string]bool{"rx-udp-gro-forwarding": true, "rx-gro": true})
		// tx-checksum-ipv4 is fixed off on a veth: "tx" on skips it.
		if err := ethtool.SetFeatures(a, map[string]bool{"tx": true}); err != nil {
			t.Fatal(err)
		}
		expect(t, a, map[string]bool{"tx-checksum-ip-generic": true, "tx-checksum-ipv4": false})

		if err := ethtool.SetFeatures(a, map[string]bool{"gro": false, "no-such-feature": true}); err == nil ||
			!strings.Contains(err.Error(), "no-such-feature") {
			t.Errorf("unknown feature: error %v", err)
		}
		expect(t, a, map[string]bool{"rx-gro": true}) // nothing changed
		// lo checksums in software whatever it is asked.
		if err := ethtool.SetFeatures("lo", map[string]bool{"tx": false}); err == nil ||
			!strings.Contains(err.Error(), "tx-checksum-ip-generic") {
			t.Errorf("fixed feature: error %v", err)
		}
		if err := ethtool.SetFeatures("lo", map[string]bool{"tx-checksum-ip-generic": true}); err != nil {
			t.Errorf("fixed feature already in the wanted state: %v", err)
		}

		rx, tx, combined, err := ethtool.Channels(a)
		if err != nil {
			t.Fatal(err)
		}
		if rx != 2 || tx != 2 || combined != 0 {
			t.Errorf("Channels = %d rx, %d tx, %d combined; want 2, 2, 0", rx, tx, combined)
		}
	})
}

// expect checks the active state of the given features of dev.
func expect(t *testing.T, dev string, want map[string]bool) {
	t.Helper()
	f, err := ethtool.Features(dev)
	if err != nil {
		t.Fatal(err)
	}
	for name, on := range want {
		if st, ok := f[name]; !ok || st.Active != on {
			t.Errorf("%s: %s is %+v (known: %v), want active %v", dev, name, st, ok, on)
		}
	}
}
