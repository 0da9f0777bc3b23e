package wireguard

import (
	"testing"
	"time"
)

// TestHostileHandshake: handshake messages that are truncated, oversize,
// of an unknown type, with a wrong MAC1, altered, replayed, from an
// unknown key or to an unknown index are refused with their reason.
func TestHostileHandshake(t *testing.T) {
	s := newPair(t, Key{}, nil)
	init, _ := s.a.AppendInitiation(nil, s.pa)
	alter := func(msg []byte, f func([]byte)) []byte {
		b := append([]byte(nil), msg...)
		f(b)
		return b
	}
	stranger := newDevice(t, s.clk, nil)
	sp, _ := stranger.AddPeer(PeerConfig{PublicKey: s.b.PublicKey()})
	strange, _ := stranger.AppendInitiation(nil, sp)
	reMAC := func(b []byte) { // a valid MAC1 over altered contents
		o1, _ := macs(b)
		m := macOf(s.b.id.Load().mac1Key[:], b[:o1])
		copy(b[o1:], m[:])
	}
	for _, c := range []struct {
		name string
		msg  []byte
		want Reason
	}{
		{"empty", nil, UnknownType},
		{"type only", init[:4], Short},
		{"truncated", init[:InitiationSize-1], Short},
		{"oversize", append(append([]byte(nil), init...), 0), Oversize},
		{"unknown type", alter(init, func(b []byte) { b[0] = 5 }), UnknownType},
		{"reserved set", alter(init, func(b []byte) { b[2] = 1 }), UnknownType},
		{"data type", alter(init, func(b []byte) { b[0] = TypeData }), UnknownType},
		{"wrong mac1", alter(init, func(b []byte) { b[InitiationSize-2*macLen] ^= 1 }), BadMAC1},
		{"altered static", alter(init, func(b []byte) { b[offInitStat] ^= 1; reMAC(b) }), Auth},
		{"altered timestamp", alter(init, func(b []byte) { b[offInitTime] ^= 1; reMAC(b) }), Auth},
		{"small-order ephemeral", alter(init, func(b []byte) { clear(b[offInitEph : offInitEph+KeyLen]); reMAC(b) }), BadKey},
		{"unknown peer", strange, UnknownPeer},
		{"response to nothing", alter(make([]byte, ResponseSize), func(b []byte) { b[0] = TypeResponse; reMAC(b) }), UnknownIndex},
		{"cookie reply to nothing", alter(make([]byte, CookieReplySize), func(b []byte) { b[0] = TypeCookieReply }), UnknownIndex},
	} {
		out, p, err := s.b.Handle(nil, c.msg, addrA, false)
		if err != c.want || p != nil || len(out) != 0 {
			t.Errorf("%s: %v, peer %p, %d bytes out; want %v", c.name, err, p, len(out), c.want)
		}
	}
	if _, _, err := s.b.Handle(nil, init, addrA, false); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.b.Handle(nil, init, addrA, false); err != OldTimestamp {
		t.Errorf("replayed initiation: %v", err)
	}
	s.clk.Add(time.Millisecond)
	second, _ := s.a.AppendInitiation(nil, s.pa)
	if _, _, err := s.b.Handle(nil, second, addrA, false); err != RateLimited {
		t.Errorf("initiation 1 ms after the last: %v", err)
	}
	s.clk.Add(time.Second)
	old := append([]byte(nil), second...)
	third, _ := s.a.AppendInitiation(nil, s.pa)
	if _, _, err := s.b.Handle(nil, third, addrA, false); err != nil {
		t.Errorf("a new initiation: %v", err)
	}
	if _, _, err := s.b.Handle(nil, old, addrA, false); err != OldTimestamp {
		t.Errorf("an initiation older than the last accepted: %v", err)
	}
	// A response with a wrong tag, then a cookie reply that does not
	// open, to the handshake a has under way.
	resp, _, _ := s.b.Handle(nil, append([]byte(nil), s.fresh(t)...), addrA, false)
	bad := alter(resp, func(b []byte) {
		b[offRespEmpty] ^= 1
		o1, _ := macs(b)
		m := macOf(s.a.id.Load().mac1Key[:], b[:o1])
		copy(b[o1:], m[:])
	})
	if _, _, err := s.a.Handle(nil, bad, addrB, false); err != Auth {
		t.Errorf("response with a wrong tag: %v", err)
	}
	cookie := make([]byte, CookieReplySize)
	putType(cookie, TypeCookieReply)
	putIndex(cookie, offReceiver, index(resp, offRespRecv))
	if _, _, err := s.a.Handle(nil, cookie, addrB, false); err != Auth {
		t.Errorf("forged cookie reply: %v", err)
	}
	if _, p, err := s.a.Handle(nil, resp, addrB, false); err != nil || p != s.pa {
		t.Errorf("the response after hostile ones: %v", err)
	}
}

// fresh returns a new initiation from a, past b's rate limit.
func (s *pair) fresh(t *testing.T) []byte {
	s.clk.Add(time.Second)
	init, err := s.a.AppendInitiation(nil, s.pa)
	if err != nil {
		t.Fatal(err)
	}
	return init
}

// TestHostileData: data messages replayed, truncated, altered, to an
// unknown index, beyond the counter limit or not IP inside are refused
// with their reason; a keepalive opens as one.
func TestHostileData(t *testing.T) {
	s := newPair(t, Key{}, nil)
	s.b.timers.RejectAfterMessages = 1 << 20 // b accepts no counter from there on; a sends them
	s.handshake(t)
	msg := sealOne(t, s.a, s.pa, ipv4(60, 3))
	if got := openOne(s.b, msg, addrA); got.Reason != OK {
		t.Fatal(got.Reason)
	}
	unopened := sealOne(t, s.a, s.pa, ipv4(60, 3))
	withCounter := func(c uint64) []byte {
		b := datagram(ipv4(60, 3))
		pkts := []Packet{{Buf: b, Peer: s.pa}}
		s.pa.current.Load().sendCounter.Store(c)
		s.a.Seal(pkts)
		return pkts[0].Buf
	}
	alter := func(f func([]byte)) []byte {
		b := append([]byte(nil), unopened...)
		f(b)
		return b
	}
	notIP := datagram(make([]byte, 30))
	for _, c := range []struct {
		name string
		msg  []byte
		want Reason
	}{
		{"replayed", msg, Replay},
		{"empty", nil, UnknownType},
		{"truncated header", msg[:HeaderLen-1], Short},
		{"no tag", msg[:MinDataSize-1], Short},
		{"cut", unopened[:len(unopened)-1], Auth},
		{"handshake type", alter(func(b []byte) { b[0] = TypeInitiation }), UnknownType},
		{"reserved set", alter(func(b []byte) { b[3] = 1 }), UnknownType},
		{"unknown index", alter(func(b []byte) { b[offReceiver] ^= 1 }), UnknownIndex},
		{"altered counter", alter(func(b []byte) { b[offCounter] ^= 0x40 }), Auth},
		{"altered ciphertext", alter(func(b []byte) { b[HeaderLen] ^= 1 }), Auth},
		{"altered tag", alter(func(b []byte) { b[len(b)-1] ^= 1 }), Auth},
		{"counter at the limit", withCounter(1 << 20), Replay},
		{"not IP", func() []byte {
			p := []Packet{{Buf: notIP, Peer: s.pa}}
			s.pa.current.Load().sendCounter.Store(5)
			s.a.Seal(p)
			return p[0].Buf
		}(), Malformed},
		{"keepalive", func() []byte {
			p := []Packet{{Buf: make([]byte, HeaderLen, 64), Peer: s.pa}}
			s.a.Seal(p)
			return p[0].Buf
		}(), Keepalive},
	} {
		if got := openOne(s.b, c.msg, addrA); got.Reason != c.want {
			t.Errorf("%s: %v, want %v", c.name, got.Reason, c.want)
		}
	}
	if got := openOne(s.b, withCounter(1<<20-1), addrA); got.Reason != OK {
		t.Errorf("the last counter: %v", got.Reason)
	}
	// At the limit, Seal takes the counters left and no more: the
	// counter never wraps to reuse a nonce.
	kp := s.pa.current.Load()
	kp.sendCounter.Store(DefaultTimers.RejectAfterMessages - 1)
	for range 3 {
		p := batch(s.pa, 3)
		s.a.Seal(p)
		if p[1].Reason != Expired || p[2].Reason != Expired || kp.sendCounter.Load() != DefaultTimers.RejectAfterMessages {
			t.Fatalf("seal at the counter limit: %v %v %v, counter %d", p[0].Reason, p[1].Reason, p[2].Reason, kp.sendCounter.Load())
		}
	}
	if p := []Packet{{Buf: datagram(ipv4(20, 0))}}; true {
		s.a.Seal(p)
		if p[0].Reason != UnknownPeer {
			t.Errorf("seal to no peer: %v", p[0].Reason)
		}
	}
	s.pa.current.Load().sendCounter.Store(200)
	var tight [HeaderLen + 40 + TagLen - 1]byte
	p := []Packet{{Buf: tight[:HeaderLen+40], Peer: s.pa}}
	s.a.Seal(p)
	if p[0].Reason != NoRoom {
		t.Errorf("seal without room for the tag: %v", p[0].Reason)
	}
	// A message too old for the window, after the window moved on.
	first := withCounter(1 << 10)
	openOne(s.b, withCounter(1<<10+ReplayWindow), addrA)
	if got := openOne(s.b, first, addrA); got.Reason != Replay {
		t.Errorf("a counter behind the window: %v", got.Reason)
	}
}

// TestRemovePeer: a removed peer's messages are refused: its data as to
// an unknown index, its initiations as from an unknown key.
func TestRemovePeer(t *testing.T) {
	s := newPair(t, Key{}, nil)
	s.handshake(t)
	msg := sealOne(t, s.a, s.pa, ipv4(40, 0))
	s.b.RemovePeer(s.pb)
	if got := openOne(s.b, msg, addrA); got.Reason != UnknownIndex {
		t.Errorf("data of a removed peer: %v", got.Reason)
	}
	if _, _, err := s.b.Handle(nil, s.fresh(t), addrA, false); err != UnknownPeer {
		t.Errorf("initiation of a removed peer: %v", err)
	}
	if len(s.b.indices) != 0 || s.b.PeerByKey(s.a.PublicKey()) != nil {
		t.Error("the peer's indices or key kept")
	}
	if _, err := s.b.AppendInitiation(nil, s.pb); err == nil {
		t.Error("initiation to a removed peer")
	}
}
