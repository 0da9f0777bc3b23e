package udp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// padTo is the multiple TestUDPSinkPadding's Seal pads datagrams to.
const padTo = 64

// padSeal seals as uskSeal does, then pads each datagram to a multiple
// of padTo with 0xEE bytes before its trailer, and empties the datagrams
// of 1000-byte packets.
func padSeal(headroom, tail int) SealFunc {
	seal := uskSeal(tail)
	return func(dgrams [][]byte, peers []int) {
		seal(dgrams, peers)
		for i, d := range dgrams {
			if len(d) == headroom+1000+tail {
				dgrams[i] = d[:0]
				continue
			}
			n := (len(d) + padTo - 1) / padTo * padTo
			p := d[:n]
			copy(p[n-tail:], d[len(d)-tail:])
			for j := len(d) - tail; j < n-tail; j++ {
				p[j] = 0xEE
			}
			dgrams[i] = p
		}
	}
}

// TestUDPSinkPadding: a Seal hook that pads changes the datagrams'
// lengths, and the sink sends them at those lengths, coalescing the runs
// of equal sealed lengths with UDP_SEGMENT (packets of different lengths
// padded to one make one run); a datagram Seal empties is dropped and
// counted; frames come dirty; and a round allocates nothing.
func TestUDPSinkPadding(t *testing.T) { // not parallel: AllocsPerRun refuses
	const tail = 16
	n := newUskNet(t)
	s, _, rx := newUskSink(t, n, uskPort, SinkConfig{Frames: 64, Headroom: uskHdrLen, Tailroom: tail, Seal: padSeal(uskHdrLen, tail)})
	uskSockopt(t, rx, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20)
	lens := []int{1400, 1390, 1380, 1400, 400, 1000}
	var seq uint32
	frames := uskFrames(t, s, lens, &seq)
	for _, f := range frames { // dirty what lies past each packet
		for j := uskHdrLen + f.Len; j < len(f.Buf[:cap(f.Buf)]); j++ {
			f.Buf[:cap(f.Buf)][j] = 0x5A
		}
	}
	uskTransmit(t, s, frames)
	buf := make([]byte, 65536)
	rx.SetReadDeadline(time.Now().Add(uskWait))
	seq = 0
	for i, l := range lens {
		if l == 1000 {
			seq++
			continue
		}
		k, err := rx.Read(buf)
		if err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
		d := buf[:k]
		want := (uskHdrLen + l + tail + padTo - 1) / padTo * padTo
		if k != want {
			t.Fatalf("datagram %d: %d bytes, want %d (padded)", i, k, want)
		}
		pad := d[uskHdrLen+l : k-tail]
		if len(pad) > 0 && !bytes.Equal(pad, bytes.Repeat([]byte{0xEE}, len(pad))) || !bytes.Equal(d[k-tail:], d[:tail]) {
			t.Fatalf("datagram %d: padding %x, trailer %x: want 0xee bytes and a copy of the header", i, pad, d[k-tail:])
		}
		if got := uint32(d[uskHdrLen])<<24 | uint32(d[uskHdrLen+1])<<16 | uint32(d[uskHdrLen+2])<<8 | uint32(d[uskHdrLen+3]); got != seq {
			t.Fatalf("datagram %d: sequence %d, want %d", i, got, seq)
		}
		seq++
	}
	st := s.Stats()
	if st.Datagrams != 5 || st.Unsealed != 1 || st.Dropped != 1 || st.GSO && (st.Messages != 1 || st.GSOMessages != 1) {
		t.Errorf("stats %+v: want 5 datagrams in one UDP_SEGMENT message, one unsealed and dropped", st)
	}
	batch := make([]frame.Frame, 40)
	allocs := testing.AllocsPerRun(100, func() {
		k := s.Alloc(batch)
		for i := range batch[:k] {
			batch[i].Len = 1400 - i%3 - i/39*1000 // 39 of three lengths padded to one, a short one last
		}
		if m, err := s.Transmit(batch[:k]); m != k || err != nil {
			panic(fmt.Sprint("Transmit: ", m, err))
		}
		s.Complete()
	})
	switch {
	case uskRace():
		t.Logf("%.1f allocations per run: not checked under the race detector", allocs)
	case allocs != 0:
		t.Errorf("Alloc+Transmit+Complete with padding: %.1f allocations per run, want 0", allocs)
	}
	if st := s.Stats(); st.GSO && st.GSOMessages != st.Messages {
		t.Errorf("stats %+v: want every message GSO", st)
	}
}

// TestUDPSinkSetEndpoint: a peer's endpoint moved while the sink runs
// takes its datagrams from the next Transmit on; Set replaces the peers,
// a new one gets datagrams and a removed one none.
func TestUDPSinkSetEndpoint(t *testing.T) {
	n := newUskNet(t)
	peers := uskTwoPeers(t)
	rx0, rx3 := uskListen(t, n.b, uskAP(uskAddrB, uskPort+1)), uskListen(t, n.b, uskAP(uskAddrB, uskPort+3))
	s, err := NewSink(uskListen(t, n.a, uskAP(uskAddrA, 0)), SinkConfig{Frames: 8, Headroom: uskHdrLen, Peers: peers})
	netlab.Must(t, err)
	send := func(dst netip.Addr, seq uint32) {
		t.Helper()
		f := make([]frame.Frame, 1)
		s.Alloc(f)
		f[0].Len = 100
		uskIPFrame(f[0].Buf[uskHdrLen:], dst, seq)
		uskTransmit(t, s, f)
	}
	expect := func(c *net.UDPConn, seq uint32) {
		t.Helper()
		buf := make([]byte, 2048)
		c.SetReadDeadline(time.Now().Add(uskWait))
		k, err := c.Read(buf)
		if err != nil || k != uskHdrLen+100 || binary.BigEndian.Uint32(buf[uskHdrLen+40:]) != seq {
			t.Fatalf("datagram %d: %d bytes, %v", seq, k, err)
		}
	}
	send(uskPeerDst[0], 1)
	expect(rx0, 1)
	moved := uskAddrPort(uskAP(uskAddrB, uskPort+3))
	netlab.Must(t, peers.SetEndpoint(0, moved))
	send(uskPeerDst[0], 2)
	expect(rx3, 2)
	if got := peers.Stats()[0]; got.Endpoint != moved || got.SentDatagrams != 2 {
		t.Errorf("peer 0: %+v, want endpoint %v and 2 datagrams", got, moved)
	}
	netlab.Must(t, peers.Set([]Peer{{Endpoint: uskAddrPort(uskAP(uskAddrB, uskPort+1)), Allowed: []netip.Prefix{netip.MustParsePrefix("10.0.9.0/24")}}}))
	send(uskPeerDst[2], 3) // the new peer's
	expect(rx0, 3)
	send(uskPeerDst[0], 4) // the removed peer's
	if st := s.Stats(); st.NoPeer != 1 || st.Datagrams != 3 {
		t.Errorf("stats %+v: want 3 datagrams sent and the removed peer's dropped", st)
	}
}

// TestUDPReceiverControlRoam: datagrams Open marks Control go to
// OnControl with their source and peer, not to the return path; with
// Roam a stranger's datagram goes to Open with peer -1, to OnControl if
// Open names no peer, and moves the peer's endpoint there if it names
// one; and a round of control and data allocates nothing.
func TestUDPReceiverControlRoam(t *testing.T) { // not parallel: AllocsPerRun refuses
	const (
		size    = 300
		control = 1 // d[0]: a control message; else data of the peer d[1] names (0xff: none)
	)
	n := newUskNet(t)
	rx := uskListen(t, n.b, uskAP(uskAddrB, uskPort))
	dial := func(port int) *net.UDPConn { return uskDialFrom(t, n.a, port) }
	peer0, stranger := dial(40001), dial(40003)
	peers, err := NewPeers([]Peer{{Endpoint: uskAddrPort(uskAP(uskAddrA, 40001)), Allowed: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}}})
	netlab.Must(t, err)
	dgram := func(kind, peer byte) []byte {
		d := make([]byte, size)
		d[0], d[1] = kind, peer
		uskIPFrame(d[uskHdrLen:], netip.MustParseAddr("10.0.0.5"), 0)
		copy(d[uskHdrLen+12:], netip.MustParseAddr("10.0.0.5").AsSlice()) // the source
		return d
	}
	open := func(dgrams [][]byte, peers []int, verdicts []Verdict) {
		for i, d := range dgrams {
			switch {
			case d[0] == control:
				verdicts[i] = Control
			case d[1] != 0xff:
				peers[i] = int(d[1])
			}
		}
	}
	type ctl struct {
		from netip.AddrPort
		peer int
		b0   byte
	}
	var got []ctl
	got = make([]ctl, 0, 64)
	r, err := NewReceiver(rx, ReceiverConfig{Headroom: uskHdrLen, Messages: 4, Open: open, Peers: peers, Roam: true,
		OnControl: func(from netip.AddrPort, peer int, b []byte) { got = append(got, ctl{from, peer, b[0]}) }})
	netlab.Must(t, err)
	frames := make([][]byte, 64)
	// receive sends ds from c and receives until data datagrams come out.
	receive := func(c *net.UDPConn, data int, ds ...[]byte) {
		for _, d := range ds {
			if _, err := c.Write(d); err != nil {
				t.Fatal(err)
			}
		}
		for got := 0; got < data; {
			r.SetReadDeadline(time.Now().Add(uskWait))
			k, err := r.Receive(frames)
			if err != nil {
				t.Fatalf("Receive: %v (stats %+v)", err, r.Stats())
			}
			for _, f := range frames[:k] {
				if len(f) != size {
					t.Fatalf("handed out %d bytes, want a data packet of %d", len(f), size)
				}
			}
			got += k
		}
	}
	from0, fromS := uskAddrPort(uskAP(uskAddrA, 40001)), uskAddrPort(uskAP(uskAddrA, 40003))
	receive(peer0, 1, dgram(control, 0), dgram(0, 0))
	receive(stranger, 1, dgram(control, 0), dgram(0, 0xff), dgram(0, 0))
	want := []ctl{{from0, 0, control}, {fromS, -1, control}, {fromS, -1, 0}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("OnControl took %v, want %v", got, want)
	}
	if ep := peers.Peer(0).Endpoint; ep != fromS {
		t.Errorf("peer 0's endpoint %v, want %v: roamed", ep, fromS)
	}
	st := r.Stats()
	if st.Control != 3 || st.Roamed != 1 || st.Datagrams != 2 || st.UnknownPeer != 0 || st.NotAllowed != 0 {
		t.Errorf("stats %+v: want 3 control datagrams, 2 handed out, one roam", st)
	}
	c, d := dgram(control, 0), dgram(0, 0)
	round := func() {
		got = got[:0]
		receive(stranger, 2, c, d, d)
	}
	if allocs := testing.AllocsPerRun(20, round); allocs != 0 {
		t.Errorf("control and data: %.1f allocations per round, want 0", allocs)
	}
	if st := r.Stats(); st.Roamed != 1 {
		t.Errorf("Roamed %d, want 1: the peer's own endpoint now", st.Roamed)
	}
}
