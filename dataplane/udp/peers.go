package udp

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"

	"github.com/gsoplane/gsoplane/dataplane/frame"
)

// A Peer is one remote end of a tunnel with several peers: its UDP
// endpoint and the inner prefixes routed to it (WireGuard's AllowedIPs).
type Peer struct {
	// Endpoint is the peer's UDP address and port. It is fixed: a
	// datagram from any other address is not the peer's (no roaming).
	Endpoint netip.AddrPort
	// Allowed are the inner prefixes behind the peer: an inner packet
	// goes to the peer whose prefix matches its destination longest,
	// and a packet from the peer is accepted only if its source routes
	// back to the peer the same way.
	Allowed []netip.Prefix
}

// ErrInvalidPeers is wrapped by NewPeers's errors, each a *PeerError
// (which wraps frame.ErrInvalidConfig too).
var ErrInvalidPeers = errors.New("invalid peers")

// A PeerErrorKind is what is wrong with a peer.
type PeerErrorKind int

// The kinds of PeerError.
const (
	NoPeers           PeerErrorKind = iota + 1 // the list is empty
	BadEndpoint                                // not an address and port a datagram can go to
	DuplicateEndpoint                          // the endpoint of an earlier peer too
	BadPrefix                                  // an invalid prefix, or one with bits set past its length
	DuplicatePrefix                            // a prefix given before, to this peer or another
)

// PeerError says which peer NewPeers refused and why.
type PeerError struct {
	Kind     PeerErrorKind
	Peer     int            // the peer's index; -1 for NoPeers
	Other    int            // the earlier peer of a duplicate; -1 otherwise
	Endpoint netip.AddrPort // the endpoint of BadEndpoint and DuplicateEndpoint
	Prefix   netip.Prefix   // the prefix of BadPrefix and DuplicatePrefix
}

func (e *PeerError) Error() string {
	var what string
	switch e.Kind {
	case NoPeers:
		return "udp: " + ErrInvalidPeers.Error() + ": none"
	case BadEndpoint:
		what = fmt.Sprintf("endpoint %v is not a specified address and a port", e.Endpoint)
	case DuplicateEndpoint:
		what = fmt.Sprintf("endpoint %v is peer %d's too", e.Endpoint, e.Other)
	case BadPrefix:
		what = fmt.Sprintf("allowed prefix %v is not valid", e.Prefix)
		if e.Prefix.IsValid() {
			what = fmt.Sprintf("allowed prefix %v has bits set past its length: %v?", e.Prefix, e.Prefix.Masked())
		}
	case DuplicatePrefix:
		what = fmt.Sprintf("allowed prefix %v is peer %d's too", e.Prefix, e.Other)
		if e.Other == e.Peer {
			what = fmt.Sprintf("allowed prefix %v given twice", e.Prefix)
		}
	}
	return fmt.Sprintf("udp: %v: peer %d: %s", ErrInvalidPeers, e.Peer, what)
}

// Unwrap returns ErrInvalidPeers and frame.ErrInvalidConfig.
func (e *PeerError) Unwrap() []error { return []error{ErrInvalidPeers, frame.ErrInvalidConfig} }

// Peers is an immutable table of peers for the cryptokey routing of a
// tunnel with several peers, as WireGuard's: an inner packet is sent to
// the peer whose Allowed prefix matches its destination longest (Route),
// a datagram is the peer's whose endpoint it comes from (ByEndpoint),
// and the inner packet it carries must come from an address that routes
// back to that peer (Allows). Give one table to the Sinks and Receivers
// of all of a tunnel's queues: it counts each peer's traffic (Stats).
// Its methods are safe for concurrent use and do not allocate, but for
// Peer and Stats.
type Peers struct {
	peers     []Peer
	v4, v6    lpm
	endpoints map[netip.AddrPort]int // without zone, IPv4 unmapped
	counters  []peerCounters
}

// lpm is a longest-prefix match over one family's prefixes: a map per
// prefix length, longest first, from masked address to peer. A lookup
// costs one map lookup per distinct prefix length in the table (a few in
// practice: /32s and a default route, say), whatever the number of
// peers and prefixes.
type lpm struct {
	bits  []int
	peers []map[netip.Addr]int
}

func (t *lpm) add(p netip.Prefix, peer int) {
	i, found := slices.BinarySearchFunc(t.bits, p.Bits(), func(a, b int) int { return cmp.Compare(b, a) })
	if !found {
		t.bits = slices.Insert(t.bits, i, p.Bits())
		t.peers = slices.Insert(t.peers, i, map[netip.Addr]int{})
	}
	t.peers[i][p.Addr()] = peer
}

func (t *lpm) lookup(a netip.Addr) (int, bool) {
	for i, bits := range t.bits {
		p, err := a.Prefix(bits)
		if err != nil {
			continue
		}
		if peer, ok := t.peers[i][p.Addr()]; ok {
			return peer, true
		}
	}
	return -1, false
}

// peerCounters are a peer's counters, a cache line of their own: the
// queues' sinks and receivers add to them concurrently.
type peerCounters struct {
	sentDatagrams, sentBytes         atomic.Uint64
	receivedDatagrams, receivedBytes atomic.Uint64
	gsoRefused, reprobes             atomic.Uint64
	_                                [16]byte
}

// PeerStats is a snapshot of one peer's counters, like the transfer line
// of `wg show`.
type PeerStats struct {
	Endpoint          netip.AddrPort
	SentDatagrams     uint64 // datagrams the kernel accepted for the peer
	SentBytes         uint64 // their UDP payload bytes, headroom and tailroom included
	ReceivedDatagrams uint64 // datagrams from the peer handed on: opened, from an allowed source
	ReceivedBytes     uint64 // their UDP payload bytes
	GSORefused        uint64 // UDP_SEGMENT messages to the peer the kernel refused (SinkStats.MsgSize, SinkStats.GSORefused)
	Reprobes          uint64 // times UDP_SEGMENT was tried again for the peer after that (SinkStats.Reprobes)
}

// NewPeers checks peers and builds their table. Each endpoint must be a
// specified address with a port (an IPv4-mapped IPv6 one is taken as
// IPv4) and belong to one peer; each prefix must be valid, with no bits
// set past its length, and belong to one peer. A peer may have no
// prefix: nothing is routed to it, and nothing it sends is accepted.
func NewPeers(peers []Peer) (*Peers, error) {
	if len(peers) == 0 {
		return nil, &PeerError{Kind: NoPeers, Peer: -1, Other: -1}
	}
	t := &Peers{
		peers:     make([]Peer, len(peers)),
		endpoints: make(map[netip.AddrPort]int, len(peers)),
		counters:  make([]peerCounters, len(peers)),
	}
	owner := map[netip.Prefix]int{}
	for i, p := range peers {
		ep := netip.AddrPortFrom(p.Endpoint.Addr().Unmap(), p.Endpoint.Port())
		if !ep.Addr().IsValid() || ep.Addr().IsUnspecified() || ep.Port() == 0 {
			return nil, &PeerError{Kind: BadEndpoint, Peer: i, Other: -1, Endpoint: p.Endpoint}
		}
		key := endpointKey(ep)
		if j, dup := t.endpoints[key]; dup {
			return nil, &PeerError{Kind: DuplicateEndpoint, Peer: i, Other: j, Endpoint: p.Endpoint}
		}
		t.endpoints[key] = i
		for _, pfx := range p.Allowed {
			if !pfx.IsValid() || pfx != pfx.Masked() {
				return nil, &PeerError{Kind: BadPrefix, Peer: i, Other: -1, Prefix: pfx}
			}
			if j, dup := owner[pfx]; dup {
				return nil, &PeerError{Kind: DuplicatePrefix, Peer: i, Other: j, Prefix: pfx}
			}
			owner[pfx] = i
			if pfx.Addr().Is4() {
				t.v4.add(pfx, i)
			} else {
				t.v6.add(pfx, i)
			}
		}
		t.peers[i] = Peer{Endpoint: ep, Allowed: slices.Clone(p.Allowed)}
	}
	return t, nil
}

// endpointKey is how an endpoint is looked up: without its zone (a
// received address has a scope ID, not a zone's name).
func endpointKey(ep netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ep.Addr().WithZone(""), ep.Port())
}

// Len is the number of peers.
func (t *Peers) Len() int { return len(t.peers) }

// Peer returns peer i as NewPeers took it (its endpoint unmapped), a
// copy.
func (t *Peers) Peer(i int) Peer {
	p := t.peers[i]
	p.Allowed = slices.Clone(p.Allowed)
	return p
}

// Route returns the peer an inner packet to dst goes to: the one whose
// Allowed prefix matches dst longest. ok is false when none does.
func (t *Peers) Route(dst netip.Addr) (peer int, ok bool) {
	if dst.Is4() {
		return t.v4.lookup(dst)
	}
	return t.v6.lookup(dst)
}

// ByEndpoint returns the peer whose endpoint is ep (an IPv4-mapped IPv6
// address is taken as IPv4, a zone ignored).
func (t *Peers) ByEndpoint(ep netip.AddrPort) (peer int, ok bool) {
	peer, ok = t.endpoints[netip.AddrPortFrom(ep.Addr().Unmap().WithZone(""), ep.Port())]
	return peer, ok
}

// Allows reports whether peer may send inner packets from src: whether
// src routes back to it (Route), WireGuard's rule. An address in one of
// the peer's prefixes that lies in a longer prefix of another peer is
// that other peer's.
func (t *Peers) Allows(peer int, src netip.Addr) bool {
	p, ok := t.Route(src)
	return ok && p == peer
}

// Stats returns a snapshot of every peer's counters, in the peers'
// order.
func (t *Peers) Stats() []PeerStats {
	s := make([]PeerStats, len(t.peers))
	for i := range s {
		c := &t.counters[i]
		s[i] = PeerStats{
			Endpoint:      t.peers[i].Endpoint,
			SentDatagrams: c.sentDatagrams.Load(), SentBytes: c.sentBytes.Load(),
			ReceivedDatagrams: c.receivedDatagrams.Load(), ReceivedBytes: c.receivedBytes.Load(),
			GSORefused: c.gsoRefused.Load(), Reprobes: c.reprobes.Load(),
		}
	}
	return s
}

// routeCache remembers the last address routed (one super-packet's
// segments share their addresses) and its peer.
type routeCache struct {
	addr netip.Addr
	peer int
	ok   bool
}

// route is t.Route(a) through the cache.
func (c *routeCache) route(t *Peers, a netip.Addr) (int, bool) {
	if a != c.addr {
		c.addr = a
		c.peer, c.ok = t.Route(a)
	}
	return c.peer, c.ok
}

// tally sums the datagrams and bytes of consecutive datagrams of one
// peer, so that a run of them costs two atomic additions.
type tally struct {
	t         *Peers
	received  bool // the received counters, else the sent ones
	peer      int
	datagrams uint64
	bytes     uint64
}

// add counts datagrams of peer, of bytes in all.
func (y *tally) add(peer int, datagrams, bytes uint64) {
	if peer != y.peer {
		y.flush()
		y.peer = peer
	}
	y.datagrams += datagrams
	y.bytes += bytes
}

// flush adds what was summed to the peer's counters.
func (y *tally) flush() {
	if y.datagrams == 0 {
		return
	}
	c := &y.t.counters[y.peer]
	if y.received {
		c.receivedDatagrams.Add(y.datagrams)
		c.receivedBytes.Add(y.bytes)
	} else {
		c.sentDatagrams.Add(y.datagrams)
		c.sentBytes.Add(y.bytes)
	}
	y.datagrams, y.bytes = 0, 0
}
