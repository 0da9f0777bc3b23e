package udp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
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

// parseSockaddr reads what recvmmsg writes: sockaddr_in and sockaddr_in6
// (an IPv4-mapped address as IPv4, the scope left out), and refuses what
// is short or of another family.
func TestParseSockaddr(t *testing.T) {
	in4 := func(port uint16, a [4]byte) []byte {
		b := make([]byte, unix.SizeofSockaddrInet4)
		binary.NativeEndian.PutUint16(b, unix.AF_INET)
		binary.BigEndian.PutUint16(b[2:], port)
		copy(b[4:], a[:])
		return b
	}
	in6 := func(port uint16, a string, scope uint32) []byte {
		b := make([]byte, unix.SizeofSockaddrInet6)
		binary.NativeEndian.PutUint16(b, unix.AF_INET6)
		binary.BigEndian.PutUint16(b[2:], port)
		binary.BigEndian.PutUint32(b[4:], 0x12345) // flow info
		copy(b[8:], netip.MustParseAddr(a).AsSlice())
		binary.NativeEndian.PutUint32(b[24:], scope)
		return b
	}
	unixAddr := make([]byte, 16)
	binary.NativeEndian.PutUint16(unixAddr, unix.AF_UNIX)
	for _, c := range []struct {
		name string
		b    []byte
		want string // "": refused
	}{
		{"IPv4", in4(51820, [4]byte{198, 18, 100, 1}), "198.18.100.1:51820"},
		{"IPv4, port 65535", in4(65535, [4]byte{10, 0, 0, 255}), "10.0.0.255:65535"},
		{"IPv6", in6(443, "2001:db8::1", 0), "[2001:db8::1]:443"},
		{"IPv6 link-local with a scope", in6(1, "fe80::1", 3), "[fe80::1]:1"},
		{"IPv4-mapped", in6(51820, "::ffff:198.18.100.2", 0), "198.18.100.2:51820"},
		{"short IPv4", in4(1, [4]byte{1, 2, 3, 4})[:7], ""},
		{"short IPv6", in6(1, "2001:db8::1", 0)[:27], ""},
		{"another family", unixAddr, ""},
		{"none", nil, ""},
	} {
		got, ok := parseSockaddr(c.b)
		switch {
		case c.want == "" && ok:
			t.Errorf("%s: %v, want refused", c.name, got)
		case c.want != "" && (!ok || got != netip.MustParseAddrPort(c.want)):
			t.Errorf("%s: %v, %v; want %s", c.name, got, ok, c.want)
		}
	}
}

// TestUDPReceiverPeers: with Peers, on an unconnected socket, each
// datagram is its sender's peer's, a UDP_GRO message's all of them; Open
// is told so; an opened packet whose inner source routes to another peer
// or that is not IP is dropped (NotAllowed), a datagram from no peer's
// endpoint before Open (UnknownPeer); each peer's counters add up; and a
// round of it allocates nothing.
func TestUDPReceiverPeers(t *testing.T) { // not parallel: AllocsPerRun refuses
	const (
		segSize = 200
		segs    = 8
		tail    = 4
	)
	n := newUskNet(t)
	rx := uskListen(t, n.b, uskAP(uskAddrB, uskPort))
	dial := func(port int) *net.UDPConn { return uskDialFrom(t, n.a, port) }
	tx0, tx1, stranger := dial(40001), dial(40002), dial(40003)
	uskSockopt(t, tx0, unix.SOL_UDP, unix.UDP_SEGMENT, segSize)
	peers, err := NewPeers([]Peer{
		{Endpoint: uskAddrPort(uskAP(uskAddrA, 40001)), Allowed: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}},
		{Endpoint: uskAddrPort(uskAP(uskAddrA, 40002)), Allowed: []netip.Prefix{netip.MustParsePrefix("fd00::/64")}},
	})
	netlab.Must(t, err)
	// Each datagram: a header whose first byte is the peer that sent
	// it, an inner packet from src, and a trailer.
	dgram := func(from int, src netip.Addr, size int) []byte {
		d := make([]byte, size)
		d[0] = byte(from)
		uskIPFrame(d[uskHdrLen:], src, 0)
		p := d[uskHdrLen:] // uskIPFrame writes a source of its own; this test's is src
		if src.Is4() {
			copy(p[12:16], src.AsSlice())
		} else {
			copy(p[8:24], src.AsSlice())
		}
		return d
	}
	super := bytes.Repeat(dgram(0, netip.MustParseAddr("10.0.0.5"), segSize), segs)
	allowed1 := dgram(1, netip.MustParseAddr("fd00::5"), 300)
	spoofed1 := dgram(1, netip.MustParseAddr("10.0.0.5"), 300) // peer 0's source
	notIP := make([]byte, 300)
	notIP[0] = 1
	opened := 0 // datagrams Open was told the peer of that sent them
	open := func(dgrams [][]byte, peers []int, _ []Verdict) {
		for i, d := range dgrams {
			if int(d[0]) == peers[i] {
				opened++
			}
		}
	}
	r, err := NewReceiver(rx, ReceiverConfig{Headroom: uskHdrLen, Tailroom: tail, Messages: 4, Open: open, Peers: peers})
	netlab.Must(t, err)
	frames := make([][]byte, 64)
	send := func(c *net.UDPConn, d []byte) {
		if _, err := c.Write(d); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	round := func() {
		send(tx0, super)
		send(tx1, allowed1)
		send(tx1, spoofed1)
		send(tx1, notIP)
		var got [2]int // whole packets handed out, per peer
		empty := 0
		for got[0]+got[1]+empty < segs+3 {
			k, err := r.Receive(frames)
			if err != nil {
				t.Fatalf("Receive: %v", err)
			}
			for _, f := range frames[:k] {
				switch {
				case len(f) == uskHdrLen:
					empty++
				case len(f) == segSize-tail && f[0] == 0, len(f) == len(allowed1)-tail && f[0] == 1:
					got[f[0]]++
				default:
					t.Fatalf("handed out %d bytes from peer %d", len(f), f[0])
				}
			}
		}
		if got != [2]int{segs, 1} || empty != 2 {
			t.Fatalf("handed out %v whole and %d empty, want [%d 1] and 2", got, empty, segs)
		}
	}
	round()
	st := r.Stats()
	if st.NotAllowed != 2 || st.Datagrams != segs+3 || opened != segs+3 || st.Refused != 0 || st.GRO && st.GROMessages != 1 {
		t.Errorf("stats %+v, Open told the right peer of %d: want %d datagrams handed out, 2 of them not allowed, all opened", st, opened, segs+3)
	}
	ps := peers.Stats()
	if ps[0].ReceivedDatagrams != segs || ps[0].ReceivedBytes != segs*segSize || ps[1].ReceivedDatagrams != 1 || ps[1].ReceivedBytes != uint64(len(allowed1)) {
		t.Errorf("per-peer stats %+v: want %d datagrams from peer 0, 1 from peer 1", ps, segs)
	}
	if allocs := testing.AllocsPerRun(20, round); allocs != 0 {
		t.Errorf("send and Receive: %.1f allocations per round, want 0", allocs)
	} else {
		t.Logf("%.1f allocations per round of %d datagrams", allocs, segs+3)
	}
	// A stranger's datagrams are dropped before Open: send the peer's
	// until the receiver has passed them over.
	send(stranger, allowed1)
	send(stranger, allowed1)
	for deadline := time.Now().Add(uskWait); r.Stats().UnknownPeer < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("stranger's datagrams not counted: %+v", r.Stats())
		}
		send(tx1, allowed1)
		if k, err := r.Receive(frames); err != nil || k == 0 || frames[0][0] != 1 {
			t.Fatalf("Receive: %d, %v", k, err)
		}
	}
	if st := r.Stats(); st.UnknownPeer != 2 {
		t.Errorf("UnknownPeer %d, want 2", st.UnknownPeer)
	}
}

// TestUDPReceiverWholeMessages: whatever a message holds, the Receiver
// takes it: a peer's UDP_SEGMENT message of 128 datagrams (Linux 6.10
// and later) reaches the socket whole, twice the 64 that receive-side GRO
// merges, and comes out as its 128 datagrams; a 65,527-byte IPv6 message
// whose last datagram is one byte long, ending closer than Headroom to the
// receive buffer's end, comes out as its two datagrams and a short one,
// counted and handed out as an empty packet (a sender whose device takes
// GSO packets over 64 KiB, as BIG TCP allows, sends it whole).
func TestUDPReceiverWholeMessages(t *testing.T) {
	t.Run("128 datagrams", func(t *testing.T) {
		const segSize, segs = uskHdrLen + 4, 128
		n := newUskNet(t)
		rx := uskListen(t, n.b, uskAP(uskAddrB, uskPort))
		tx := uskDial(t, n.a, uskAP(uskAddrB, uskPort))
		uskSockopt(t, tx, unix.SOL_UDP, unix.UDP_SEGMENT, segSize)
		r, err := NewReceiver(rx, ReceiverConfig{Headroom: uskHdrLen, Messages: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Write(bytes.Repeat([]byte{0x11}, segs*segSize)); errors.Is(err, unix.EINVAL) {
			t.Skipf("this kernel sends at most 64 datagrams a UDP_SEGMENT message (128 since Linux 6.10): %v", err)
		} else if err != nil {
			t.Fatal(err)
		}
		got := uskReceiveAll(t, r, rx, segs)
		for i, f := range got {
			if len(f) != segSize || f[segSize-1] != 0x11 {
				t.Fatalf("datagram %d: %d bytes, want %d", i, len(f), segSize)
			}
		}
	})
	t.Run("short datagram at the buffer's end", func(t *testing.T) {
		const segSize, size = 32763, 65527 // two datagrams and one byte: the largest IPv6 UDP payload
		ns := netlab.NewT(t, "udp")
		netlab.Must(t, ns.LinkUp("lo"))
		// A device that takes GSO packets over 64 KiB (BIG TCP's
		// gso_max_size), or the kernel cuts the message before the socket.
		if err := ns.Netlink().LinkSetGSOMaxSize(ns.LinkT(t, "lo"), 2*size); err != nil {
			t.Skipf("no gso_max_size over 64 KiB (BIG TCP, Linux 5.19): %v", err)
		}
		var rx, tx *net.UDPConn
		ns.Do(t, func() {
			var err error
			if rx, err = net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback}); err != nil {
				t.Fatal(err)
			}
			if tx, err = net.DialUDP("udp6", nil, rx.LocalAddr().(*net.UDPAddr)); err != nil {
				t.Fatal(err)
			}
		})
		defer rx.Close()
		defer tx.Close()
		uskSockopt(t, tx, unix.SOL_UDP, unix.UDP_SEGMENT, segSize)
		r, err := NewReceiver(rx, ReceiverConfig{Headroom: uskHdrLen})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Write(bytes.Repeat([]byte{0x22}, size)); err != nil {
			t.Fatal(err)
		}
		got := uskReceiveAll(t, r, rx, 3)
		if len(got[0]) != segSize || len(got[1]) != segSize || len(got[2]) != uskHdrLen {
			t.Errorf("datagrams of %d, %d and %d bytes, want %d, %d and an empty packet (%d)", len(got[0]), len(got[1]), len(got[2]), segSize, segSize, uskHdrLen)
		}
		if st := r.Stats(); st.Short != 1 || st.GROMessages != 1 {
			t.Errorf("Short %d, GROMessages %d; want 1 and 1", st.Short, st.GROMessages)
		}
	})
}

// uskReceiveAll receives want frames from r within a deadline, copied.
func uskReceiveAll(t *testing.T, r *Receiver, conn *net.UDPConn, want int) [][]byte {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var got [][]byte
	frames := make([][]byte, 64)
	for len(got) < want {
		k, err := r.Receive(frames)
		if err != nil {
			t.Fatalf("Receive after %d of %d frames: %v", len(got), want, err)
		}
		for _, f := range frames[:k] {
			got = append(got, bytes.Clone(f))
		}
	}
	if len(got) != want {
		t.Fatalf("%d frames, want %d", len(got), want)
	}
	return got
}
