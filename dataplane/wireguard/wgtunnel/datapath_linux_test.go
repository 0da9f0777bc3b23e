package wgtunnel

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/udp"
	"github.com/gsoplane/gsoplane/dataplane/wireguard"
)

// dataEnd is one end of the data path as the tunnel wires it, without
// the TUN device: a udp.Sink sealing with the Seal hook and a
// udp.Receiver opening with the Open hook, on one socket, with the
// tunnel's Peers (the other end) and Roam.
type dataEnd struct {
	inner  netip.Addr
	sink   *udp.Sink
	recv   *udp.Receiver
	frames []frame.Frame
	got    [][]byte
}

// newDataEnd opens an end on a loopback socket of its own; connect
// gives it its peer.
func newDataEnd(t *testing.T, inner netip.Addr) (*dataEnd, *net.UDPConn) {
	t.Helper()
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &dataEnd{inner: inner, frames: make([]frame.Frame, 64), got: make([][]byte, 64)}, conn
}

// connect gives e, on conn, its peer at ep with inner address inner.
func (e *dataEnd) connect(t *testing.T, h *hooks, conn *net.UDPConn, ep netip.AddrPort, inner netip.Addr) {
	t.Helper()
	peers, err := udp.NewPeers([]udp.Peer{{Endpoint: ep, Allowed: []netip.Prefix{netip.PrefixFrom(inner, 32)}}})
	if err != nil {
		t.Fatal(err)
	}
	e.sink, err = udp.NewSink(conn, udp.SinkConfig{Frames: 64, Headroom: wireguard.HeaderLen, Tailroom: wireguard.TagLen, Seal: h.seal, Peers: peers})
	if err != nil {
		t.Fatal(err)
	}
	e.recv, err = udp.NewReceiver(conn, udp.ReceiverConfig{
		Headroom: wireguard.HeaderLen, Tailroom: wireguard.TagLen, Open: h.open, Peers: peers, Roam: true,
	})
	if err != nil {
		t.Fatal(err)
	}
}

// send seals and sends n IPv4 packets of size bytes from e to dst, each
// with its number in its payload, over whatever the frames held.
func (e *dataEnd) send(t *testing.T, dst netip.Addr, n, size int) {
	k := e.sink.Alloc(e.frames[:n])
	for i := range e.frames[:k] {
		f := &e.frames[i]
		p := f.Buf[wireguard.HeaderLen : wireguard.HeaderLen+size]
		clear(p[:20])
		p[0], p[8], p[9] = 0x45, 64, 17
		binary.BigEndian.PutUint16(p[2:], uint16(size))
		s, d := e.inner.As4(), dst.As4()
		copy(p[12:], s[:])
		copy(p[16:], d[:])
		binary.BigEndian.PutUint32(p[20:], uint32(i))
		f.Len = size
	}
	if m, err := e.sink.Transmit(e.frames[:k]); m != k || err != nil || k != n {
		t.Fatalf("%d of %d frames allocated, %d sent: %v", k, n, m, err)
	}
	e.sink.Complete()
}

// receive takes n packets of size bytes (each with its padding, up to
// 15 bytes, which the return path trims to the IP length) and checks
// their numbers.
func (e *dataEnd) receive(t *testing.T, n, size int) {
	for got := 0; got < n; {
		e.recv.SetReadDeadline(time.Now().Add(10 * time.Second))
		k, err := e.recv.Receive(e.got)
		if err != nil {
			t.Fatalf("Receive: %v (stats %+v)", err, e.recv.Stats())
		}
		for _, d := range e.got[:k] {
			p := d[wireguard.HeaderLen:]
			if len(p) < size || len(p)-size > 15 || int(binary.BigEndian.Uint16(p[2:])) != size || binary.BigEndian.Uint32(p[20:]) != uint32(got) {
				t.Fatalf("packet %d: %d bytes (want %d and padding), numbered %d (stats %+v)", got, len(p), size, binary.BigEndian.Uint32(p[20:min(len(p), 24)]), e.recv.Stats())
			}
			got++
		}
	}
}

// TestDataPathAllocs: the data path both ways, as the tunnel wires it
// (each end's Sink sealing with the Seal hook to its one peer, the other
// end's Receiver opening with the Open hook, Peers and Roam), allocates
// nothing: a round of 40 packets each way, each message sealed, sent,
// received, authenticated and checked for its peer and inner source.
func TestDataPathAllocs(t *testing.T) { // not parallel: AllocsPerRun refuses
	ha, hb := pairedHooks(t)
	innerA, innerB := netip.MustParseAddr("10.9.0.1"), netip.MustParseAddr("10.9.0.2")
	a, connA := newDataEnd(t, innerA)
	b, connB := newDataEnd(t, innerB)
	a.connect(t, ha, connA, connB.LocalAddr().(*net.UDPAddr).AddrPort(), innerB)
	b.connect(t, hb, connB, connA.LocalAddr().(*net.UDPAddr).AddrPort(), innerA)
	const n, size = 40, 1420
	round := func() {
		a.send(t, innerB, n, size)
		b.receive(t, n, size)
		b.send(t, innerA, n, size)
		a.receive(t, n, size)
	}
	round()
	allocs := testing.AllocsPerRun(20, round)
	if raceEnabled {
		t.Logf("%.1f allocations per round: not checked under the race detector (it empties x/net's sync.Pool)", allocs)
	} else if allocs != 0 {
		t.Errorf("%.1f allocations per round of %d packets each way, want 0", allocs, n)
	}
	for _, e := range []*dataEnd{a, b} {
		if st := e.recv.Stats(); st.Datagrams != 22*n || st.Refused != 0 || st.NotAllowed != 0 || st.UnknownPeer != 0 {
			t.Errorf("receiver stats %+v: want %d datagrams, none refused (AllocsPerRun runs the round once more)", st, 22*n)
		}
	}
}
