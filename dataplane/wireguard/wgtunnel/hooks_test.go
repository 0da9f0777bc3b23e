package wgtunnel

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"slices"
	"testing"

	"github.com/gsoplane/gsoplane/dataplane/udp"
	"github.com/gsoplane/gsoplane/dataplane/wireguard"
)

// pairedHooks returns the hooks of two devices that completed a
// handshake (a initiated), each with the other as its tunnel peer 0.
func pairedHooks(t testing.TB) (a, b *hooks) {
	t.Helper()
	da, _ := newDevice(t)
	db, _ := newDevice(t)
	peerB, peerA := handshake(t, da, db)
	a, b = newHooks(da, 1), newHooks(db, 1)
	a.slots.Store(newSlots([]*wireguard.Peer{peerB}))
	b.slots.Store(newSlots([]*wireguard.Peer{peerA}))
	return a, b
}

// handshake makes da and db each other's peers and completes a
// handshake, da initiating; it returns db as da's peer and da as db's.
func handshake(t testing.TB, da, db *wireguard.Device) (peerB, peerA *wireguard.Peer) {
	t.Helper()
	peerA, err := db.AddPeer(wireguard.PeerConfig{PublicKey: da.PublicKey()})
	if err != nil {
		t.Fatal(err)
	}
	peerB, err = da.AddPeer(wireguard.PeerConfig{PublicKey: db.PublicKey()})
	if err != nil {
		t.Fatal(err)
	}
	addrA, addrB := netip.MustParseAddrPort("192.0.2.1:1"), netip.MustParseAddrPort("192.0.2.2:2")
	init, err := da.AppendInitiation(nil, peerB)
	if err != nil {
		t.Fatal(err)
	}
	resp, _, err := db.Handle(nil, init, addrA, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := da.Handle(nil, resp, addrB, false); err != nil {
		t.Fatal(err)
	}
	return peerB, peerA
}

// newDevice returns a device with a key, and its public key.
func newDevice(t testing.TB) (*wireguard.Device, wireguard.Key) {
	k, err := wireguard.NewPrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	d, err := wireguard.NewDevice(wireguard.Config{PrivateKey: k})
	if err != nil {
		t.Fatal(err)
	}
	return d, d.PublicKey()
}

// batch is n datagrams as the tunnel's sink hands them to Seal: header
// room, an IPv4 packet of size bytes (its sequence number in its
// payload), tag room, and capacity to the frame's end; the rooms dirty.
type batch struct {
	frames, dgrams [][]byte
	peers          []int
	verdicts       []udp.Verdict
}

func newBatch(n, size int) *batch {
	b := &batch{peers: make([]int, n), verdicts: make([]udp.Verdict, n)}
	for range n {
		f := make([]byte, wireguard.HeaderLen+size+wireguard.TagLen)
		b.frames = append(b.frames, f)
		b.dgrams = append(b.dgrams, nil)
	}
	return b
}

// fill writes packet i of size bytes into each frame, the rooms dirty.
func (b *batch) fill(size int) {
	for i, f := range b.frames {
		for j := range f {
			f[j] = 0xa5
		}
		ip := f[wireguard.HeaderLen : wireguard.HeaderLen+size]
		clear(ip[:20])
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(size))
		ip[8], ip[9] = 64, 17
		binary.BigEndian.PutUint32(ip[20:], uint32(i))
		b.dgrams[i] = f
		b.peers[i] = 0
	}
}

// TestHooksSealOpen seals a batch with one device's Seal hook and opens
// it with the other's Open hook: every datagram is accepted, named for
// peer 0, and carries its packet; padding makes a packet of 1001 bytes
// a datagram of 16+1008+16 bytes.
func TestHooksSealOpen(t *testing.T) {
	a, b := pairedHooks(t)
	const n, size = 16, 1001
	bt := newBatch(n, size+15)
	bt.fill(size)
	want := make([][]byte, n)
	for i := range n {
		want[i] = slices.Clone(bt.dgrams[i][wireguard.HeaderLen : wireguard.HeaderLen+size])
		bt.dgrams[i] = bt.dgrams[i][:wireguard.HeaderLen+size+wireguard.TagLen]
	}
	a.seal(bt.dgrams, bt.peers)
	for i, d := range bt.dgrams {
		if len(d) != wireguard.HeaderLen+1008+wireguard.TagLen {
			t.Fatalf("datagram %d sealed to %d bytes, want %d", i, len(d), wireguard.HeaderLen+1008+wireguard.TagLen)
		}
		bt.peers[i] = -1
	}
	b.open(bt.dgrams, bt.peers, bt.verdicts)
	for i, d := range bt.dgrams {
		if bt.verdicts[i] != udp.Accept || bt.peers[i] != 0 {
			t.Fatalf("datagram %d: verdict %v, peer %d", i, bt.verdicts[i], bt.peers[i])
		}
		if got := d[wireguard.HeaderLen : wireguard.HeaderLen+size]; !bytes.Equal(got, want[i]) {
			t.Fatalf("datagram %d opened to another packet", i)
		}
	}
}

// TestHooksNoKey: a packet for a peer without a keypair, or for no
// peer, is emptied (dropped) and counted; a handshake message and a
// keepalive are Control, a stranger's data message an authentication
// failure.
func TestHooksNoKey(t *testing.T) {
	d, _ := newDevice(t)
	_, pub := newDevice(t)
	p, err := d.AddPeer(wireguard.PeerConfig{PublicKey: pub})
	if err != nil {
		t.Fatal(err)
	}
	h := newHooks(d, 1)
	h.slots.Store(newSlots([]*wireguard.Peer{p}))
	bt := newBatch(2, 100)
	bt.fill(100)
	bt.peers[1] = 7 // no such peer
	h.seal(bt.dgrams, bt.peers)
	if len(bt.dgrams[0]) != 0 || len(bt.dgrams[1]) != 0 || h.noKey.Load() != 1 || h.unsealed.Load() != 1 {
		t.Fatalf("sealed %d and %d bytes, noKey %d, unsealed %d", len(bt.dgrams[0]), len(bt.dgrams[1]), h.noKey.Load(), h.unsealed.Load())
	}
	init, err := d.AppendInitiation(nil, p)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 64)
	data[0] = wireguard.TypeData
	dgrams := [][]byte{init, data}
	peers, verdicts := []int{-1, -1}, make([]udp.Verdict, 2)
	h.open(dgrams, peers, verdicts)
	if verdicts[0] != udp.Control || verdicts[1] != udp.DropAuth || peers[0] != -1 || peers[1] != -1 {
		t.Fatalf("verdicts %v, peers %v", verdicts, peers)
	}

	a, b := pairedHooks(t)
	ka := [][]byte{make([]byte, wireguard.MinDataSize)} // no packet, the tag's room
	a.seal(ka, []int{0})
	peers = []int{-1}
	b.open(ka, peers, verdicts[:1])
	if verdicts[0] != udp.Control || peers[0] != 0 {
		t.Fatalf("keepalive: verdict %v, peer %d", verdicts[0], peers[0])
	}
}

// TestHooksOpenPeers: a batch mixing two peers' data messages opens
// each named for its own peer's place; a peer no longer in the tunnel's
// table (removed meanwhile) has its messages dropped as unauthentic,
// the other's still accepted.
func TestHooksOpenPeers(t *testing.T) {
	d, _ := newDevice(t)
	x, _ := newDevice(t)
	y, _ := newDevice(t)
	_, px := handshake(t, x, d)
	_, py := handshake(t, y, d)
	hx, hy := newHooks(x, 1), newHooks(y, 1)
	hx.slots.Store(newSlots([]*wireguard.Peer{x.Peers()[0]}))
	hy.slots.Store(newSlots([]*wireguard.Peer{y.Peers()[0]}))
	const size = 200
	from := []*hooks{hx, hx, hy, hx, hy, hy} // x's and y's, interleaved
	sealed := func() [][]byte {
		dgrams := make([][]byte, len(from))
		for i, h := range from {
			bt := newBatch(1, size)
			bt.fill(size)
			h.seal(bt.dgrams, bt.peers)
			dgrams[i] = bt.dgrams[0]
		}
		return dgrams
	}
	h := newHooks(d, 1)
	for _, c := range []struct {
		table []*wireguard.Peer
		x, y  int // the places of x and y, -1: not in the table
	}{{[]*wireguard.Peer{nil, py, px}, 2, 1}, {[]*wireguard.Peer{px}, 0, -1}} {
		h.slots.Store(newSlots(c.table))
		dgrams := sealed()
		peers, verdicts := make([]int, len(dgrams)), make([]udp.Verdict, len(dgrams))
		for i := range peers {
			peers[i] = -1
		}
		h.open(dgrams, peers, verdicts)
		for i, src := range from {
			want, verdict := c.x, udp.Accept
			if src == hy {
				want = c.y
			}
			if want < 0 {
				verdict = udp.DropAuth
			}
			if peers[i] != want || verdicts[i] != verdict {
				t.Errorf("table %v, datagram %d: peer %d, verdict %v; want %d, %v", c.table, i, peers[i], verdicts[i], want, verdict)
			}
		}
	}
}

// TestHooksAllocs: sealing and opening a batch allocates nothing.
func TestHooksAllocs(t *testing.T) {
	a, b := pairedHooks(t)
	const n, size = 64, 1400
	bt := newBatch(n, size)
	run := func() {
		bt.fill(size)
		a.seal(bt.dgrams, bt.peers)
		b.open(bt.dgrams, bt.peers, bt.verdicts)
	}
	run()
	if allocs := testing.AllocsPerRun(50, run); allocs != 0 {
		t.Errorf("%v allocations per batch of %d, want 0", allocs, n)
	}
	for i, v := range bt.verdicts {
		if v != udp.Accept {
			t.Fatalf("datagram %d: verdict %v", i, v)
		}
	}
}

// TestPlacePeers: a peer keeps its place, a new one takes the first
// free place, free places at the end go.
func TestPlacePeers(t *testing.T) {
	p := make([]*wireguard.Peer, 5)
	for i := range p {
		p[i] = new(wireguard.Peer)
	}
	got := placePeers(nil, []*wireguard.Peer{p[0], p[1], p[2]})
	if !slices.Equal(got, []*wireguard.Peer{p[0], p[1], p[2]}) {
		t.Fatalf("first placing: %v", got)
	}
	got = placePeers(got, []*wireguard.Peer{p[0], p[2], p[3], p[4]})
	if !slices.Equal(got, []*wireguard.Peer{p[0], p[3], p[2], p[4]}) {
		t.Fatalf("after removing and adding: %v", got)
	}
	got = placePeers(got, []*wireguard.Peer{p[0], p[3]})
	if !slices.Equal(got, []*wireguard.Peer{p[0], p[3]}) {
		t.Fatalf("after removing the last: %v", got)
	}
}

// TestHooksDrops: Seal's refusals are counted for the peer by reason
// (packets without a keypair are staged, no drops),
// Open's refusals of messages that named no peer for the device; a
// keepalive and a handshake message are no drops.
func TestHooksDrops(t *testing.T) {
	if r := wireguard.Reason(len(Drops{})); r.String() != "unknown reason" {
		t.Fatalf("Drops has no room for the reason %q", r)
	}
	d, _ := newDevice(t)
	_, pub := newDevice(t)
	p, err := d.AddPeer(wireguard.PeerConfig{PublicKey: pub})
	if err != nil {
		t.Fatal(err)
	}
	h := newHooks(d, 1)
	h.slots.Store(newSlots([]*wireguard.Peer{p}))
	bt := newBatch(3, 100)
	bt.fill(100)
	h.seal(bt.dgrams, bt.peers)
	if got := h.slots.Load().of(p).drops.load(); got != (Drops{}) {
		t.Errorf("the peer's drops %v, want none: packets without a keypair are staged", got)
	}
	if st := d.StagedStats(); st.Staged != 3 {
		t.Errorf("staged %+v, want the 3 packets without a keypair", st)
	}
	init, err := d.AppendInitiation(nil, p)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 64)
	data[0] = wireguard.TypeData
	h.open([][]byte{init, data, data[:20]}, []int{-1, -1, -1}, make([]udp.Verdict, 3))
	want := Drops{}
	want[wireguard.UnknownIndex], want[wireguard.Short] = 1, 1
	if got := h.refused.load(); got != want {
		t.Errorf("Open's refusals %v, want %v", got, want)
	}

	a, b := pairedHooks(t)
	ka := [][]byte{make([]byte, wireguard.MinDataSize)}
	a.seal(ka, []int{0})
	b.open(ka, []int{-1}, make([]udp.Verdict, 1))
	if got := b.refused.load(); got != (Drops{}) {
		t.Errorf("a keepalive counted as refused: %v", got)
	}
	if got := b.slots.Load().counter(0).drops.load(); got != (Drops{}) {
		t.Errorf("a keepalive counted as the peer's drop: %v", got)
	}

	// Authentic, but no IP packet inside: the peer's malformed; from a
	// peer no longer in the table: the device's unknown_peer.
	bt = newBatch(2, 100)
	bt.fill(100)
	bt.dgrams[0][wireguard.HeaderLen] = 0x00 // IP version 0
	a.seal(bt.dgrams, bt.peers)
	b.open(bt.dgrams[:1], []int{-1}, make([]udp.Verdict, 1))
	if got := b.slots.Load().counter(0).drops.load(); got[wireguard.Malformed] != 1 {
		t.Errorf("the peer's drops %v, want 1 malformed", got)
	}
	b.slots.Store(newSlots(nil))
	verdicts := make([]udp.Verdict, 1)
	b.open(bt.dgrams[1:], []int{-1}, verdicts)
	if got := b.refused.load(); verdicts[0] != udp.DropAuth || got[wireguard.UnknownPeer] != 1 {
		t.Errorf("from a peer removed: verdict %v, refused %v, want DropAuth and 1 unknown_peer", verdicts[0], got)
	}
}
