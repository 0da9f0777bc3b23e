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
