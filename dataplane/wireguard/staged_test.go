package wireguard

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
)

// stage seals n packets (sequence numbers from first in their payload)
// from s.a to s.pa and stages them: Seal refuses the first with want,
// the others with Queued (behind it).
func stage(t *testing.T, s *pair, first, n int, want Reason) {
	t.Helper()
	for i := first; i < first+n; i++ {
		pkts := []Packet{{Buf: datagram(seqPacket(i)), Peer: s.pa}}
		s.a.Seal(pkts)
		if pkts[0].Reason != want && (i == first || pkts[0].Reason != Queued) {
			t.Fatalf("packet %d: %v, want %v", i, pkts[0].Reason, want)
		}
		if !s.pa.Stage(pkts[0].Buf) {
			t.Fatalf("packet %d not staged", i)
		}
	}
}

// seqPacket is an IPv4 packet of 100 bytes carrying sequence number i.
func seqPacket(i int) []byte {
	b := ipv4(100, byte(i))
	binary.BigEndian.PutUint32(b[20:], uint32(i))
	return b
}

// TestStaged: packets for a peer without a keypair are staged, the
// oldest dropped (counted) beyond StagedPackets; packets sealed while
// some are staged go behind them (Queued); once a handshake completes,
// Tick asks for SendStaged, which sends them in order under the new
// keypair, and Seal seals again.
func TestStaged(t *testing.T) {
	s := newPair(t, Key{}, nil)
	const extra = 5
	stage(t, s, 0, StagedPackets+extra, NoKey)
	if got, st := s.pa.Staged(), s.a.StagedStats(); got != StagedPackets || st != (StagedStats{Staged: StagedPackets + extra, Full: extra}) {
		t.Fatalf("%d staged, %+v", got, st)
	}
	tick(t, s.pa, SendInitiation)
	s.handshake(t)
	stage(t, s, StagedPackets+extra, 1, Queued) // behind them, the oldest dropped
	act, _ := s.pa.Tick()
	if act&SendStaged == 0 {
		t.Fatalf("Tick: %v, no SendStaged with a keypair and packets staged", act)
	}
	var got []Packet
	s.a.SendStaged(s.pa, func(to netip.AddrPort, msg []byte) {
		if to != addrB {
			t.Errorf("staged packet sent to %v", to)
		}
		got = append(got, openOne(s.b, msg, addrA))
	})
	if len(got) != StagedPackets {
		t.Fatalf("%d staged packets sent, want %d", len(got), StagedPackets)
	}
	for k, pkt := range got {
		i := extra + 1 + k
		if pkt.Reason != OK || !bytes.Equal(pkt.Buf[HeaderLen:], seqPacket(i)) {
			t.Fatalf("staged packet %d: %v, not packet %d", k, pkt.Reason, i)
		}
	}
	if st := s.a.StagedStats(); s.pa.Staged() != 0 || st != (StagedStats{Staged: StagedPackets + extra + 1, Sent: StagedPackets, Full: extra + 1}) {
		t.Fatalf("%d staged, %+v", s.pa.Staged(), st)
	}
	if act, _ := s.pa.Tick(); act&SendStaged != 0 {
		t.Fatal("SendStaged asked for with nothing staged")
	}
	sealOne(t, s.a, s.pa, seqPacket(0))
}

// TestStagedKept: SendStaged without a keypair sends nothing and keeps
// the packets; a responder's keypair sends them once the initiator's
// first message confirms it.
func TestStagedKept(t *testing.T) {
	s := newPair(t, Key{}, nil).swap() // a is the responder
	stage(t, s, 0, 3, NoKey)
	s.a.SendStaged(s.pa, func(netip.AddrPort, []byte) { t.Fatal("sent without a keypair") })
	s.swap().handshake(t) // b initiates: a's keypair is next
	if act, _ := s.pa.Tick(); act&SendStaged != 0 {
		t.Fatal("SendStaged asked for before the responder's keypair is confirmed")
	}
	if p := openOne(s.a, sealOne(t, s.b, s.pb, nil), addrB); p.Reason != Keepalive {
		t.Fatalf("the initiator's keepalive: %v", p.Reason)
	}
	if act, _ := s.pa.Tick(); act&SendStaged == 0 {
		t.Fatal("no SendStaged once the keypair is confirmed")
	}
	n := 0
	s.a.SendStaged(s.pa, func(_ netip.AddrPort, msg []byte) {
		if p := openOne(s.b, msg, addrA); p.Reason != OK || !bytes.Equal(p.Buf[HeaderLen:], seqPacket(n)) {
			t.Fatalf("staged packet %d: %v", n, p.Reason)
		}
		n++
	})
	if n != 3 {
		t.Fatalf("%d staged packets sent, want 3", n)
	}
}

// TestStagedCleared: staged packets are dropped (counted) when the
// handshake is given up and when the peer is removed, and a removed
// peer stages nothing.
func TestStagedCleared(t *testing.T) {
	s := newPair(t, Key{}, nil)
	stage(t, s, 0, 4, NoKey)
	tick(t, s.pa, SendInitiation)
	s.a.AppendInitiation(nil, s.pa)
	s.clk.Add(DefaultTimers.RekeyAttemptTime + DefaultTimers.RekeyTimeout + DefaultTimers.RekeyJitter)
	s.pa.Tick() // gives up
	if st := s.a.StagedStats(); s.pa.Staged() != 0 || st.Cleared != 4 {
		t.Fatalf("after giving up: %d staged, %+v", s.pa.Staged(), st)
	}
	stage(t, s, 0, 2, NoKey)
	s.a.RemovePeer(s.pa)
	if st := s.a.StagedStats(); s.pa.Staged() != 0 || st.Cleared != 6 {
		t.Fatalf("after removing the peer: %d staged, %+v", s.pa.Staged(), st)
	}
	if s.pa.Stage(datagram(seqPacket(0))) || s.pa.Staged() != 0 {
		t.Fatal("a removed peer staged a packet")
	}
}

// TestInitiationNotifies: an initiation asks for a Tick (Config.Notify),
// at which its retry is due sooner than the Tick before it said.
func TestInitiationNotifies(t *testing.T) {
	s := newPair(t, Key{}, nil)
	notified := 0
	s.a.notify = func(*Peer) { notified++ }
	s.pa.Tick()
	if _, err := s.a.AppendInitiation(nil, s.pa); err != nil {
		t.Fatal(err)
	}
	if notified != 1 {
		t.Fatalf("notified %d times after an initiation", notified)
	}
	if _, next := s.pa.Tick(); next.Sub(s.clk.Now()) > DefaultTimers.RekeyTimeout+DefaultTimers.RekeyJitter {
		t.Fatalf("next Tick in %v, after the retry is due", next.Sub(s.clk.Now()))
	}
}
