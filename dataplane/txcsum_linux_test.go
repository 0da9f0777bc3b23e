package dataplane

import (
	"testing"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// TestXDPTXChecksum: the AF_XDP port sends TCP segments with partial
// checksums and TX metadata where the kernel has it (Linux 6.11), with
// gw-a's checksum offload off so that the kernel completes them in
// software on the way out: B's stack checks every one, and a checksum
// started or stored in the wrong place would stall the SHA-256-checked
// streams (IPv4 and IPv6). Where the kernel lacks TX metadata, or with
// DisableTXChecksum, the port computes them itself.
func TestXDPTXChecksum(t *testing.T) {
	netlab.RequireRoot(t)
	offload := netlab.Lacks(t, netlab.AFXDPTXMetadata) == nil
	for _, c := range []struct {
		name    string
		disable bool
	}{{"auto", false}, {"disabled", true}} {
		t.Run(c.name, func(t *testing.T) {
			lab := newGwLabWith(t, GatewayConfig{Port: PortXDP, XDP: XDPOptions{DisableTXChecksum: c.disable}}, func(tp *netlab.Topology) {
				netlab.Must(t, tp.A.SetFeatures(netlab.NICA, map[string]bool{"tx": false}))
			})
			tcpTransfer(t, lab, labSrv4, 8<<20, false)
			tcpTransfer(t, lab, labSrv6, 4<<20, false)
			st := lab.settledStats()
			var csum, tx uint64
			for _, s := range st.Port.Sockets {
				csum, tx = csum+s.Counter("tx_csum_offload"), tx+s.TX
			}
			t.Logf("%d of %d frames sent with checksum offload", csum, tx)
			switch {
			case offload && !c.disable && csum < tx/2:
				t.Errorf("%d of %d frames with checksum offload, want most (the TCP segments)", csum, tx)
			case (!offload || c.disable) && csum != 0:
				t.Errorf("%d frames with checksum offload, want none", csum)
			}
			if lost(st.Forward.Drops) != 0 {
				t.Errorf("the gateway dropped: %v", st.Forward.Drops)
			}
		})
	}
}
