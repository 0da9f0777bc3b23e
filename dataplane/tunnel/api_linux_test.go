package tunnel_test

import (
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/gsoplane/gsoplane/dataplane/tunnel"
	"github.com/gsoplane/gsoplane/dataplane/udp"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// padding pads each datagram's inner packet with zeroes to a multiple of
// 16 bytes within its frame, WireGuard's way, in front of a 16-byte
// trailer; its open counts the datagrams it finds padded and not.
type padding struct{ padded, unpadded atomic.Uint64 }

const padTail = 16

func (p *padding) seal(dgrams [][]byte, _ []int) {
	for i, d := range dgrams {
		pkt := len(d) - tunnel.DefaultHeadroom - padTail
		padded := min((pkt+15)/16*16, cap(d)-tunnel.DefaultHeadroom-padTail)
		n := tunnel.DefaultHeadroom + padded + padTail
		d = d[:n]
		clear(d[tunnel.DefaultHeadroom+pkt:]) // the padding and the trailer
		dgrams[i] = d
	}
}

func (p *padding) open(dgrams [][]byte, _ []int, verdicts []udp.Verdict) {
	for i, d := range dgrams {
		if (len(d)-tunnel.DefaultHeadroom-padTail)%16 != 0 && len(d) != cap(d) {
			p.unpadded.Add(1)
			verdicts[i] = udp.DropMalformed
			continue
		}
		p.padded.Add(1)
	}
}

// TestTunnelPadding: a Seal hook that pads makes every datagram a
// multiple of 16 bytes of inner packet; the peer receives them padded and
// hands on the inner packets (the padding cut by their IP length), TCP
// goes through both ways (SHA-256), and UDP_SEGMENT and UDP_GRO batches
// are still used.
func TestTunnelPadding(t *testing.T) {
	var ab, ba padding
	p := netlab.NewPairT(t, "tunnel")
	a := openEnd(t, p.A, p.AddrA, p.AddrB, innerA, tunnel.Config{Tailroom: padTail, Seal: ab.seal, Open: ba.open})
	b := openEnd(t, p.B, p.AddrB, p.AddrA, innerB, tunnel.Config{Tailroom: padTail, Seal: ba.seal, Open: ab.open})
	a.start()
	b.start()
	netlab.TCPTransfer(t, p.A, p.B, netip.AddrPortFrom(innerB, 5001), tcpBytes, false)
	netlab.TCPTransfer(t, p.A, p.B, netip.AddrPortFrom(innerB, 5002), tcpBytes, true)
	for _, c := range []struct {
		e   *end
		pad *padding
	}{{a, &ab}, {b, &ba}} {
		st := c.e.tnl.Stats()
		if c.pad.padded.Load() == 0 || c.pad.unpadded.Load() != 0 {
			t.Errorf("%s sent %d padded datagrams and %d not", c.e.ns.Name, c.pad.padded.Load(), c.pad.unpadded.Load())
		}
		if st.Send.GSOMessages == 0 || st.Receive.GROMessages == 0 || st.Send.Dropped != 0 {
			t.Errorf("%s: %+v %+v: want UDP_SEGMENT and UDP_GRO batches, no drop", c.e.ns.Name, st.Send, st.Receive)
		}
	}
}

// ctlMark is the first byte of the tests' control messages: the data
// path's headers are zeroes.
const ctlMark = 0xC0

// markControl is an Open that marks the datagrams starting with ctlMark
// Control.
func markControl(dgrams [][]byte, _ []int, verdicts []udp.Verdict) {
	for i, d := range dgrams {
		if d[0] == ctlMark {
			verdicts[i] = udp.Control
		}
	}
}

// control returns a control message of body: 40 bytes, as long as a
// short WireGuard message (a datagram shorter than the headroom and the
// tailroom is dropped before Open).
func control(body string) []byte {
	m := make([]byte, 40)
	m[0] = ctlMark
	copy(m[1:], body)
	return m
}

// ctlMsg is what an OnControl saw.
type ctlMsg struct {
	from netip.AddrPort
	peer int
	body string
}

// TestTunnelControl: while TCP runs through the tunnel, A sends control
// datagrams with Send; B's OnControl takes each with A's address and
// answers it with Send to that address, and A's OnControl takes the
// answers; none of them reaches the TUN device, every one is counted, and
// the TCP stream is intact (SHA-256).
func TestTunnelControl(t *testing.T) {
	const msgs = 50
	p := netlab.NewPairT(t, "tunnel")
	gotA, gotB := make(chan ctlMsg, msgs), make(chan ctlMsg, msgs)
	var b *end
	a := openEnd(t, p.A, p.AddrA, p.AddrB, innerA, tunnel.Config{Open: markControl,
		OnControl: func(from netip.AddrPort, peer int, m []byte) { gotA <- ctlMsg{from, peer, string(m[1:9])} }})
	b = openEnd(t, p.B, p.AddrB, p.AddrA, innerB, tunnel.Config{Open: markControl,
		OnControl: func(from netip.AddrPort, peer int, m []byte) {
			gotB <- ctlMsg{from, peer, string(m[1:9])}
			if err := b.tnl.Send(from, control("answer!!")); err != nil {
				t.Errorf("B: Send: %v", err)
			}
		}})
	a.start()
	b.start()
	t.Run("", func(t *testing.T) {
		t.Run("tcp", func(t *testing.T) {
			t.Parallel()
			netlab.TCPTransfer(t, p.A, p.B, netip.AddrPortFrom(innerB, 5001), tcpBytes, false)
		})
		t.Run("control", func(t *testing.T) {
			t.Parallel()
			for range msgs {
				if err := a.tnl.Send(netip.AddrPort{}, control("hello!!!")); err != nil {
					t.Fatalf("A: Send: %v", err)
				}
			}
			for _, c := range []struct {
				got  chan ctlMsg
				want ctlMsg
			}{{gotB, ctlMsg{netip.AddrPortFrom(p.AddrA, port), 0, "hello!!!"}}, {gotA, ctlMsg{netip.AddrPortFrom(p.AddrB, port), 0, "answer!!"}}} {
				for i := range msgs {
					select {
					case m := <-c.got:
						if m != c.want {
							t.Fatalf("control message %d: %+v, want %+v", i, m, c.want)
						}
					case <-time.After(10 * time.Second):
						t.Fatalf("control message %d of %d not taken after 10 s: %+v %+v", i, msgs, a.tnl.Stats().Receive, b.tnl.Stats().Receive)
					}
				}
			}
		})
	})
	if err := a.tnl.Send(netip.AddrPortFrom(p.AddrB, port+1), control("")); err == nil {
		t.Error("Send to another address than the one peer's: no error")
	}
	for i, e := range []*end{a, b} {
		st := e.tnl.Stats()
		if st.ControlSent != msgs || st.ControlErrors != uint64(1-i) || st.Receive.Control != msgs || st.Return.Drops.Total() != 0 {
			t.Errorf("%s: %d control datagrams sent, %d errors, %d received, %d return drops: want %d, %d, %d, 0",
				e.ns.Name, st.ControlSent, st.ControlErrors, st.Receive.Control, st.Return.Drops.Total(), msgs, 1-i, msgs)
		}
	}
}

// dataMark is the first byte of the roaming tests' data messages, whose
// second is the sender's peer index at the hub: the receiver index of a
// WireGuard data message, which Open identifies a roaming peer by.
const dataMark = 'D'

func sealMarked(dgrams [][]byte, _ []int) {
	for _, d := range dgrams {
		d[0], d[1] = dataMark, 0
	}
}

// openRoaming names the peer of a datagram from an unknown endpoint by
// its second byte and marks the others Control.
func openRoaming(dgrams [][]byte, peers []int, verdicts []udp.Verdict) {
	for i, d := range dgrams {
		switch {
		case d[0] != dataMark:
			verdicts[i] = udp.Control
		case peers[i] < 0:
			peers[i] = int(d[1])
		}
	}
}

// TestTunnelRoaming: a spoke's source address changes in the middle of
// a TCP stream (its route to the hub takes another source address); the
// hub follows it, by roaming (Open names the peer of the datagrams from
// the new address) or by SetEndpoint, and the stream goes on intact
// (SHA-256), the hub's replies going to the new address.
func TestTunnelRoaming(t *testing.T) {
	for _, roam := range []bool{true, false} {
		name := map[bool]string{true: "roam", false: "SetEndpoint"}[roam]
		t.Run(name, func(t *testing.T) {
			p := netlab.NewPairT(t, "tunnel")
			moved := netip.MustParseAddr("198.18.100.3")
			netlab.Must(t, p.B.AddAddr(netlab.PairLinkB, moved.String()+"/32"))
			hub := openTunnel(t, p.A, innerA, tunnel.Config{
				Local: netip.AddrPortFrom(p.AddrA, port), Roam: roam, Open: openRoaming,
				Peers: []udp.Peer{{Endpoint: netip.AddrPortFrom(p.AddrB, port), Allowed: []netip.Prefix{netip.PrefixFrom(innerB, 32)}}},
			})
			spoke := openTunnel(t, p.B, innerB, tunnel.Config{
				Local: netip.AddrPortFrom(netip.IPv4Unspecified(), port), Seal: sealMarked,
				Peers: []udp.Peer{{Endpoint: netip.AddrPortFrom(p.AddrA, port), Allowed: []netip.Prefix{netip.PrefixFrom(innerA, 32)}}},
			})
			hub.start()
			spoke.start()
			t.Run("", func(t *testing.T) {
				t.Run("tcp", func(t *testing.T) {
					t.Parallel()
					netlab.TCPTransfer(t, p.A, p.B, netip.AddrPortFrom(innerB, 5001), 4*tcpBytes, true)
				})
				t.Run("move", func(t *testing.T) {
					t.Parallel()
					waitFor(t, "1 MB from the spoke", func() bool { return hub.tnl.Stats().Receive.Datagrams > 1000 })
					link := p.B.LinkT(t, netlab.PairLinkB)
					netlab.Must(t, p.B.Netlink().RouteReplace(&netlink.Route{
						LinkIndex: link.Attrs().Index, Dst: &net.IPNet{IP: p.AddrA.AsSlice(), Mask: net.CIDRMask(32, 32)},
						Src: moved.AsSlice(), Scope: netlink.SCOPE_LINK,
					}))
					if !roam {
						netlab.Must(t, hub.tnl.SetEndpoint(0, netip.AddrPortFrom(moved, port)))
					}
					// A datagram of its own from the new address, should
					// the stream have ended already on a loaded machine.
					udpSend(t, p.B, innerB, netip.AddrPortFrom(innerA, 9), "moved")
					waitFor(t, "the hub to follow the spoke", func() bool { return hub.tnl.Peer(0).Endpoint.Addr() == moved })
				})
			})
			if ep := hub.tnl.Peer(0).Endpoint; ep != netip.AddrPortFrom(moved, port) {
				t.Errorf("the hub sends to %v, want %v", ep, netip.AddrPortFrom(moved, port))
			}
			st := hub.tnl.Stats()
			if roam && st.Receive.Roamed != 1 || !roam && st.Receive.Roamed != 0 {
				t.Errorf("Roamed %d, want %d", st.Receive.Roamed, map[bool]int{true: 1}[roam])
			}
			t.Logf("hub: %+v", st.Receive)
		})
	}
}

// TestTunnelSetPeers: while TCP runs to spoke 1, the hub's peers change:
// spoke 2 removed (a packet to it is dropped, NoPeer), then both again in
// another order, spoke 2 first; TCP then runs to spoke 2, spoke 1's
// stream is intact (SHA-256) and its counters carried over.
func TestTunnelSetPeers(t *testing.T) {
	n := newHubNet(t)
	hub := n.hub.tnl
	s1 := udp.Peer{Endpoint: netip.AddrPortFrom(spoke1, port), Allowed: []netip.Prefix{netip.PrefixFrom(innerS1, 32)}}
	s2 := udp.Peer{Endpoint: netip.AddrPortFrom(spoke2, port), Allowed: []netip.Prefix{netip.PrefixFrom(innerS2, 32)}}
	t.Run("", func(t *testing.T) {
		t.Run("tcp", func(t *testing.T) {
			t.Parallel()
			netlab.TCPTransfer(t, n.hub.ns, n.s1.ns, netip.AddrPortFrom(innerS1, 5001), 4*tcpBytes, false)
		})
		t.Run("swap", func(t *testing.T) {
			t.Parallel()
			waitFor(t, "traffic to spoke 1", func() bool { return hub.PeerStats()[0].SentDatagrams > 1000 })
			netlab.Must(t, hub.SetPeers([]udp.Peer{s1}))
			base := hub.Stats().Send.NoPeer
			udpSend(t, n.hub.ns, innerHub, netip.AddrPortFrom(innerS2, 9), "to a removed peer")
			waitFor(t, "the packet to the removed peer counted", func() bool { return hub.Stats().Send.NoPeer > base })
			before := hub.PeerStats()[0].SentDatagrams
			netlab.Must(t, hub.SetPeers([]udp.Peer{s2, s1}))
			netlab.TCPTransfer(t, n.hub.ns, n.s2.ns, netip.AddrPortFrom(innerS2, 5002), tcpBytes, true)
			if ps := hub.PeerStats(); len(ps) != 2 || ps[1].Endpoint != s1.Endpoint || ps[1].SentDatagrams < before || ps[0].SentDatagrams == 0 {
				t.Errorf("peer stats %+v: want spoke 2's new and spoke 1's carried over from %d", ps, before)
			}
		})
	})
}
