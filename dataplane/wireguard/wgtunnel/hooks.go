package wgtunnel

import (
	"net/netip"
	"sync/atomic"

	"github.com/gsoplane/gsoplane/dataplane/udp"
	"github.com/gsoplane/gsoplane/dataplane/wireguard"
)

// slots are the tunnel's peers as the hooks see them: slots[i] is the
// WireGuard peer of the tunnel's peer i (nil: a free slot), counters[i]
// its counters, and index the other way. A table is immutable; the
// device swaps in a new one.
type slots struct {
	peers    []*wireguard.Peer
	counters []*peerCounters
	index    map[*wireguard.Peer]int
}

// newSlots returns the table of peers, each with counters of its own.
func newSlots(peers []*wireguard.Peer) *slots {
	s := &slots{peers: peers, counters: make([]*peerCounters, len(peers)), index: make(map[*wireguard.Peer]int, len(peers))}
	for i, p := range peers {
		if p != nil {
			s.index[p] = i
			s.counters[i] = new(peerCounters)
		}
	}
	return s
}

// keep gives the table's peers the counters they have in counters, and
// returns the table.
func (s *slots) keep(counters map[*wireguard.Peer]*peerCounters) *slots {
	for i, p := range s.peers {
		if c := counters[p]; c != nil {
			s.counters[i] = c
		}
	}
	return s
}

// of returns the counters of p, or nil.
func (s *slots) of(p *wireguard.Peer) *peerCounters {
	if i, ok := s.index[p]; ok {
		return s.counters[i]
	}
	return nil
}

// counter returns the counters of tunnel peer i, or nil.
func (s *slots) counter(i int) *peerCounters {
	if i < 0 || i >= len(s.counters) {
		return nil
	}
	return s.counters[i]
}

// peer returns the WireGuard peer of tunnel peer i, or nil.
func (s *slots) peer(i int) *wireguard.Peer {
	if i < 0 || i >= len(s.peers) {
		return nil
	}
	return s.peers[i]
}

// placePeers returns the slots of peers: each peer in old keeps its
// place, a removed one leaves it free (nil, dropped at the end), a new
// one takes the first free place or goes last.
func placePeers(old, peers []*wireguard.Peer) []*wireguard.Peer {
	keep := make(map[*wireguard.Peer]bool, len(peers))
	for _, p := range peers {
		keep[p] = true
	}
	slotted := make([]*wireguard.Peer, len(old))
	for i, p := range old {
		if keep[p] {
			slotted[i] = p
			delete(keep, p)
		}
	}
	free := 0
	for _, p := range peers {
		if !keep[p] {
			continue
		}
		for free < len(slotted) && slotted[free] != nil {
			free++
		}
		if free == len(slotted) {
			slotted = append(slotted, nil)
		}
		slotted[free] = p
	}
	for len(slotted) > 0 && slotted[len(slotted)-1] == nil {
		slotted = slotted[:len(slotted)-1]
	}
	return slotted
}

// hooks are the tunnel's Seal and Open: the device's batch Seal and
// Open on the datagrams in place, with the tunnel's peer indices mapped
// to WireGuard peers (slots). They do not allocate.
type hooks struct {
	dev   *wireguard.Device
	slots atomic.Pointer[slots]
	// scratch are the batches' Packets, one per goroutine that may call
	// a hook at once (each forwarder seals, the return path opens).
	scratch chan *[]wireguard.Packet

	noKey    atomic.Uint64 // packets dropped by Seal for want of a keypair
	unsealed atomic.Uint64 // packets Seal refused for another reason
	refused  reasons       // data messages Open refused that named no peer
}

// newHooks returns the hooks of dev for callers goroutines at once.
func newHooks(dev *wireguard.Device, callers int) *hooks {
	h := &hooks{dev: dev, scratch: make(chan *[]wireguard.Packet, callers)}
	for range callers {
		h.scratch <- new([]wireguard.Packet)
	}
	h.slots.Store(newSlots(nil))
	return h
}

// packets returns a scratch batch of n packets (grown the first time a
// batch is that long); put it back with done.
func (h *hooks) packets(n int) *[]wireguard.Packet {
	s := <-h.scratch
	if cap(*s) < n {
		*s = make([]wireguard.Packet, n)
	}
	*s = (*s)[:n]
	return s
}

// done clears the scratch batch's references and puts it back.
func (h *hooks) done(s *[]wireguard.Packet) {
	clear(*s)
	h.scratch <- s
}

// seal is the tunnel's Seal: each datagram is sealed for its peer and
// left at its sealed length (padding included); one that cannot be is
// emptied, which drops it from the batch: a copy of one for a peer
// without a keypair or whose keypair is out of counters (the device asks
// for a handshake), or with packets staged already, is staged until the
// handshake (Peer.Stage).
func (h *hooks) seal(dgrams [][]byte, peers []int) {
	tab := h.slots.Load()
	s := h.packets(len(dgrams))
	pkts := *s
	for i, b := range dgrams {
		// The tag's room is the sealer's: Buf ends with the packet.
		pkts[i] = wireguard.Packet{Buf: b[:max(len(b)-wireguard.TagLen, 0)], Peer: tab.peer(peers[i])}
	}
	h.dev.Seal(pkts)
	for i := range pkts {
		r := pkts[i].Reason
		switch r {
		case wireguard.OK:
			dgrams[i] = pkts[i].Buf
			continue
		case wireguard.NoKey:
			h.noKey.Add(1)
		case wireguard.Queued:
		default:
			h.unsealed.Add(1)
		}
		if r == wireguard.NoKey || r == wireguard.Queued || r == wireguard.Expired { // Expired: out of counters, a handshake is due
			pkts[i].Peer.Stage(pkts[i].Buf)
		} else if c := tab.counter(peers[i]); c != nil {
			c.drops.add(r)
		}
		dgrams[i] = dgrams[i][:0]
	}
	h.done(s)
}

// open is the tunnel's Open: data messages are opened in place and
// named for the peer their receiver index belongs to (so that a peer
// roams), its place looked up once per run of datagrams from one peer;
// keepalives and handshake messages are Control.
func (h *hooks) open(dgrams [][]byte, peers []int, verdicts []udp.Verdict) {
	tab := h.slots.Load()
	s := h.packets(len(dgrams))
	pkts := *s
	for i, b := range dgrams {
		pkts[i] = wireguard.Packet{Buf: b}
	}
	h.dev.Open(pkts)
	var last *wireguard.Peer
	slot, placed := 0, false
	for i := range pkts {
		verdicts[i] = verdict(pkts[i].Reason, dgrams[i])
		p := pkts[i].Peer
		if p == nil {
			continue
		}
		if p != last {
			last = p
			slot, placed = tab.index[p]
		}
		if placed {
			peers[i] = slot
		} else if verdicts[i] == udp.Accept {
			verdicts[i] = udp.DropAuth // a peer removed meanwhile
		}
	}
	h.countDrops(tab, pkts, peers, verdicts)
	h.done(s)
}

// countDrops counts the datagrams open refused by reason: for their
// peer if they authenticated as one in the table, else for the device.
func (h *hooks) countDrops(tab *slots, pkts []wireguard.Packet, peers []int, verdicts []udp.Verdict) {
	for i := range pkts {
		if verdicts[i] == udp.Accept || verdicts[i] == udp.Control {
			continue
		}
		r := pkts[i].Reason
		if r == wireguard.OK {
			r = wireguard.UnknownPeer // authentic, from a peer removed meanwhile
		}
		if p := pkts[i].Peer; p != nil && tab.peer(peers[i]) == p {
			tab.counters[peers[i]].drops.add(r)
		} else {
			h.refused.add(r)
		}
	}
}

// verdict is what the tunnel does with a datagram Open left with r.
func verdict(r wireguard.Reason, b []byte) udp.Verdict {
	switch r {
	case wireguard.OK:
		return udp.Accept
	case wireguard.Keepalive:
		return udp.Control
	case wireguard.UnknownType:
		if t := wireguard.Type(b); t != 0 && t != wireguard.TypeData {
			return udp.Control
		}
		return udp.DropMalformed
	case wireguard.Replay:
		return udp.DropReplay
	case wireguard.Auth, wireguard.UnknownIndex, wireguard.Expired:
		return udp.DropAuth
	}
	return udp.DropMalformed
}

// placeholder is the endpoint of tunnel peer i whose WireGuard peer has
// none yet (the tunnel wants one for each): an address of the IPv6
// discard-only prefix (100::/64), never sent to, since nothing is sealed
// for a peer before a handshake tells its endpoint.
func placeholder(i int) netip.AddrPort {
	return netip.AddrPortFrom(discard, uint16(i+1))
}

var discard = netip.MustParseAddr("100::")

// isPlaceholder reports whether ep is a placeholder endpoint.
func isPlaceholder(ep netip.AddrPort) bool { return ep.Addr() == discard }
