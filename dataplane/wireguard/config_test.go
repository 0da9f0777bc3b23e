package wireguard

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// TestSetPrivateKey: a new private key stops the keypairs sealing (they
// still open what is in flight), drops the peer that has the new public
// key, and the next handshake uses the new key; the same key again
// changes nothing.
func TestSetPrivateKey(t *testing.T) {
	s := newPair(t, Key{}, nil)
	s.handshake(t)
	msg := sealOne(t, s.a, s.pa, ipv4(60, 1))
	if r := openOne(s.b, msg, addrA).Reason; r != OK {
		t.Fatalf("before: %v", r)
	}
	inFlight := sealOne(t, s.b, s.pb, ipv4(60, 2))

	s.a.SetPrivateKey(s.a.PrivateKey()) // the same key: nothing changes
	sealOne(t, s.a, s.pa, ipv4(60, 3))

	k, _ := NewPrivateKey()
	self, err := s.a.AddPeer(PeerConfig{PublicKey: k.Public()})
	if err != nil {
		t.Fatal(err)
	}
	s.a.SetPrivateKey(k)
	if s.a.PublicKey() != k.Public() || s.a.PeerByKey(k.Public()) != nil || !self.removed {
		t.Fatal("the peer with the new public key is not removed")
	}
	if !slices.Equal(s.a.Peers(), []*Peer{s.pa}) {
		t.Fatalf("peers %v", s.a.Peers())
	}
	pkts := []Packet{{Buf: datagram(ipv4(60, 4)), Peer: s.pa}}
	s.a.Seal(pkts)
	if pkts[0].Reason != Expired || !s.pa.want.Load() {
		t.Fatalf("sealing after the key changed: %v, handshake wanted %v", pkts[0].Reason, s.pa.want.Load())
	}
	if r := openOne(s.a, inFlight, addrB).Reason; r != OK {
		t.Fatalf("a message in flight: %v", r)
	}

	// b still knows a's old key: a's initiation is refused until b
	// has the new one.
	init, err := s.a.AppendInitiation(nil, s.pa)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.b.Handle(nil, init, addrA, false); err != UnknownPeer {
		t.Fatalf("b, without a's new key: %v", err)
	}
	s.b.RemovePeer(s.pb)
	if s.pb, err = s.b.AddPeer(PeerConfig{PublicKey: k.Public(), Endpoint: addrA}); err != nil {
		t.Fatal(err)
	}
	s.handshake(t)
	exchange(t, s)
}

// TestNoPrivateKey: a device without a private key makes and answers no
// handshake, keeps its peers, and works once it has one.
func TestNoPrivateKey(t *testing.T) {
	s := newPair(t, Key{}, nil)
	k := s.a.PrivateKey()
	s.a.SetPrivateKey(Key{})
	if s.a.PublicKey() != (Key{}) || s.a.PrivateKey() != (Key{}) {
		t.Fatal("keys left")
	}
	if _, err := s.a.AppendInitiation(nil, s.pa); err == nil {
		t.Fatal("an initiation without a private key")
	}
	init, _ := s.b.AppendInitiation(nil, s.pb)
	if _, _, err := s.a.Handle(nil, init, addrB, false); err != NoPrivateKey {
		t.Fatalf("an initiation to a device without a key: %v", err)
	}
	d, err := NewDevice(Config{Now: s.clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.AddPeer(PeerConfig{PublicKey: s.b.PublicKey()}); err != nil {
		t.Fatal(err)
	}
	s.a.SetPrivateKey(k)
	s.handshake(t)
	exchange(t, s)
}

// TestPeerSettings: a peer's pre-shared key, keepalive and endpoint
// change after AddPeer; Transfer counts the messages both ways; a peer
// of small order is refused.
func TestPeerSettings(t *testing.T) {
	s := newPair(t, Key{}, nil)
	psk := Key{1, 2, 3}
	s.pa.SetPresharedKey(psk)
	init, _ := s.a.AppendInitiation(nil, s.pa)
	if _, _, err := s.b.Handle(nil, init, addrA, false); err != nil {
		t.Fatal(err) // the initiation does not show the key
	}
	s.clk.Add(time.Second)
	s.pb.SetPresharedKey(psk)
	s.handshake(t)
	exchange(t, s)

	notified := 0
	s.a.notify = func(*Peer) { notified++ }
	s.pa.SetPersistentKeepalive(25 * time.Second)
	ep := netip.MustParseAddrPort("[2001:db8::1]:7")
	s.pa.SetEndpoint(ep)
	c := s.pa.Config()
	if c.PresharedKey != psk || c.PersistentKeepalive != 25*time.Second || c.Endpoint != ep || notified != 1 {
		t.Fatalf("config %+v, notified %d", c, notified)
	}
	s.pa.SetEndpoint(netip.AddrPort{})
	if s.pa.Endpoint().IsValid() {
		t.Fatal("endpoint not cleared")
	}

	rxA, txA := s.pa.Transfer()
	rxB, txB := s.pb.Transfer()
	if rxA == 0 || txA != rxB || txB != rxA+ResponseSize { // b's first response went nowhere
		t.Fatalf("a: rx %d tx %d; b: rx %d tx %d", rxA, txA, rxB, txB)
	}
	var small Key // the zero point is of small order
	if _, err := s.a.AddPeer(PeerConfig{PublicKey: small}); err == nil {
		t.Fatal("a public key of small order taken")
	}
	if err := errors.Join(s.a.SetListenPort(51820), s.a.SetFwmark(7)); err != nil || s.a.ListenPort() != 51820 || s.a.Fwmark() != 7 {
		t.Fatalf("listen port %d, fwmark %d, %v", s.a.ListenPort(), s.a.Fwmark(), err)
	}
}
