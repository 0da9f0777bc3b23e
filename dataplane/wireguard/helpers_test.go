package wireguard

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// clock is a fake clock tests move by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Unix(1_800_000_000, 0)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var (
	addrA = netip.MustParseAddrPort("192.0.2.1:51820")
	addrB = netip.MustParseAddrPort("192.0.2.2:51820")
)

// pair is two devices that are each other's peer.
type pair struct {
	clk    *clock
	a, b   *Device
	pa, pb *Peer // b as a's peer, a as b's peer
}

func newPair(t testing.TB, psk Key, timers *Timers) *pair {
	t.Helper()
	s := &pair{clk: newClock()}
	s.a = newDevice(t, s.clk, timers)
	s.b = newDevice(t, s.clk, timers)
	var err error
	if s.pa, err = s.a.AddPeer(PeerConfig{PublicKey: s.b.PublicKey(), PresharedKey: psk, Endpoint: addrB}); err != nil {
		t.Fatal(err)
	}
	if s.pb, err = s.b.AddPeer(PeerConfig{PublicKey: s.a.PublicKey(), PresharedKey: psk, Endpoint: addrA}); err != nil {
		t.Fatal(err)
	}
	return s
}

func newDevice(t testing.TB, clk *clock, timers *Timers) *Device {
	t.Helper()
	k, err := NewPrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDevice(Config{PrivateKey: k, Now: clk.Now, Timers: timers})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// handshake runs a handshake initiated by a and fails the test if it
// does not complete.
func (s *pair) handshake(t testing.TB) {
	t.Helper()
	init, err := s.a.AppendInitiation(nil, s.pa)
	if err != nil {
		t.Fatal(err)
	}
	resp, p, err := s.b.Handle(nil, init, addrA, false)
	if err != nil || p != s.pb {
		t.Fatalf("initiation: peer %p, %v", p, err)
	}
	out, p, err := s.a.Handle(nil, resp, addrB, false)
	if err != nil || p != s.pa || len(out) != 0 {
		t.Fatalf("response: peer %p, %d bytes out, %v", p, len(out), err)
	}
}

// swap returns the pair seen from b.
func (s *pair) swap() *pair { return &pair{clk: s.clk, a: s.b, b: s.a, pa: s.pb, pb: s.pa} }

// ipv4 returns an IPv4 packet of n bytes (at least 20), its payload a
// pattern from seed.
func ipv4(n int, seed byte) []byte {
	b := make([]byte, n)
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(n))
	b[8], b[9] = 64, 17
	copy(b[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	for i := 20; i < n; i++ {
		b[i] = seed + byte(i)
	}
	return b
}

// datagram returns a buffer for Seal holding inner after HeaderLen bytes
// of room, with room for padding and the tag, all of it dirty.
func datagram(inner []byte) []byte {
	b := make([]byte, HeaderLen+len(inner)+15+TagLen)
	for i := range b {
		b[i] = 0xa5
	}
	copy(b[HeaderLen:], inner)
	return b[:HeaderLen+len(inner)]
}

// sealOne seals inner from d to p and returns the message.
func sealOne(t testing.TB, d *Device, p *Peer, inner []byte) []byte {
	t.Helper()
	pkts := []Packet{{Buf: datagram(inner), Peer: p}}
	d.Seal(pkts)
	if pkts[0].Reason != OK {
		t.Fatalf("seal: %v", pkts[0].Reason)
	}
	return pkts[0].Buf
}

// openOne opens msg from src at d.
func openOne(d *Device, msg []byte, src netip.AddrPort) Packet {
	pkts := []Packet{{Buf: append([]byte(nil), msg...), Addr: src}}
	d.Open(pkts)
	return pkts[0]
}

// netipAddrPort returns a with its port moved by n.
func netipAddrPort(a netip.AddrPort, n uint16) netip.AddrPort {
	return netip.AddrPortFrom(a.Addr(), a.Port()+n)
}
