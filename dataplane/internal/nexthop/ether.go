package nexthop

import (
	"encoding/binary"
	"net/netip"
	"strconv"

	"github.com/gsoplane/gsoplane/internal/ethernet"
	"github.com/gsoplane/gsoplane/internal/iphdr"
)

// EtherLen is the length of the Ethernet header Ether writes.
const EtherLen = ethernet.HeaderLen

// Action is what a sink does with a frame.
type Action uint8

const (
	Send        Action = iota // the header is written: send it
	Queue                     // the next hop is being resolved: keep the frame until it resolves or fails, and send the others
	Unreachable               // the next hop failed: drop, count and answer the sender
	NotRouted                 // a destination a router does not forward to (multicast, link-local, loopback): drop and count
	Control                   // the host's own signalling to the link (neighbour discovery, MLD, IGMP; iphdr.LinkControl): not forwarded either, but no drop: discard and count apart
)

var actionNames = [...]string{Send: "send", Queue: "queue", Unreachable: "unreachable", NotRouted: "not routed", Control: "link control"}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "Action(" + strconv.Itoa(int(a)) + ")"
}

// Ether writes the Ethernet headers of IP packets leaving an interface,
// from a Resolver's answers, and decides what to do with a frame whose
// next hop is not resolved: the sinks' one place for next hops. It
// remembers the last destination while the resolver reports no change,
// so that a batch to one destination costs one lookup. It is not safe
// for concurrent use: a sink's transmit loop owns it.
type Ether struct {
	r   *Resolver
	src [6]byte

	lastDst netip.Addr
	lastMAC [6]byte
	lastVer uint64
	lastOK  bool
}

// NewEther returns an Ether writing headers from src, the interface's
// MAC address, to the next hops r resolves.
func NewEther(r *Resolver, src [6]byte) *Ether { return &Ether{r: r, src: src} }

// SetSource sets the source address of the headers written from then
// on: the interface's MAC address after it changed.
func (e *Ether) SetSource(src [6]byte) { e.src = src }

// Header writes into eth[:EtherLen] the Ethernet header of the IP packet
// pkt if its next hop is resolved, and says what to do with the frame. A
// packet that is not IPv4 or IPv6 is Unreachable.
func (e *Ether) Header(eth, pkt []byte) Action {
	dst, ok := iphdr.Dst(pkt)
	if !ok {
		return Unreachable
	}
	typ := uint16(ethernet.TypeIPv4)
	if dst.Is6() {
		typ = ethernet.TypeIPv6
	}
	if !dst.IsGlobalUnicast() {
		if iphdr.LinkControl(pkt) {
			return Control
		}
		return NotRouted
	}
	if ver := e.r.Changed(); !e.lastOK || dst != e.lastDst || ver != e.lastVer {
		mac, st := e.r.Lookup(dst)
		e.lastDst, e.lastMAC, e.lastVer, e.lastOK = dst, mac, ver, st == Resolved
		switch st {
		case Pending:
			return Queue
		case Failed:
			return Unreachable
		}
	}
	copy(eth[0:6], e.lastMAC[:])
	copy(eth[6:12], e.src[:])
	binary.BigEndian.PutUint16(eth[12:14], typ)
	return Send
}

// Forget drops the remembered destination: the next Header asks the
// resolver again. Call it once per batch, so that every destination in
// use is looked up, which keeps it in the cache and re-validated.
func (e *Ether) Forget() { e.lastOK = false }
