// Package egress is the link layer the two NIC ports' sinks share,
// dataplane/xsk (AF_XDP) and dataplane/afpacket (AF_PACKET): the
// transmit loop around a sink's own sending, which writes each frame's
// Ethernet header from its next hop (internal/nexthop), holds the batch
// at a frame whose next hop is being resolved, takes nothing while the
// link is down, and drops, counts by reason and answers the senders of
// frames without a next hop; and the wait that goes with a hold or a
// link down.
package egress

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/internal/nexthop"
)

// Wire is a sink's own side of the transmit loop.
type Wire interface {
	// Check returns how many frames from the front are the sink's own
	// frames holding a packet that fits them, and the error about the
	// first that is not.
	Check(frames []pipeline.Frame) (int, error)
	// Packet returns the room for the Ethernet header of a checked
	// frame and the IP packet behind it.
	Packet(f pipeline.Frame) (eth, pkt []byte)
	// Send hands frames, their Ethernet headers written, to the kernel
	// and returns how many it took (sent, or refused and dropped) and
	// whether the batch stops there (a full ring, send buffer or device
	// queue); an error stops it too.
	Send(frames []pipeline.Frame) (taken int, stop bool, err error)
	// Discard takes a frame dropped for want of a next hop: the sink's
	// next Complete reports it like a sent one, so that its charge is
	// released.
	Discard(f pipeline.Frame)
}

// Counts are the frames a Layer dropped for want of a next hop, by
// reason, and those it discarded as the host's own link signalling.
type Counts struct {
	Unresolved  atomic.Uint64 // the next hop failed, or was still being resolved after the hold
	NotRouted   atomic.Uint64 // multicast, link-local or loopback: a router does not forward it
	HostControl atomic.Uint64 // the host's neighbour discovery, MLD or IGMP (nexthop.Control): not forwarded, and not a drop
}

// Config configures New.
type Config struct {
	Ifname  string
	Ifindex int
	MAC     net.HardwareAddr // the interface's: the frames' source
	// Gateway is the next hop of every frame; the zero Addr means the
	// next hop of each destination's route through the interface.
	Gateway netip.Addr
	// Counts receive the drops (nil: counters of the Layer's own).
	Counts *Counts
}

// Layer is a sink's link layer. SetReplier, SetLinkUp and Drops may be
// called from any goroutine; Transmit and Wait run on one goroutine at a
// time (the sink loop).
type Layer struct {
	neigh  *nexthop.Resolver
	ether  *nexthop.Ether
	reply  pipeline.Replier
	counts *Counts
	held   bool                    // the last Transmit stopped at a frame whose next hop is being resolved
	down   atomic.Bool             // see SetLinkUp
	relink atomic.Bool             // the link came up again: the next Transmit forgets the holds
	mac    atomic.Pointer[[6]byte] // a new source address from SetMAC, for the next Transmit
}

// New returns the link layer of a sink on the interface cfg describes.
// Call it in the interface's network namespace: it starts a next-hop
// resolver there (netlink sockets and goroutines), which resolves
// cfg.Gateway at once. Close it when done.
func New(cfg Config) (*Layer, error) {
	if len(cfg.MAC) != 6 {
		return nil, fmt.Errorf("%s has no Ethernet address", cfg.Ifname)
	}
	n, err := nexthop.New(nexthop.Config{Ifindex: cfg.Ifindex, Gateway: cfg.Gateway})
	if err != nil {
		return nil, fmt.Errorf("next hops on %s: %w", cfg.Ifname, err)
	}
	if cfg.Gateway.IsValid() {
		n.Lookup(cfg.Gateway)
	}
	if cfg.Counts == nil {
		cfg.Counts = new(Counts)
	}
	return &Layer{neigh: n, ether: nexthop.NewEther(n, [6]byte(cfg.MAC)), counts: cfg.Counts}, nil
}

// Close stops the next-hop resolver.
func (l *Layer) Close() { l.neigh.Close() }

// SetReplier sets who answers the senders of packets whose next hop
// failed to resolve (nil: nobody). Call it before the sink is used.
func (l *Layer) SetReplier(r pipeline.Replier) { l.reply = r }

// SetLinkUp says whether the link is up; while it is down Transmit
// takes nothing. When it comes up again, the next hops are resolved
// afresh: the kernel flushed the link's neighbours when it went down, and
// a frame held then, or whose resolution was lost on the down link, is
// held again as for the first time (nexthop.Ether.Reset,
// nexthop.Resolver.LinkUp) rather than dropped as unresolved. Calls
// come from one goroutine at a time (the link's monitor).
func (l *Layer) SetLinkUp(up bool) {
	if up && l.down.Load() {
		l.relink.Store(true) // before the link is up for Transmit
		l.neigh.LinkUp()
	}
	l.down.Store(!up)
}

// SetMAC sets the frames' source address, the interface's MAC address
// after it changed: frames transmitted from then on carry it. An address
// that is not 6 bytes long is ignored.
func (l *Layer) SetMAC(mac net.HardwareAddr) {
	if len(mac) == 6 {
		l.mac.Store((*[6]byte)(slices.Clone(mac)))
	}
}

// Drops returns the drops by reason: DropUnresolved and DropNotRouted.
func (l *Layer) Drops() pipeline.Drops {
	var d pipeline.Drops
	d[pipeline.DropUnresolved], d[pipeline.DropNotRouted] = l.counts.Unresolved.Load(), l.counts.NotRouted.Load()
	return d
}

// HostControl returns the frames discarded as the host's own link
// signalling (see Counts).
func (l *Layer) HostControl() uint64 { return l.counts.HostControl.Load() }

// Transmit transmits frames in order through w and returns how many it
// took. It writes the Ethernet headers of the checked frames up to the
// first whose next hop is not resolved and sends that run; it then stops
// at a frame held for its next hop (Wait waits for it), or drops it and
// goes on. It stops early when w stops, at the first frame w's Check
// refuses (with its error), and takes nothing while the link is down.
func (l *Layer) Transmit(frames []pipeline.Frame, w Wire) (int, error) {
	l.held = false
	if mac := l.mac.Swap(nil); mac != nil {
		l.ether.SetSource(*mac)
	}
	l.ether.Forget() // ask the resolver at least once per batch: it marks the entry in use
	if l.down.Load() {
		return 0, nil
	}
	if l.relink.Swap(false) {
		l.ether.Reset()
	}
	taken := 0
	for taken < len(frames) {
		batch := frames[taken:]
		good, bad := w.Check(batch)
		m, a := l.headers(batch[:good], w)
		if m > 0 {
			k, stop, err := w.Send(batch[:m])
			taken += k
			if err != nil || stop || k < m {
				return taken, err
			}
		}
		switch {
		case a == nexthop.Hold:
			l.held = true
			return taken, nil
		case a != nexthop.Send:
			l.drop(batch[m], a, w)
			taken++
		case bad != nil:
			return taken, bad
		}
	}
	return taken, nil
}

// headers writes the Ethernet headers of frames up to the first that is
// not to be sent, and returns how many it wrote and what to do with that
// one (Send if none).
func (l *Layer) headers(frames []pipeline.Frame, w Wire) (int, nexthop.Action) {
	for i, f := range frames {
		if a := l.ether.Header(w.Packet(f)); a != nexthop.Send {
			return i, a
		}
	}
	return len(frames), nexthop.Send
}

// drop drops a frame without a next hop, counts it by a and, if the
// resolution failed, answers its sender.
func (l *Layer) drop(f pipeline.Frame, a nexthop.Action, w Wire) {
	if a == nexthop.Unreachable && l.reply != nil {
		_, pkt := w.Packet(f)
		l.reply.Unreachable(pkt)
	}
	w.Discard(f)
	switch a {
	case nexthop.NotRouted:
		l.counts.NotRouted.Add(1)
	case nexthop.Control:
		l.counts.HostControl.Add(1)
	default:
		l.counts.Unresolved.Add(1)
	}
}

// Wait waits for what stopped the last Transmit on the link layer's
// account: up to d for the next hop of the frame it held, or d while the
// link is down. It reports whether it waited; if not, the sink waits its
// own way.
func (l *Layer) Wait(d time.Duration) bool {
	switch {
	case l.held:
		l.ether.Wait(d)
	case l.down.Load():
		time.Sleep(d)
	default:
		return false
	}
	return true
}
