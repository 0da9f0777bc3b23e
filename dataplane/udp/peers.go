package udp

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gsoplane/gsoplane/dataplane/frame"
)

// A Peer is one remote end of a tunnel with several peers: its UDP
// endpoint and the inner prefixes routed to it (WireGuard's AllowedIPs).
type Peer struct {
	// Endpoint is the peer's UDP address and port: a datagram from any
	// other address is not the peer's, unless the receiver lets Open name
	// its peer (ReceiverConfig.Roam), and Peers.SetEndpoint moves it.
	Endpoint netip.AddrPort
	// Allowed are the inner prefixes behind the peer: an inner packet
	// goes to the peer whose prefix matches its destination longest,
	// and a packet from the peer is accepted only if its source routes
	// back to the peer the same way.
	Allowed []netip.Prefix
	// Key, if set, is the peer's identity across Peers.Set (a public
	// key, say): the peer of equal Key in the new list keeps its
	// counters. A peer without a Key keeps them by Endpoint.
	Key string
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

// Peers is the table of peers for the cryptokey routing of a tunnel
// with several peers, as WireGuard's: an inner packet is sent to the
// peer whose Allowed prefix matches its destination longest (Route), a
// datagram is the peer's whose endpoint it comes from (ByEndpoint), and
// the inner packet it carries must come from an address that routes
// back to that peer (Allows). Give one table to the Sinks and Receivers
// of all of a tunnel's queues: it counts each peer's traffic (Stats).
//
// The table may change while they run: SetEndpoint moves a peer's
// endpoint (roaming), Set replaces the peers. Each change builds a new
// immutable table and swaps it in atomically; a Sink or Receiver loads
// the table once per batch, so a change applies from the next batch on
// (a sink's frames offered again after ENOBUFS go to the peer they were
// routed to, and its other frames take the new table once those are
// sent). Its methods are safe for concurrent use; the lookups (Route,
// ByEndpoint, Allows, Len) do not allocate.
type Peers struct {
	mu  sync.Mutex // Set, SetEndpoint
	tab atomic.Pointer[peerTable]
}

// peerTable is one immutable version of Peers.
type peerTable struct {
	peers     []Peer
	addrs     []net.Addr // the endpoints as the sink hands them to sendmmsg
	v4, v6    lpm
	endpoints map[netip.AddrPort]int // without zone, IPv4 unmapped
	counters  []*peerCounters
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
// queues' sinks and receivers add to them concurrently. A peer keeps
// them across tables (Peers.Set).
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
	tab, err := newPeerTable(peers, nil)
	if err != nil {
		return nil, err
	}
	t := &Peers{}
	t.tab.Store(tab)
	return t, nil
}

// Set replaces the peers with peers, checked as NewPeers checks them
// (their endpoints' families as SetEndpoint says), while the sinks and
// receivers run: peer indices then refer to the new
// list. A peer of equal Key (without one, of equal Endpoint) keeps its
// counters; the others start from zero, and a removed peer's are gone.
func (t *Peers) Set(peers []Peer) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	tab, err := newPeerTable(peers, t.tab.Load())
	if err != nil {
		return err
	}
	t.tab.Store(tab)
	return nil
}

// SetEndpoint moves peer i's endpoint to ep, a specified address and
// port no other peer has, while the sinks and receivers run: its
// datagrams go there from the sinks' next batch on, and the receivers
// take the peer's datagrams from there. The endpoint must be of a
// family the sinks' socket sends to: a datagram it cannot send is
// dropped and counted (SinkStats.Other).
func (t *Peers) SetEndpoint(i int, ep netip.AddrPort) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, err := t.setEndpoint(t.tab.Load(), i, ep)
	return err
}

// setEndpoint swaps in a copy of base with peer i's endpoint at ep and
// returns it; it refuses if base is not the current table (the caller
// holds t.mu).
func (t *Peers) setEndpoint(base *peerTable, i int, ep netip.AddrPort) (*peerTable, error) {
	if base != t.tab.Load() {
		return nil, fmt.Errorf("udp: %w: changed meanwhile", ErrInvalidPeers)
	}
	if i < 0 || i >= len(base.peers) {
		return nil, fmt.Errorf("udp: %w: no peer %d", ErrInvalidPeers, i)
	}
	ep, err := checkEndpoint(i, ep)
	if err != nil {
		return nil, err
	}
	key := endpointKey(ep)
	if j, dup := base.endpoints[key]; dup && j != i {
		return nil, &PeerError{Kind: DuplicateEndpoint, Peer: i, Other: j, Endpoint: ep}
	}
	tab := *base
	tab.peers, tab.addrs = slices.Clone(base.peers), slices.Clone(base.addrs)
	tab.endpoints = make(map[netip.AddrPort]int, len(base.endpoints))
	for k, v := range base.endpoints {
		if v != i {
			tab.endpoints[k] = v
		}
	}
	tab.endpoints[key] = i
	tab.peers[i].Endpoint, tab.addrs[i] = ep, net.UDPAddrFromAddrPort(ep)
	t.tab.Store(&tab)
	return &tab, nil
}

// checkEndpoint returns peer i's endpoint ep unmapped, or why it is no
// endpoint.
func checkEndpoint(i int, ep netip.AddrPort) (netip.AddrPort, error) {
	un := netip.AddrPortFrom(ep.Addr().Unmap(), ep.Port())
	if !un.Addr().IsValid() || un.Addr().IsUnspecified() || un.Port() == 0 {
		return un, &PeerError{Kind: BadEndpoint, Peer: i, Other: -1, Endpoint: ep}
	}
	return un, nil
}

// newPeerTable checks peers and builds their table, with the counters of
// old's peers of equal identity (see Peer.Key).
func newPeerTable(peers []Peer, old *peerTable) (*peerTable, error) {
	if len(peers) == 0 {
		return nil, &PeerError{Kind: NoPeers, Peer: -1, Other: -1}
	}
	t := &peerTable{
		peers:     make([]Peer, len(peers)),
		addrs:     make([]net.Addr, len(peers)),
		endpoints: make(map[netip.AddrPort]int, len(peers)),
		counters:  make([]*peerCounters, len(peers)),
	}
	owner := map[netip.Prefix]int{}
	for i, p := range peers {
		ep, err := checkEndpoint(i, p.Endpoint)
		if err != nil {
			return nil, err
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
		t.peers[i] = Peer{Endpoint: ep, Allowed: slices.Clone(p.Allowed), Key: p.Key}
		t.addrs[i] = net.UDPAddrFromAddrPort(ep) // x/net marshals an IPv4 one as sockaddr_in
		t.counters[i] = old.countersOf(t.peers[i])
	}
	return t, nil
}

// countersOf returns the counters of t's peer of p's identity (see
// Peer.Key), or new ones.
func (t *peerTable) countersOf(p Peer) *peerCounters {
	if t != nil {
		for i, q := range t.peers {
			if p.Key != "" && q.Key == p.Key || p.Key == "" && q.Key == "" && q.Endpoint == p.Endpoint {
				return t.counters[i]
			}
		}
	}
	return new(peerCounters)
}

// endpointKey is how an endpoint is looked up: without its zone (a
// received address has a scope ID, not a zone's name).
func endpointKey(ep netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ep.Addr().WithZone(""), ep.Port())
}

// load returns the current table.
func (t *Peers) load() *peerTable { return t.tab.Load() }

// Len is the number of peers.
func (t *Peers) Len() int { return len(t.load().peers) }

// Peer returns peer i as NewPeers, Set or SetEndpoint took it (its
// endpoint unmapped), a copy.
func (t *Peers) Peer(i int) Peer {
	p := t.load().peers[i]
	p.Allowed = slices.Clone(p.Allowed)
	return p
}

// Route returns the peer an inner packet to dst goes to: the one whose
// Allowed prefix matches dst longest. ok is false when none does.
func (t *Peers) Route(dst netip.Addr) (peer int, ok bool) { return t.load().route(dst) }

// ByEndpoint returns the peer whose endpoint is ep (an IPv4-mapped IPv6
// address is taken as IPv4, a zone ignored).
func (t *Peers) ByEndpoint(ep netip.AddrPort) (peer int, ok bool) { return t.load().byEndpoint(ep) }

// Allows reports whether peer may send inner packets from src: whether
// src routes back to it (Route), WireGuard's rule. An address in one of
// the peer's prefixes that lies in a longer prefix of another peer is
// that other peer's.
func (t *Peers) Allows(peer int, src netip.Addr) bool {
	p, ok := t.Route(src)
	return ok && p == peer
}

func (t *peerTable) route(dst netip.Addr) (int, bool) {
	if dst.Is4() {
		return t.v4.lookup(dst)
	}
	return t.v6.lookup(dst)
}

func (t *peerTable) byEndpoint(ep netip.AddrPort) (int, bool) {
	peer, ok := t.endpoints[netip.AddrPortFrom(ep.Addr().Unmap().WithZone(""), ep.Port())]
	return peer, ok
}

// Stats returns a snapshot of every peer's counters, in the peers'
// order.
func (t *Peers) Stats() []PeerStats {
	tab := t.load()
	s := make([]PeerStats, len(tab.peers))
	for i := range s {
		c := tab.counters[i]
		s[i] = PeerStats{
			Endpoint:      tab.peers[i].Endpoint,
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

// route is t.route(a) through the cache, which the caller resets when
// it takes another table.
func (c *routeCache) route(t *peerTable, a netip.Addr) (int, bool) {
	if a != c.addr {
		c.addr = a
		c.peer, c.ok = t.route(a)
	}
	return c.peer, c.ok
}

// tally sums the datagrams and bytes of consecutive datagrams of one
// peer, so that a run of them costs two atomic additions.
type tally struct {
	t         *peerTable
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
	c := y.t.counters[y.peer]
	if y.received {
		c.receivedDatagrams.Add(y.datagrams)
		c.receivedBytes.Add(y.bytes)
	} else {
		c.sentDatagrams.Add(y.datagrams)
		c.sentBytes.Add(y.bytes)
	}
	y.datagrams, y.bytes = 0, 0
}
