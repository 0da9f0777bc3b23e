package wireguard

import (
	"net/netip"
	"sync"
	"sync/atomic"
)

// StagedPackets is how many packets a peer keeps while it waits for a
// keypair (Peer.Stage), the oldest dropped for a new one when full: 128,
// as Linux's WireGuard keeps per peer (MAX_STAGED_PACKETS) and
// wireguard-go too (QueueStagedSize). A handshake takes a round trip, so
// that a sender's first packets (a SYN, a DNS query, a ping) and a
// burst's last ones wait instead of being lost; more would only delay
// the newest behind packets their senders have given up on.
const StagedPackets = 128

// StagedStats count the packets of the peers' staged queues.
type StagedStats struct {
	Staged uint64 // packets staged (Peer.Stage)
	Sent   uint64 // staged packets sealed and handed on (Device.SendStaged)
	// Full counts the oldest staged packets dropped for newer ones, the
	// queue full; Cleared those dropped with their peer's handshake
	// given up (after Timers.RekeyAttemptTime) or the peer removed.
	Full, Cleared uint64
}

type stagedCounters struct{ staged, sent, full, cleared atomic.Uint64 }

// StagedStats returns the counters of the device's staged queues.
func (d *Device) StagedStats() StagedStats {
	c := &d.stagedStats
	return StagedStats{Staged: c.staged.Load(), Sent: c.sent.Load(), Full: c.full.Load(), Cleared: c.cleared.Load()}
}

// stagedQueue is a peer's packets waiting for a keypair, oldest first,
// in a ring of StagedPackets buffers (allocated when first staged,
// released when sent or dropped).
type stagedQueue struct {
	n     atomic.Int32 // packets queued; read without mu by Seal
	mu    sync.Mutex
	bufs  [][]byte
	head  int
	batch []Packet // SendStaged's, kept for the next
	gone  bool     // the peer was removed: nothing more is staged
}

// Staged returns how many packets wait for p's keypair.
func (p *Peer) Staged() int { return int(p.staged.n.Load()) }

// Stage keeps a copy of buf (as Seal takes it: HeaderLen bytes of room,
// then the inner packet; the capacity beyond, up to 15+TagLen bytes, is
// kept for the padding and the tag) until p has a keypair: the packets
// Seal refused with NoKey or Queued. The oldest is dropped (counted in
// StagedStats.Full) when StagedPackets wait. It reports false, keeping
// nothing, for a buf shorter than HeaderLen or a peer removed.
func (p *Peer) Stage(buf []byte) bool {
	if len(buf) < HeaderLen {
		return false
	}
	c := &p.dev.stagedStats
	q := &p.staged
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.gone {
		return false
	}
	if q.bufs == nil {
		q.bufs = make([][]byte, StagedPackets)
	}
	if int(q.n.Load()) == StagedPackets {
		q.bufs[q.head] = nil
		q.head = (q.head + 1) % StagedPackets
		q.n.Add(-1)
		c.full.Add(1)
	}
	b := make([]byte, len(buf), len(buf)+min(cap(buf)-len(buf), 15+TagLen))
	copy(b[HeaderLen:], buf[HeaderLen:])
	q.bufs[(q.head+int(q.n.Load()))%StagedPackets] = b
	q.n.Add(1)
	c.staged.Add(1)
	return true
}

// SendStaged seals p's staged packets, oldest first, with its current
// keypair and hands each data message to send with p's endpoint; until
// they are all sent, Seal refuses p's new packets with Queued, so that
// they are staged behind. Without a current keypair it sends nothing
// and keeps them; from the first one the keypair cannot seal (out of
// counters) it keeps the rest, for the next keypair. Tick asks for it
// (SendStaged). send must not call Stage or SendStaged for p.
func (d *Device) SendStaged(p *Peer, send func(to netip.AddrPort, msg []byte)) {
	q := &p.staged
	if q.n.Load() == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	n := int(q.n.Load())
	batch := q.batch[:0]
	for i := range n {
		batch = append(batch, Packet{Buf: q.bufs[(q.head+i)%StagedPackets], Peer: p})
	}
	d.sealKeyed(batch, p, d.mono(d.now()))
	sent := 0
	for sent < n && batch[sent].Reason == OK {
		d.stagedStats.sent.Add(1)
		send(batch[sent].Addr, batch[sent].Buf)
		q.bufs[(q.head+sent)%StagedPackets] = nil
		sent++
	}
	q.head = (q.head + sent) % StagedPackets
	q.n.Add(int32(-sent))
	if sent == n {
		q.bufs, q.head = nil, 0
	}
	clear(batch)
	q.batch = batch[:0]
}

// clearStaged drops p's staged packets (counted in StagedStats.Cleared);
// for good if p is removed (gone).
func (p *Peer) clearStaged(gone bool) {
	q := &p.staged
	q.mu.Lock()
	q.gone = q.gone || gone
	if n := q.n.Swap(0); n > 0 {
		p.dev.stagedStats.cleared.Add(uint64(n))
	}
	q.bufs, q.head = nil, 0
	q.mu.Unlock()
}
