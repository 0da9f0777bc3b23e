package wireguard

import (
	"bytes"
	"encoding/hex"
	"io"
	"testing"
	"time"

	"golang.org/x/crypto/hkdf"
)

// TestPrimitives checks HASH and DH against published vectors
// (RFC 7693's BLAKE2s-256 of "abc", RFC 7748's X25519 vector), the KDF
// against HKDF with HMAC-BLAKE2s (the protocol's KDF is HKDF with an
// empty info), and the TAI64N label.
func TestPrimitives(t *testing.T) {
	if h := hashOf([]byte("abc")); hex.EncodeToString(h[:]) != "508c5e8c327c14e2e1a72ba34eeb452f37458b209ed63a294d999b4c86675982" {
		t.Errorf("BLAKE2s(abc) = %x", h)
	}
	var priv, pub Key
	hex.Decode(priv[:], []byte("a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4"))
	hex.Decode(pub[:], []byte("e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c"))
	if s, err := dh(&priv, &pub); err != nil || hex.EncodeToString(s[:]) != "c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552" {
		t.Errorf("X25519 = %x, %v", s, err)
	}
	var zero Key
	if _, err := dh(&priv, &zero); err == nil {
		t.Error("X25519 with a small-order point succeeded")
	}
	ck := hashOf([]byte("chaining key"))
	input := []byte("input key material")
	var t1, t2, t3 [KeyLen]byte
	kdf(&ck, input, &t1, &t2, &t3)
	want := make([]byte, 3*KeyLen)
	io.ReadFull(hkdf.New(newBLAKE2s, input, ck[:], nil), want)
	if got := append(append(t1[:], t2[:]...), t3[:]...); !bytes.Equal(got, want) {
		t.Errorf("KDF3 = %x, HKDF = %x", got, want)
	}
	ts := tai64n(time.Unix(1, 5))
	if hex.EncodeToString(ts[:]) != "400000000000000100000005" {
		t.Errorf("TAI64N = %x", ts)
	}
}

// TestHandshakeAndData: a handshake each way, with and without a
// pre-shared key, then data both ways; the responder's keypair becomes
// current with the initiator's first message.
func TestHandshakeAndData(t *testing.T) {
	var psk Key
	psk[0] = 7
	for _, k := range []Key{{}, psk} {
		s := newPair(t, k, nil)
		s.handshake(t)
		if s.pb.current.Load() != nil || s.pb.next.Load() == nil {
			t.Fatal("responder's keypair not in next")
		}
		if pkts := [](Packet){{Buf: datagram(ipv4(40, 1)), Peer: s.pb}}; true {
			s.b.Seal(pkts)
			if pkts[0].Reason != NoKey {
				t.Errorf("responder sealed before confirmation: %v", pkts[0].Reason)
			}
		}
		exchange(t, s)
		if s.pb.current.Load() == nil || s.pb.next.Load() != nil {
			t.Fatal("responder's keypair not confirmed")
		}
		exchange(t, s.swap())
		s.swap().handshake(t)
		exchange(t, s.swap())
		exchange(t, s)
	}
}

// exchange sends packets of several sizes from a to b and back.
func exchange(t *testing.T, s *pair) {
	t.Helper()
	for _, n := range []int{20, 21, 100, 1420} {
		for _, dir := range []*pair{s, s.swap()} {
			inner := ipv4(n, byte(n))
			msg := sealOne(t, dir.a, dir.pa, inner)
			if len(msg) != HeaderLen+(n+15)&^15+TagLen || Type(msg) != TypeData {
				t.Fatalf("message of %d bytes for %d", len(msg), n)
			}
			got := openOne(dir.b, msg, addrA)
			if got.Reason != OK || got.Peer != dir.pb || !bytes.Equal(got.Buf[HeaderLen:], inner) {
				t.Fatalf("open: %v, peer %p, %d bytes", got.Reason, got.Peer, len(got.Buf))
			}
			if pad := got.Buf[len(got.Buf) : HeaderLen+(n+15)&^15]; !bytes.Equal(pad, make([]byte, len(pad))) {
				t.Fatalf("padding %x", pad)
			}
		}
	}
}

// TestPSKMismatch: a handshake with different pre-shared keys fails at
// the initiator, which cannot open the response.
func TestPSKMismatch(t *testing.T) {
	s := newPair(t, Key{}, nil)
	s.pb.cfg.PresharedKey[0] = 1
	init, _ := s.a.AppendInitiation(nil, s.pa)
	resp, _, err := s.b.Handle(nil, init, addrA, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.a.Handle(nil, resp, addrB, false); err != Auth {
		t.Fatalf("response with another PSK: %v", err)
	}
}
