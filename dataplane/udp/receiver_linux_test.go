package udp

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestUDPReceiverGRO: datagrams sent one by one and a UDP_SEGMENT
// super-packet come out of the Receiver as the datagrams they were, the
// super-packet as one UDP_GRO message (its control message read from the
// receive batch's control buffer), opened whole by Open and handed on
// without their trailer; receiving them allocates nothing.
func TestUDPReceiverGRO(t *testing.T) { // not parallel: AllocsPerRun refuses
	const (
		segSize = 100
		segs    = 10
		single  = 3
		tail    = 4 // a trailer, cut off by the Receiver
	)
	n := newUskNet(t)
	rx := uskListen(t, n.b, uskAP(uskAddrB, uskPort))
	tx := uskDial(t, n.a, uskAP(uskAddrB, uskPort))
	txGSO := uskDial(t, n.a, uskAP(uskAddrB, uskPort))
	uskSockopt(t, txGSO, unix.SOL_UDP, unix.UDP_SEGMENT, segSize)
	opened := 0 // datagrams Open saw whole
	open := func(dgrams [][]byte, _ []int, _ []Verdict) {
		for _, d := range dgrams {
			if len(d) == segSize || len(d) == 2*segSize {
				opened++
			}
		}
	}
	r, err := NewReceiver(rx, ReceiverConfig{Headroom: uskHdrLen, Tailroom: tail, Messages: 4, Open: open})
	if err != nil {
		t.Fatal(err)
	}
	super := make([]byte, segs*segSize)
	for i := range super {
		super[i] = byte(i / segSize)
	}
	dgram := bytes.Repeat([]byte{0xee}, 2*segSize)
	frames := make([][]byte, 64)
	round := func() {
		if _, err := txGSO.Write(super); err != nil {
			t.Fatalf("send a super-packet: %v", err)
		}
		for range single {
			if _, err := tx.Write(dgram); err != nil {
				t.Fatalf("send: %v", err)
			}
		}
		seg, one := 0, 0 // the two sockets' datagrams may come in either order
		for seg+one < segs+single {
			k, err := r.Receive(frames)
			if err != nil {
				t.Fatalf("Receive: %v", err)
			}
			for _, f := range frames[:k] {
				switch {
				case bytes.Equal(f, dgram[:len(dgram)-tail]):
					one++
				case len(f) == segSize-tail && f[0] == byte(seg) && f[segSize-tail-1] == byte(seg):
					seg++
				default:
					t.Fatalf("%d bytes starting %#x, want segment %d of the super-packet or a datagram", len(f), f[:min(len(f), 1)], seg)
				}
			}
		}
		if seg != segs || one != single {
			t.Fatalf("%d segments and %d datagrams, want %d and %d", seg, one, segs, single)
		}
	}
	round()
	st := r.Stats()
	if st.Datagrams != segs+single || st.Truncated != 0 || st.Short != 0 || st.GRO && st.GROMessages != 1 || opened != segs+single {
		t.Errorf("stats %+v, %d opened: want %d datagrams, the super-packet as one UDP_GRO message, all opened", st, opened, segs+single)
	}
	t.Logf("stats %+v", st)
	if allocs := testing.AllocsPerRun(20, round); allocs != 0 {
		t.Errorf("send and Receive: %.1f allocations per round, want 0", allocs)
	}
}

// TestUDPReceiverPeerError: an ICMP port unreachable for a datagram the
// socket sent (the peer's port closed for a moment) leaves ECONNREFUSED
// on the connected socket; the Receiver counts it and goes on receiving
// instead of failing.
func TestUDPReceiverPeerError(t *testing.T) {
	loop := netip.MustParseAddr("127.0.0.1")
	free, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(loop, 0)))
	if err != nil {
		t.Fatal(err)
	}
	peer := free.LocalAddr().(*net.UDPAddr)
	free.Close() // nobody on the peer's port for now
	conn, err := net.DialUDP("udp", nil, peer)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r, err := NewReceiver(conn, ReceiverConfig{Headroom: uskHdrLen})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("to a closed port")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // the port unreachable comes back
	back, err := net.ListenUDP("udp", peer)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	want := bytes.Repeat([]byte{0x5a}, uskHdrLen+20)
	if _, err := back.WriteToUDP(want, conn.LocalAddr().(*net.UDPAddr)); err != nil {
		t.Fatal(err)
	}
	frames := make([][]byte, 4)
	k, err := r.Receive(frames)
	if err != nil || k != 1 || !bytes.Equal(frames[0], want) {
		t.Fatalf("Receive: %d frames, %v; want the peer's datagram", k, err)
	}
	if st := r.Stats(); st.PeerErrors != 1 {
		t.Errorf("PeerErrors %d, want 1", st.PeerErrors)
	}
}
