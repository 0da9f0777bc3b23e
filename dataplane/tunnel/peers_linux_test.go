package tunnel_test

import (
	"errors"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/tunnel"
	"github.com/gsoplane/gsoplane/dataplane/udp"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// A hub and two spokes, each spoke in a namespace of its own behind a
// veth pair into the hub's: spoke 1 over IPv4, spoke 2 over IPv6 with a
// path MTU of 1400. The hub's tunnel has both as peers on one
// dual-stack socket, each routed its inner /32; spoke 1's is
// point-to-point, spoke 2's has the hub as its one peer with the whole
// inner /24.
var (
	hubLink1  = netip.MustParseAddr("198.18.101.1")
	spoke1    = netip.MustParseAddr("198.18.101.2")
	hubLink2  = netip.MustParseAddr("2001:2:102::1")
	spoke2    = netip.MustParseAddr("2001:2:102::2")
	innerHub  = netip.MustParseAddr("198.19.0.1")
	innerS1   = netip.MustParseAddr("198.19.0.2")
	innerS2   = netip.MustParseAddr("198.19.0.3")
	innerNone = netip.MustParseAddr("198.19.0.9") // in the hub's /24, no peer's
)

// hubNet is the hub and spokes' network, their tunnels running.
type hubNet struct {
	hub, s1, s2 *end
}

func newHubNet(t *testing.T) *hubNet {
	t.Helper()
	hub, s1, s2 := netlab.NewT(t, "hub"), netlab.NewT(t, "spoke"), netlab.NewT(t, "spoke")
	netlab.Must(t, netlab.AddVeth(hub, "hub-1", s1, "spoke-1", 0))
	netlab.Must(t, netlab.AddVeth(hub, "hub-2", s2, "spoke-2", 0))
	netlab.Must(t, hub.AddAddr("hub-1", hubLink1.String()+"/24"))
	netlab.Must(t, s1.AddAddr("spoke-1", spoke1.String()+"/24"))
	for _, l := range []struct {
		ns   *netlab.NS
		name string
		addr netip.Addr
	}{{hub, "hub-2", hubLink2}, {s2, "spoke-2", spoke2}} {
		netlab.Must(t, l.ns.Netlink().LinkSetMTU(l.ns.LinkT(t, l.name), 1400))
		netlab.Must(t, l.ns.AddAddr(l.name, l.addr.String()+"/64"))
	}
	n := &hubNet{
		hub: openTunnel(t, hub, innerHub, tunnel.Config{
			Local: netip.AddrPortFrom(netip.IPv4Unspecified(), port),
			Peers: []udp.Peer{
				{Endpoint: netip.AddrPortFrom(spoke1, port), Allowed: []netip.Prefix{netip.PrefixFrom(innerS1, 32)}},
				{Endpoint: netip.AddrPortFrom(spoke2, port), Allowed: []netip.Prefix{netip.PrefixFrom(innerS2, 32)}},
			},
		}),
		s1: openEnd(t, s1, spoke1, hubLink1, innerS1, tunnel.Config{}),
		s2: openTunnel(t, s2, innerS2, tunnel.Config{
			Local: netip.AddrPortFrom(spoke2, port),
			Peers: []udp.Peer{{Endpoint: netip.AddrPortFrom(hubLink2, port), Allowed: []netip.Prefix{netip.MustParsePrefix("198.19.0.0/24")}}},
		}),
	}
	for _, e := range n.ends() {
		e.start()
	}
	return n
}

func (n *hubNet) ends() []*end { return []*end{n.hub, n.s1, n.s2} }

// waitFor polls until cond holds, failing the test after five seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 5 s: %s", what)
		}
	}
}

// udpSend sends payload from a socket in ns bound to from (port 0) to to.
func udpSend(t *testing.T, ns *netlab.NS, from netip.Addr, to netip.AddrPort, payload string) {
	t.Helper()
	var c *net.UDPConn
	var err error
	ns.Do(t, func() {
		c, err = net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(from, 0)), net.UDPAddrFromAddrPort(to))
	})
	netlab.Must(t, err)
	defer c.Close()
	_, err = c.Write([]byte(payload))
	netlab.Must(t, err)
}

// TestTunnelPeers: a hub with two peers routes TCP to and from both at
// once (SHA-256 compared) over IPv4 and IPv6 endpoints on one socket,
// with the inner MTU of the smaller path; drops and counts a packet to no
// peer, a datagram from no peer's endpoint and a packet from a peer with
// another peer's inner source (not delivered); counts each peer's
// traffic; and closes leaving nothing behind.
func TestTunnelPeers(t *testing.T) {
	goroutines := runtime.NumGoroutine()
	n := newHubNet(t)
	hub := n.hub.tnl

	t.Run("mtu", func(t *testing.T) {
		small := tunnel.InnerMTU(1400, true, tunnel.DefaultHeadroom, 0)
		for e, want := range map[*end]int{n.hub: small, n.s1: tunnel.InnerMTU(1500, false, tunnel.DefaultHeadroom, 0), n.s2: small} {
			if got := e.tnl.MTU(); got != want {
				t.Errorf("%s: inner MTU %d, want %d", e.ns.Name, got, want)
			}
		}
		if a := hub.LocalAddr(); !a.Addr().Is6() || !a.Addr().IsUnspecified() || a.Port() != port {
			t.Errorf("hub bound to %v, want all addresses of both families, port %d", a, port)
		}
	})

	t.Run("tcp", func(t *testing.T) {
		for i, spoke := range []*end{n.s1, n.s2} {
			addr := netip.AddrPortFrom([]netip.Addr{innerS1, innerS2}[i], uint16(5001+i))
			t.Run([]string{"spoke1", "spoke2"}[i], func(t *testing.T) {
				t.Parallel() // the two spokes at once
				netlab.TCPTransfer(t, n.hub.ns, spoke.ns, addr, 4<<20, false)
				netlab.TCPTransfer(t, n.hub.ns, spoke.ns, addr, 4<<20, true)
			})
		}
	})

	t.Run("no peer", func(t *testing.T) {
		base := hub.Stats().Send.NoPeer
		for range 3 {
			udpSend(t, n.hub.ns, innerHub, netip.AddrPortFrom(innerNone, 9), "to nobody")
		}
		waitFor(t, "3 packets to no peer counted", func() bool { return hub.Stats().Send.NoPeer >= base+3 })
		if st := hub.Stats().Send; st.NoPeer != base+3 || st.Dropped != st.NoPeer {
			t.Errorf("NoPeer %d, Dropped %d: want %d each", st.NoPeer, st.Dropped, base+3)
		}
	})

	t.Run("unknown peer", func(t *testing.T) {
		base := hub.Stats().Receive.UnknownPeer
		for range 2 {
			udpSend(t, n.s1.ns, spoke1, netip.AddrPortFrom(hubLink1, port), "from a stranger: another port of spoke 1's address")
		}
		waitFor(t, "2 datagrams from no peer counted", func() bool { return hub.Stats().Receive.UnknownPeer >= base+2 })
		if got := hub.Stats().Receive.UnknownPeer; got != base+2 {
			t.Errorf("UnknownPeer %d, want %d", got, base+2)
		}
	})

	t.Run("not allowed", func(t *testing.T) {
		// Spoke 1 takes spoke 2's inner address too and sends from it,
		// then from its own: the hub drops the first and delivers the
		// second, in that order through the same tunnel.
		netlab.Must(t, n.s1.ns.AddAddr(tunName, innerS2.String()+"/32"))
		base := hub.Stats().Receive.NotAllowed
		ln := n.hub.ns.ListenUDP(t, netip.AddrPortFrom(innerHub, 7000))
		udpSend(t, n.s1.ns, innerS2, netip.AddrPortFrom(innerHub, 7000), "forged")
		udpSend(t, n.s1.ns, innerS1, netip.AddrPortFrom(innerHub, 7000), "genuine")
		buf := make([]byte, 64)
		ln.SetReadDeadline(time.Now().Add(5 * time.Second))
		k, from, err := ln.ReadFromUDPAddrPort(buf)
		netlab.Must(t, err)
		if string(buf[:k]) != "genuine" || from.Addr() != innerS1 {
			t.Errorf("the hub delivered %q from %v first, want spoke 1's genuine datagram", buf[:k], from)
		}
		waitFor(t, "the forged packet counted", func() bool { return hub.Stats().Receive.NotAllowed >= base+1 })
		if got := hub.Stats().Receive.NotAllowed; got != base+1 {
			t.Errorf("NotAllowed %d, want %d", got, base+1)
		}
	})

	t.Run("stats", func(t *testing.T) {
		st, ps := hub.Stats(), hub.PeerStats()
		t.Logf("hub: %+v\n%+v\n%+v", st.Send, st.Receive, ps)
		if len(ps) != 2 || ps[0].Endpoint != netip.AddrPortFrom(spoke1, port) || ps[1].Endpoint != netip.AddrPortFrom(spoke2, port) {
			t.Fatalf("hub's peer stats %+v", ps)
		}
		var sent, received uint64
		for i, p := range ps {
			sent += p.SentDatagrams
			received += p.ReceivedDatagrams
			if p.SentDatagrams == 0 || p.ReceivedDatagrams == 0 || p.SentBytes < p.SentDatagrams*tunnel.DefaultHeadroom || p.ReceivedBytes < p.ReceivedDatagrams*tunnel.DefaultHeadroom {
				t.Errorf("peer %d: %+v: want traffic both ways", i, p)
			}
		}
		if sent != st.Send.Datagrams || received+st.Receive.NotAllowed+st.Receive.Refused+st.Receive.Short != st.Receive.Datagrams {
			t.Errorf("the peers' %d datagrams sent and %d received do not add up to the hub's: %+v %+v", sent, received, st.Send, st.Receive)
		}
		if s2, ps2 := n.s2.tnl.Stats(), n.s2.tnl.PeerStats(); len(ps2) != 1 || ps2[0].SentDatagrams != s2.Send.Datagrams || ps2[0].ReceivedDatagrams != s2.Receive.Datagrams {
			t.Errorf("spoke 2, one peer: %+v, stats %+v %+v", ps2, s2.Send, s2.Receive)
		}
		if ps1 := n.s1.tnl.PeerStats(); ps1 != nil {
			t.Errorf("spoke 1, point-to-point: peer stats %+v, want none", ps1)
		}
		for _, e := range n.ends() {
			if st := e.tnl.Stats(); st.Fallbacks != 0 || e.logs.String() != "" || st.Send.GSOMessages == 0 || st.Receive.GROMessages == 0 {
				t.Errorf("%s: %d fall-backs, logged %q, %d UDP_SEGMENT and %d UDP_GRO messages", e.ns.Name, st.Fallbacks, e.logs, st.Send.GSOMessages, st.Receive.GROMessages)
			}
		}
	})

	for _, e := range n.ends() {
		netlab.Must(t, e.tnl.Close())
		if err := <-e.done; err != nil {
			t.Errorf("%s: Run: %v", e.ns.Name, err)
		}
		if _, err := e.ns.Link(tunName); err == nil {
			t.Errorf("%s: %s still there after Close", e.ns.Name, tunName)
		}
	}
	waitGoroutines(t, goroutines)
}

// Open refuses a tunnel with both one peer and several, or neither, and
// invalid peers, before it opens anything.
func TestTunnelPeersConfig(t *testing.T) {
	peer := udp.Peer{Endpoint: netip.MustParseAddrPort("192.0.2.1:51820")}
	for _, c := range []struct {
		name string
		cfg  tunnel.Config
		want error
	}{
		{"both", tunnel.Config{Peer: peer.Endpoint, Peers: []udp.Peer{peer}}, frame.ErrInvalidConfig},
		{"neither", tunnel.Config{}, frame.ErrInvalidConfig},
		{"the same endpoint twice", tunnel.Config{Peers: []udp.Peer{peer, peer}}, udp.ErrInvalidPeers},
	} {
		if _, err := tunnel.Open(c.cfg); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		} else {
			t.Logf("%s: %v", c.name, err)
		}
	}
}
