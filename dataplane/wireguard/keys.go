package wireguard

import (
	"crypto/cipher"
	"encoding/binary"
	"sync/atomic"

	"github.com/gsoplane/gsoplane/internal/chachapoly"
	"github.com/gsoplane/gsoplane/internal/iphdr"
)

// A keypair is the transport keys one handshake derived, with their
// counters. Its keys live only in the AEADs, which are immutable: an
// expired keypair is unlinked from its peer and the index table, and
// every use checks its age, so that no message is sealed or opened with
// it after Timers.RejectAfterTime.
type keypair struct {
	send, recv  cipher.AEAD
	sendCounter atomic.Uint64 // the next counter to send
	replay      replayWindow
	created     int64 // mono
	initiator   bool
	localIndex  uint32 // the receiver index of messages to us
	remoteIndex uint32 // the receiver index of messages to the peer
}

// newKeypair makes a keypair of the keys a handshake derived and zeroes
// them.
func newKeypair(send, recv *[KeyLen]byte, initiator bool, local, remote uint32, m int64) *keypair {
	s, _ := chachapoly.New(send[:])
	r, _ := chachapoly.New(recv[:])
	clear(send[:])
	clear(recv[:])
	return &keypair{send: s, recv: r, created: m, initiator: initiator, localIndex: local, remoteIndex: remote}
}

// The nonce of a data message is its counter, little-endian, after four
// zero bytes. Seal and Open build it in the message's header, at
// nonceOff, over the receiver index, which they write after sealing (or
// have read before opening).
const nonceOff = offCounter - 4

// Seal seals a batch of inner packets in place into data messages (see
// Packet), to pkts[i].Peer, with its current keypair, looked up once per
// run of packets to one peer, whose counters are taken for the run at
// once. A packet that cannot be sealed gets a Reason (NoKey: no current
// keypair, and a handshake is asked for; Queued: the peer has packets
// staged, to be sent first; Expired: out of counters; NoRoom;
// UnknownPeer: no Peer) and is to be dropped, or staged (Peer.Stage) for
// NoKey and Queued.
// It does not allocate and is safe to call from several goroutines.
func (d *Device) Seal(pkts []Packet) {
	m := d.mono(d.now())
	for i := 0; i < len(pkts); {
		j := i + 1
		for j < len(pkts) && pkts[j].Peer == pkts[i].Peer {
			j++
		}
		d.sealRun(pkts[i:j], m)
		i = j
	}
}

func (d *Device) sealRun(run []Packet, m int64) {
	p := run[0].Peer
	var r Reason
	switch {
	case p == nil:
		r = UnknownPeer
	case p.staged.n.Load() > 0: // behind the staged packets, in order
		r = Queued
		p.kick()
	default:
		d.sealKeyed(run, p, m)
		return
	}
	for i := range run {
		run[i].Reason = r
	}
}

// sealKeyed seals a run of packets to p with its current keypair.
func (d *Device) sealKeyed(run []Packet, p *Peer, m int64) {
	t := &d.timers
	ep := p.Endpoint()
	for i := range run {
		run[i].Addr, run[i].Reason = ep, NoKey
	}
	kp := p.current.Load()
	if kp == nil || m-kp.created >= int64(t.RejectAfterTime) {
		p.wantHandshake()
		return
	}
	first, n := kp.counters(uint64(len(run)), t.RejectAfterMessages)
	sent, data := 0, false
	for i := range run {
		pkt := &run[i]
		if uint64(i) >= n {
			pkt.Reason = Expired
			continue
		}
		pkt.Reason = seal(kp, pkt, first+uint64(i))
		if pkt.Reason == OK {
			sent += len(pkt.Buf)
			data = data || len(pkt.Buf) > MinDataSize
		}
	}
	if sent > 0 {
		p.sentAuth(m)
		p.txBytes.Add(uint64(sent))
	}
	if data {
		p.sentData(m)
	}
	if first+n >= t.RekeyAfterMessages || kp.initiator && m-kp.created >= int64(t.RekeyAfterTime) {
		p.wantHandshake()
	}
}

// counters takes up to n counters below limit from kp, in one piece:
// the first, and how many.
func (kp *keypair) counters(n, limit uint64) (first, taken uint64) {
	for {
		first = kp.sendCounter.Load()
		taken = min(n, limit-min(first, limit))
		if taken == 0 || kp.sendCounter.CompareAndSwap(first, first+taken) {
			return first, taken
		}
	}
}

// seal seals one packet with counter c: the inner packet padded with
// zeros to a multiple of 16 bytes (as far as the capacity goes), then
// the tag, behind the header.
func seal(kp *keypair, pkt *Packet, c uint64) Reason {
	b := pkt.Buf
	if len(b) < HeaderLen {
		return NoRoom
	}
	n := len(b) - HeaderLen
	padded := min((n+15)&^15, cap(b)-HeaderLen-TagLen)
	if padded < n {
		return NoRoom
	}
	b = b[:HeaderLen+padded+TagLen]
	clear(b[HeaderLen+n : HeaderLen+padded])
	clear(b[nonceOff:offCounter])
	binary.LittleEndian.PutUint64(b[offCounter:], c)
	kp.send.Seal(b[HeaderLen:HeaderLen], b[nonceOff:HeaderLen], b[HeaderLen:HeaderLen+padded], nil)
	putType(b, TypeData)
	putIndex(b, offReceiver, kp.remoteIndex)
	pkt.Buf = b
	return OK
}

// Open opens a batch of data messages in place (see Packet): each is
// authenticated with the keypair its receiver index names, looked up
// once per run of messages with one index, and checked against the
// keypair's replay window. An accepted message's peer is set in
// pkts[i].Peer, its endpoint roams to pkts[i].Addr, and a responder's
// next keypair becomes current. A message refused gets a Reason; a
// keepalive gets Keepalive. It does not allocate and is safe to call
// from several goroutines.
func (d *Device) Open(pkts []Packet) {
	m := d.mono(d.now())
	for i := 0; i < len(pkts); {
		b := pkts[i].Buf
		pkts[i].Peer = nil
		if r := checkData(b); r != OK {
			pkts[i].Reason = r
			i++
			continue
		}
		j := i + 1
		for j < len(pkts) && checkData(pkts[j].Buf) == OK && index(pkts[j].Buf, offReceiver) == index(b, offReceiver) {
			pkts[j].Peer = nil
			j++
		}
		d.openRun(pkts[i:j], m)
		i = j
	}
}

// checkData checks a data message's length and type.
func checkData(b []byte) Reason {
	switch {
	case messageType(b) != TypeData:
		return UnknownType
	case len(b) < MinDataSize:
		return Short
	}
	return OK
}

func (d *Device) openRun(run []Packet, m int64) {
	t := &d.timers
	e := d.lookup(index(run[0].Buf, offReceiver))
	kp := e.kp
	var r Reason
	switch {
	case kp == nil:
		r = UnknownIndex
	case m-kp.created >= int64(t.RejectAfterTime):
		r = Expired
	}
	if r != OK {
		for i := range run {
			run[i].Reason = r
		}
		return
	}
	// Refuse replays before the work of decrypting, then decrypt, then
	// mark the counters of those authentic (again refusing any that
	// another goroutine or an earlier copy in the run marked meanwhile).
	kp.replay.mu.Lock()
	for i := range run {
		c := binary.LittleEndian.Uint64(run[i].Buf[offCounter:])
		run[i].Reason = OK
		if c >= t.RejectAfterMessages || !kp.replay.fresh(c) {
			run[i].Reason = Replay
		}
	}
	kp.replay.mu.Unlock()
	for i := range run {
		if run[i].Reason == OK {
			run[i].Reason = open(kp, run[i].Buf)
		}
	}
	authentic, opened, data := -1, 0, false
	kp.replay.mu.Lock()
	for i := range run {
		pkt := &run[i]
		if pkt.Reason != OK {
			continue
		}
		if !kp.replay.accept(binary.LittleEndian.Uint64(pkt.Buf[offCounter:])) {
			pkt.Reason = Replay
			continue
		}
		authentic = i
		opened += len(pkt.Buf)
		pkt.Peer = e.peer
		pkt.Reason = inner(pkt)
		data = data || pkt.Reason != Keepalive
	}
	kp.replay.mu.Unlock()
	if authentic < 0 {
		return
	}
	p := e.peer
	p.roam(run[authentic].Addr)
	p.receivedAuth()
	p.rxBytes.Add(uint64(opened))
	if data {
		p.receivedData(m)
	}
	if p.next.Load() == kp {
		p.confirm(kp)
	}
	if kp.initiator && m-kp.created >= int64(t.RejectAfterTime-t.KeepaliveTimeout-t.RekeyTimeout) {
		p.wantHandshake()
	}
}

// open authenticates and decrypts one message in place.
func open(kp *keypair, b []byte) Reason {
	clear(b[nonceOff:offCounter])
	if _, err := kp.recv.Open(b[HeaderLen:HeaderLen], b[nonceOff:HeaderLen], b[HeaderLen:], nil); err != nil {
		return Auth
	}
	return OK
}

// inner cuts an opened message to its inner packet's length, read from
// its IP header.
func inner(pkt *Packet) Reason {
	plain := pkt.Buf[HeaderLen : len(pkt.Buf)-TagLen]
	if len(plain) == 0 {
		pkt.Buf = pkt.Buf[:HeaderLen]
		return Keepalive
	}
	n, ok := iphdr.Len(plain)
	if !ok || n > len(plain) || n < iphdr.IPv4Len {
		return Malformed
	}
	pkt.Buf = pkt.Buf[:HeaderLen+n]
	return OK
}
