package wireguard

import (
	"testing"
	"time"
)

// tick runs p's Tick and checks its action.
func tick(t *testing.T, p *Peer, want Action) time.Time {
	t.Helper()
	act, next := p.Tick()
	if act != want {
		t.Fatalf("Tick: %v, want %v", act, want)
	}
	return next
}

// TestTimersHandshake: a peer without a keypair asks for a handshake
// (Notify once until Tick), retries it every RekeyTimeout plus jitter,
// gives it up after RekeyAttemptTime; a completed one asks for a
// keepalive, which confirms the responder's keypair.
func TestTimersHandshake(t *testing.T) {
	s := newPair(t, Key{}, nil)
	var notified int
	s.a.notify = func(p *Peer) { notified++ }
	for range 2 {
		p := []Packet{{Buf: datagram(ipv4(20, 0)), Peer: s.pa}}
		s.a.Seal(p)
		if p[0].Reason != NoKey || p[0].Addr != addrB {
			t.Fatalf("seal without a keypair: %v to %v", p[0].Reason, p[0].Addr)
		}
	}
	if notified != 1 {
		t.Fatalf("notified %d times", notified)
	}
	tick(t, s.pa, SendInitiation)
	s.a.AppendInitiation(nil, s.pa)
	next := tick(t, s.pa, 0)
	if d := next.Sub(s.clk.Now()); d < DefaultTimers.RekeyTimeout || d > DefaultTimers.RekeyTimeout+DefaultTimers.RekeyJitter {
		t.Fatalf("next Tick in %v", d)
	}
	start := s.clk.Now()
	for s.clk.Now().Sub(start) < DefaultTimers.RekeyAttemptTime {
		s.clk.Add(next.Sub(s.clk.Now()))
		act, _ := s.pa.Tick()
		if act != SendInitiation {
			break
		}
		s.a.AppendInitiation(nil, s.pa)
		next = tick(t, s.pa, 0)
	}
	if s.pa.hsPending || s.clk.Now().Sub(start) < DefaultTimers.RekeyAttemptTime || len(s.a.indices) != 0 {
		t.Fatalf("handshake not given up after %v (%d indices)", s.clk.Now().Sub(start), len(s.a.indices))
	}
	tick(t, s.pa, 0)

	s.handshake(t)
	tick(t, s.pa, SendKeepalive)
	msg := sealOne(t, s.a, s.pa, nil)
	tick(t, s.pa, 0)
	if got := openOne(s.b, msg, addrA); got.Reason != Keepalive || s.pb.current.Load() == nil {
		t.Fatalf("keepalive: %v", got.Reason)
	}
	if s.pb.LastHandshake() != s.clk.Now() || s.pa.LastHandshake() != s.clk.Now() {
		t.Error("LastHandshake")
	}
}

// TestTimersSession: keepalives after KeepaliveTimeout of receiving
// only, a handshake after KeepaliveTimeout + RekeyTimeout of sending
// only, the initiator's rekey at RekeyAfterTime and RekeyAfterMessages,
// the previous keypair still opening, keypairs dropped at
// RejectAfterTime, and persistent keepalives.
func TestTimersSession(t *testing.T) {
	s := newPair(t, Key{}, nil)
	s.handshake(t)
	openOne(s.b, sealOne(t, s.a, s.pa, nil), addrA)
	tm := DefaultTimers

	// a sends, b receives: b owes a keepalive after KeepaliveTimeout.
	openOne(s.b, sealOne(t, s.a, s.pa, ipv4(40, 1)), addrA)
	tick(t, s.pb, 0)
	s.clk.Add(tm.KeepaliveTimeout)
	tick(t, s.pb, SendKeepalive)
	openOne(s.a, sealOne(t, s.b, s.pb, nil), addrB)
	tick(t, s.pb, 0)
	// a heard nothing but a keepalive: a new handshake after
	// KeepaliveTimeout + RekeyTimeout of silence since its data.
	s.clk.Add(tm.KeepaliveTimeout + tm.RekeyTimeout - time.Second)
	sealOne(t, s.a, s.pa, ipv4(40, 2))
	tick(t, s.pa, 0)
	s.clk.Add(tm.KeepaliveTimeout + tm.RekeyTimeout)
	tick(t, s.pa, SendInitiation)
	tick(t, s.pa, SendInitiation) // until it is sent
	s.a.AppendInitiation(nil, s.pa)
	tick(t, s.pa, 0)

	// RekeyAfterTime: the initiator's Seal asks for a handshake; the
	// responder's does not.
	s = newPair(t, Key{}, nil)
	s.handshake(t)
	openOne(s.b, sealOne(t, s.a, s.pa, nil), addrA)
	s.clk.Add(tm.RekeyAfterTime)
	sealOne(t, s.b, s.pb, nil)
	tick(t, s.pb, 0)
	old := sealOne(t, s.a, s.pa, ipv4(40, 3))
	tick(t, s.pa, SendInitiation)
	s.clk.Add(time.Second)
	s.handshake(t)
	openOne(s.b, sealOne(t, s.a, s.pa, nil), addrA)
	if got := openOne(s.b, old, addrA); got.Reason != OK || s.pb.previous.Load() == nil {
		t.Fatalf("a message of the previous keypair: %v", got.Reason)
	}
	// RekeyAfterMessages, once RekeyTimeout after the last initiation.
	s.pa.current.Load().sendCounter.Store(tm.RekeyAfterMessages - 1)
	sealOne(t, s.a, s.pa, nil)
	tick(t, s.pa, 0)
	s.clk.Add(tm.RekeyTimeout)
	tick(t, s.pa, SendInitiation)

	// RejectAfterTime: the keypairs go; Seal has none, Open refuses.
	late := sealOne(t, s.a, s.pa, ipv4(40, 4))
	s.clk.Add(tm.RejectAfterTime)
	s.pa.Tick()
	s.pb.Tick()
	if s.pa.current.Load() != nil || s.pb.current.Load() != nil || s.pb.previous.Load() != nil || len(s.a.indices) != 0 || len(s.b.indices) != 0 {
		t.Fatal("keypairs kept after RejectAfterTime")
	}
	if got := openOne(s.b, late, addrA); got.Reason != UnknownIndex {
		t.Fatalf("a message of a dropped keypair: %v", got.Reason)
	}

	// Persistent keepalive.
	s = newPair(t, Key{}, nil)
	s.pa.cfg.PersistentKeepalive = 25 * time.Second
	s.handshake(t)
	sealOne(t, s.a, s.pa, nil)
	if next := tick(t, s.pa, 0); next.Sub(s.clk.Now()) != 25*time.Second {
		t.Fatalf("next Tick in %v", next.Sub(s.clk.Now()))
	}
	s.clk.Add(25 * time.Second)
	tick(t, s.pa, SendKeepalive)
}

// TestRoaming: the endpoint follows the source of the latest
// authenticated message, not that of a refused one.
func TestRoaming(t *testing.T) {
	s := newPair(t, Key{}, nil)
	s.handshake(t)
	moved := netipAddrPort(addrA, 7)
	msg := sealOne(t, s.a, s.pa, nil)
	forged := append([]byte(nil), msg...)
	forged[len(forged)-1] ^= 1
	openOne(s.b, forged, moved)
	if s.pb.Endpoint() != addrA {
		t.Fatal("roamed on a forged message")
	}
	openOne(s.b, msg, moved)
	if s.pb.Endpoint() != moved {
		t.Fatal("did not roam")
	}
}
