package tunnel_test

import (
	"context"
	"encoding/binary"
	"log"
	"net/netip"
	"os"
	"os/signal"

	"github.com/gsoplane/gsoplane/dataplane/tunnel"
	"github.com/gsoplane/gsoplane/dataplane/udp"
)

// One end of a tunnel with a VPN's own framing: a 16-byte header and a
// 16-byte trailer around every inner packet, written and checked in
// batches, in place (examples/vpn does it with ChaCha20-Poly1305). It
// needs root and a peer, so it only compiles here.
func ExampleOpen() {
	seal := func(dgrams [][]byte, _ []int) { // one peer: peers[i] is 0
		for _, d := range dgrams {
			binary.LittleEndian.PutUint32(d, 4) // the header
			copy(d[len(d)-16:], d[:16])         // the trailer: an AEAD would put its tag here
		}
	}
	open := func(dgrams [][]byte, _ []int, verdicts []udp.Verdict) {
		for i, d := range dgrams {
			if binary.LittleEndian.Uint32(d) != 4 {
				verdicts[i] = udp.DropMalformed // counted in Stats().Receive.Malformed
			}
		}
	}
	t, err := tunnel.Open(tunnel.Config{
		Name:     "vpn0",
		Local:    netip.MustParseAddrPort("198.18.100.1:51820"),
		Peer:     netip.MustParseAddrPort("198.18.100.2:51820"),
		Headroom: 16, Tailroom: 16,
		Seal: seal, Open: open,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close()
	log.Printf("inner MTU %d", t.MTU()) // 1440 on a 1500-byte IPv4 path
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := t.Run(ctx); err != nil { // returns within 100 ms of the signal
		log.Fatal(err)
	}
	st := t.Stats()
	log.Printf("%.1f datagrams per sendmmsg, %.1f per recvmmsg, %d refused", st.DatagramsPerSend(), st.DatagramsPerReceive(), st.Receive.Refused)
}

// A hub with two peers, WireGuard's way: each peer's inner address is
// routed to it, and the hooks are told each datagram's peer (an index
// into Config.Peers) to pick its keys by; here they only write and check
// the peer's own receiver index in the header. It needs root and peers,
// so it only compiles here.
func ExampleOpen_peers() {
	index := []uint32{0x1111, 0x2222} // what each peer writes in its header, per peer
	seal := func(dgrams [][]byte, peers []int) {
		for i, d := range dgrams {
			binary.LittleEndian.PutUint32(d, 4)
			binary.LittleEndian.PutUint32(d[4:], index[peers[i]]) // peer i's keys would seal d
		}
	}
	open := func(dgrams [][]byte, peers []int, verdicts []udp.Verdict) {
		for i, d := range dgrams {
			if binary.LittleEndian.Uint32(d[4:]) != index[peers[i]] {
				verdicts[i] = udp.DropAuth // peer i's keys would open d
			}
		}
	}
	t, err := tunnel.Open(tunnel.Config{
		Name:  "hub0",
		Local: netip.MustParseAddrPort("0.0.0.0:51820"),
		Peers: []udp.Peer{
			{Endpoint: netip.MustParseAddrPort("198.18.101.2:51820"), Allowed: []netip.Prefix{netip.MustParsePrefix("10.0.0.2/32")}},
			{Endpoint: netip.MustParseAddrPort("198.18.102.2:51820"), Allowed: []netip.Prefix{netip.MustParsePrefix("10.0.0.3/32"), netip.MustParsePrefix("10.1.0.0/16")}},
		},
		Seal: seal, Open: open,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := t.Run(ctx); err != nil {
		log.Fatal(err)
	}
	for _, p := range t.PeerStats() { // like wg show's transfer
		log.Printf("peer %v: %d bytes sent, %d received", p.Endpoint, p.SentBytes, p.ReceivedBytes)
	}
	st := t.Stats()
	log.Printf("dropped: %d to no peer, %d from unknown endpoints, %d from sources not allowed", st.Send.NoPeer, st.Receive.UnknownPeer, st.Receive.NotAllowed)
}
