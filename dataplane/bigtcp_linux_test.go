package dataplane

import (
	"net/netip"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/internal/netlab"
)

// bigTCPSize is the peer's gso_max_size (and the IPv4 one) in
// TestGatewayBigTCP: GSO packets of up to about 180 KB.
const bigTCPSize = 185000

// TestGatewayBigTCP moves SHA-256-checked TCP streams from B to A, IPv6
// and IPv4, from a peer that sends BIG TCP: gw-b's gso_max_size and
// gso_ipv4_max_size are 185000, and a veth hands its peer's GSO packets
// over whole. Behind AF_PACKET, gw-b does TSO (tx on): the sockets take
// the super-packets whole (none truncated, none invalid) and the return
// path cuts them into TSO super-packets the TUN takes (counted as
// BigTCP). Behind AF_XDP, gw-b checksums in software, as a veth peer of
// that port must (netlab.Topology), so it has no TSO and sends segments:
// and the XDP program on gw-a takes TSO away from it anyway (package
// xsk); the streams go through all the same.
func TestGatewayBigTCP(t *testing.T) { forPorts(t, gatewayBigTCP) }

func gatewayBigTCP(t *testing.T, port labPort) {
	lab := newGwLabWith(t, port.config(GatewayConfig{}), func(tp *netlab.Topology) {
		if port.kind == PortPacket {
			netlab.Must(t, tp.B.SetFeatures(netlab.NICB, map[string]bool{"tx": true}))
		}
		nl, l := tp.B.Netlink(), tp.B.LinkT(t, netlab.NICB)
		netlab.Must(t, nl.LinkSetGSOMaxSize(l, bigTCPSize))
		netlab.Must(t, nl.LinkSetGSOIPv4MaxSize(l, bigTCPSize))
	})
	for _, c := range []struct {
		name string
		srv  netip.Addr
	}{{"v6", labSrv6}, {"v4", labSrv4}} {
		t.Run(c.name, func(t *testing.T) {
			const size = 32 << 20
			d := tcpTransfer(t, lab, c.srv, size, true)
			t.Logf("%d MiB in %v: %.0f Mbit/s", size>>20, d.Round(time.Millisecond), float64(size)*8/d.Seconds()/1e6)
		})
	}
	st := lab.settledStats()
	t.Logf("return %+v", st.Return)
	if st.Return.Drops.Total() != 0 {
		t.Errorf("the return path dropped %v", st.Return.Drops)
	}
	var truncated, malformed, oversize uint64
	for _, s := range st.Port.Sockets {
		truncated, malformed, oversize = truncated+s.RXTruncated, malformed+s.RXMalformed, oversize+s.Oversize
	}
	if truncated != 0 || malformed != 0 || oversize != 0 {
		t.Errorf("the port's sockets: %d frames truncated, %d malformed, %d passed to the kernel as oversize", truncated, malformed, oversize)
	}
	if port.kind == PortPacket && st.Return.BigTCP == 0 {
		t.Errorf("AF_PACKET behind a BIG TCP peer: no BIG TCP super-packet received")
	}
}
