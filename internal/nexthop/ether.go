package nexthop

import (
	"encoding/binary"
	"net/netip"
	"strconv"
	"time"

	"github.com/gsoplane/gsoplane/internal/ethernet"
	"github.com/gsoplane/gsoplane/internal/iphdr"
)

// EtherLen is the length of the Ethernet header Ether writes.
const EtherLen = ethernet.HeaderLen

// How long a sink holds its frames for a next hop being resolved. The
// kernel queues a pending neighbour's packets (unres_qlen_bytes) and sends
// them once it resolves; a sink, whose completions come in order, can
// only hold the whole batch. So it holds for at most HoldTime per
// destination while it stays pending, and holds take at most HoldShare
// percent of the time (a token bucket of HoldBurst; a hold lasts no
// longer than the bucket's credit): neighbours that never answer cost the
// other traffic at most that, and a neighbour that answers loses nothing.
// HoldTime is the kernel's retrans_time (1 s): the reply to its first
// solicitation comes within it or the kernel asks again. A neighbour on
// the link resolves in a millisecond or two on an idle machine, in tens of
// milliseconds on a loaded one (the resolver, the kernel's soft
// interrupts and the peer all wait for a CPU), and a hold ends when it
// resolves, so the whole of HoldTime is spent only on a neighbour that
// does not answer.
const (
	HoldTime  = time.Second
	HoldBurst = time.Second
	HoldShare = 10
)

// Action is what a sink does with a frame.
type Action uint8

const (
	Send        Action = iota // the header is written: send it
	Hold                      // the next hop is being resolved: stop the batch here and Wait
	Drop                      // the next hop is still being resolved after the hold: drop and count
	Unreachable               // the next hop failed: drop, count and answer the sender
	NotRouted                 // a destination a router does not forward to (multicast, link-local, loopback): drop and count
	Control                   // the host's own signalling to the link (neighbour discovery, MLD, IGMP; iphdr.LinkControl): not forwarded either, but no drop: discard and count apart
)

var actionNames = [...]string{Send: "send", Hold: "hold", Drop: "drop", Unreachable: "unreachable", NotRouted: "not routed", Control: "link control"}

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
	now func() time.Time

	lastDst netip.Addr
	lastMAC [6]byte
	lastVer uint64
	lastOK  bool

	holdDst netip.Addr    // the destination of the last hold
	holdEnd time.Time     // when it ends
	credit  time.Duration // hold time left in the bucket
	stamp   time.Time     // when credit was last refilled
}

// NewEther returns an Ether writing headers from src, the interface's
// MAC address, to the next hops r resolves.
func NewEther(r *Resolver, src [6]byte) *Ether { return &Ether{r: r, src: src, now: time.Now} }

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
			return e.hold(dst)
		case Failed:
			return Unreachable
		}
		if dst == e.holdDst {
			e.resolved()
		}
	}
	copy(eth[0:6], e.lastMAC[:])
	copy(eth[6:12], e.src[:])
	binary.BigEndian.PutUint16(eth[12:14], typ)
	return Send
}

// hold decides for a frame to dst, whose next hop is pending: hold while
// its hold lasts, drop after it, and start a hold, for HoldTime or what
// credit the bucket has left, only if it has some.
func (e *Ether) hold(dst netip.Addr) Action {
	now := e.now()
	if dst == e.holdDst {
		if now.Before(e.holdEnd) {
			return Hold
		}
		return Drop // held for it already
	}
	if since := now.Sub(e.stamp); e.stamp.IsZero() || since >= HoldBurst*100/HoldShare {
		e.credit = HoldBurst // a full bucket (and no overflow)
	} else {
		e.credit = min(HoldBurst, e.credit+since*HoldShare/100)
	}
	e.stamp = now
	if e.credit <= 0 {
		return Drop
	}
	d := min(HoldTime, e.credit)
	e.credit -= d
	e.holdDst, e.holdEnd = dst, now.Add(d)
	return Hold
}

// resolved ends the hold, whose destination resolved: the time it did
// not take goes back in the bucket, and a later resolution of it may
// hold again.
func (e *Ether) resolved() {
	if left := e.holdEnd.Sub(e.now()); left > 0 {
		e.credit += left
	}
	e.holdDst, e.holdEnd = netip.Addr{}, time.Time{}
}

// Wait waits, after Header said Hold, until the resolver learns
// something, the hold ends or d has passed, whichever comes first.
func (e *Ether) Wait(d time.Duration) {
	wake := e.r.Wake(e.r.Changed())
	if left := e.holdEnd.Sub(e.now()); left < d {
		d = left
	}
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-wake:
	case <-t.C:
	}
}

// Reset forgets the holds and fills the bucket: every destination
// pending now may be held again, for HoldTime, as for the first time.
// Call it when the link comes back up: the kernel flushed the neighbours
// of the link when it went down, what was held before says nothing of
// the resolutions that follow, and a hold while the link was down kept
// no other traffic waiting.
func (e *Ether) Reset() {
	e.lastOK = false
	e.holdDst, e.holdEnd = netip.Addr{}, time.Time{}
	e.stamp = time.Time{} // the next hold starts with a full bucket
}

// Forget drops the remembered destination: the next Header asks the
// resolver again. Call it once per batch, so that every destination in
// use is looked up, which keeps it in the cache and re-validated.
func (e *Ether) Forget() { e.lastOK = false }
