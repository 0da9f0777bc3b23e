// Package egress is the link layer the two NIC ports' sinks share,
// dataplane/xsk (AF_XDP) and dataplane/afpacket (AF_PACKET): the
// transmit loop around a sink's own sending, which writes each frame's
// Ethernet header from its next hop (dataplane/internal/nexthop), queues a frame
// whose next hop is being resolved while the others go on, takes
// nothing while the link is down, and drops, counts by reason and
// answers the senders of frames without a next hop.
//
// A frame whose next hop is being resolved waits in a bounded queue, as
// the kernel queues a neighbour's packets while it resolves it
// (arp_queue, unres_qlen_bytes): at most QueueLen frames per
// destination, the oldest dropped to make room, and a QueueShare of the
// sink's frames in all (fewer if the sink cannot spare them), the next
// dropped. The sink reports it complete at once, so that the forwarder
// releases its charge and nothing else waits for it, and keeps its frame
// (Wire.Keep); once the next hop resolves, the frames queued for it go
// out, in order, before the next frames to it; once it fails, they are
// dropped, counted (unresolved) and their senders answered with host
// unreachable. Backlog tells the sink loop when the queue has work while
// it has no frames to give.
package egress

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/internal/nexthop"
	"github.com/gsoplane/gsoplane/internal/iphdr"
)

// Wire is a sink's own side of the transmit loop.
type Wire interface {
	// Check returns how many frames from the front are the sink's own
	// frames holding a packet that fits them, and the error about the
	// first that is not.
	Check(frames []frame.Frame) (int, error)
	// Packet returns the room for the Ethernet header of a checked
	// frame and the IP packet behind it.
	Packet(f frame.Frame) (eth, pkt []byte)
	// Send hands frames, their Ethernet headers written, to the kernel
	// and returns how many it took (sent, or refused and dropped) and
	// whether the batch stops there (a full ring, send buffer or device
	// queue); an error stops it too.
	Send(frames []frame.Frame) (taken int, stop bool, err error)
	// Discard takes a frame dropped for want of a next hop: the sink's
	// next Complete reports it like a sent one, so that its charge is
	// released.
	Discard(f frame.Frame)
	// Keep takes a frame for the link layer, if the sink can spare it:
	// the sink's next Complete reports it like a sent one, so that its
	// charge is released, but the frame stays out of the sink's free
	// frames until SendKept or Release gives it back. A sink keeps so
	// few of its frames that the forwarder always finds enough for a
	// super-packet; it reports false, and takes nothing, for one more.
	Keep(f frame.Frame) bool
	// SendKept is Send for kept frames: they go back to the free frames
	// once gone, and no Complete reports them again.
	SendKept(frames []frame.Frame) (taken int, stop bool, err error)
	// Release gives back a kept frame that is dropped.
	Release(f frame.Frame)
}

// Queue bounds: the frames waiting for their next hop, per destination
// (the kernel queues about 100 full-sized packets per neighbour), and in
// all, a share of the sink's frames, which the forwarder needs too (see
// Wire.Keep).
const (
	QueueLen   = 64
	QueueShare = 4 // one frame in QueueShare at most, of each size (Wire.Keep)
)

// retryWait is how long Backlog waits before the queue tries again to
// send frames whose next hop resolved, after the sink took only some.
const retryWait = time.Millisecond

// Counts are the frames a Layer dropped for want of a next hop, by
// reason, and those it discarded as the host's own link signalling.
type Counts struct {
	Unresolved  atomic.Uint64 // the next hop failed, or the queue for it was full
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
	// Frames is how many transmit frames the sink has: a QueueShare of
	// them at most, and as few as the sink keeps, wait for their next
	// hop.
	Frames int
}

// Layer is a sink's link layer. SetReplier, SetLinkUp, SetMAC and Drops
// may be called from any goroutine; Transmit, Backlog, Wait and Close
// run on one goroutine at a time (the sink loop).
type Layer struct {
	neigh  *nexthop.Resolver
	ether  *nexthop.Ether
	reply  frame.Replier
	counts *Counts
	down   atomic.Bool             // see SetLinkUp
	relink atomic.Bool             // the link is coming up: the queue is to be looked at again
	mac    atomic.Pointer[[6]byte] // a new source address from SetMAC, for the next Transmit

	queue   []queued      // kept frames waiting for their next hop, oldest first; cap: the bound in all
	ready   []frame.Frame // flush's frames to send
	flushed uint64        // the resolver's Changed when the queue was last looked at
	unsent  bool          // the last flush left frames to send
	retry   *time.Timer   // signals retried after retryWait, see Backlog
	armed   atomic.Bool   // retry is running
	retried chan struct{}
}

// queued is a kept frame and its destination.
type queued struct {
	dst netip.Addr
	f   frame.Frame
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
	l := &Layer{
		neigh: n, ether: nexthop.NewEther(n, [6]byte(cfg.MAC)), counts: cfg.Counts,
		queue: make([]queued, 0, max(1, cfg.Frames/QueueShare)), ready: make([]frame.Frame, 0, max(1, cfg.Frames/QueueShare)),
		retried: make(chan struct{}, 1),
	}
	l.retry = time.AfterFunc(time.Hour, func() {
		l.armed.Store(false)
		select {
		case l.retried <- struct{}{}:
		default:
		}
	})
	l.retry.Stop()
	return l, nil
}

// Close stops the next-hop resolver and drops the frames still queued,
// counted as unresolved, giving them back to w; call it once Transmit is
// no longer called.
func (l *Layer) Close(w Wire) {
	l.neigh.Close()
	l.retry.Stop()
	for _, q := range l.queue {
		w.Release(q.f)
	}
	l.counts.Unresolved.Add(uint64(len(l.queue)))
	l.queue = l.queue[:0]
}

// SetReplier sets who answers the senders of packets whose next hop
// failed to resolve (nil: nobody). Call it before the sink is used.
func (l *Layer) SetReplier(r frame.Replier) { l.reply = r }

// SetLinkUp says whether the link is up; while it is down Transmit
// takes nothing, and the queued frames wait. When it comes up again, the
// next hops are resolved afresh (nexthop.Resolver.LinkUp): the kernel
// flushed the link's neighbours when it went down, and a resolution
// under way was lost on the down link; the frames queued for it are
// sent once it resolves rather than dropped as unresolved. Calls come
// from one goroutine at a time (the link's monitor).
func (l *Layer) SetLinkUp(up bool) {
	if up && l.down.Load() {
		l.relink.Store(true) // before the resolver's change wakes the sink loop
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
func (l *Layer) Drops() frame.Drops {
	var d frame.Drops
	d[frame.DropUnresolved], d[frame.DropNotRouted] = l.counts.Unresolved.Load(), l.counts.NotRouted.Load()
	return d
}

// HostControl returns the frames discarded as the host's own link
// signalling (see Counts).
func (l *Layer) HostControl() uint64 { return l.counts.HostControl.Load() }

// Transmit transmits frames in order through w and returns how many it
// took. It writes the Ethernet headers of the checked frames up to the
// first whose next hop is not resolved and sends that run; it queues
// that frame, or drops it, and goes on. Before it sends a frame, the
// queued frames whose next hop resolved since are sent, and those whose
// next hop failed dropped. It stops early when w stops, at the first
// frame w's Check refuses (with its error), and takes nothing while the
// link is down.
func (l *Layer) Transmit(frames []frame.Frame, w Wire) (int, error) {
	if mac := l.mac.Swap(nil); mac != nil {
		l.ether.SetSource(*mac)
	}
	l.ether.Forget() // ask the resolver at least once per batch: it marks the entry in use
	if l.down.Load() {
		if !l.relink.Load() {
			l.flushed = l.neigh.Changed() // the queue waits for the link
		}
		return 0, nil
	}
	l.relink.Store(false)
	taken := 0
	for {
		if l.stale() || l.unsent {
			if stop, err := l.flush(w); stop || err != nil {
				return taken, err
			}
		}
		if taken == len(frames) {
			return taken, nil
		}
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
		case m < good && a == nexthop.Send: // the queue is stale: look at it first
		case a == nexthop.Queue:
			l.enqueue(batch[m], w)
			taken++
		case a != nexthop.Send:
			l.drop(batch[m], a, w)
			w.Discard(batch[m])
			taken++
		case bad != nil:
			return taken, bad
		}
	}
}

// stale reports whether a next hop may have resolved or failed since the
// queue was last looked at.
func (l *Layer) stale() bool { return len(l.queue) > 0 && l.neigh.Changed() != l.flushed }

// headers writes the Ethernet headers of frames up to the first that is
// not to be sent, and returns how many it wrote and what to do with that
// one; Send if none, or if the queue is stale before it (a frame sent
// now could pass those queued for its next hop).
func (l *Layer) headers(frames []frame.Frame, w Wire) (int, nexthop.Action) {
	for i, f := range frames {
		if l.stale() {
			return i, nexthop.Send
		}
		if a := l.ether.Header(w.Packet(f)); a != nexthop.Send {
			return i, a
		}
	}
	return len(frames), nexthop.Send
}

// enqueue keeps a frame whose next hop is being resolved, behind the
// others queued for its destination: if QueueLen are, the oldest of them
// is dropped; if the queue is full or the sink cannot spare the frame,
// the frame is.
func (l *Layer) enqueue(f frame.Frame, w Wire) {
	dst := dstOf(f, w)
	n, oldest := 0, -1
	for i, q := range l.queue {
		if q.dst == dst {
			if n++; oldest < 0 {
				oldest = i
			}
		}
	}
	if n >= QueueLen {
		l.drop(l.queue[oldest].f, nexthop.Queue, w)
		w.Release(l.queue[oldest].f)
		l.queue = slices.Delete(l.queue, oldest, oldest+1)
	}
	if len(l.queue) == cap(l.queue) || !w.Keep(f) {
		l.drop(f, nexthop.Queue, w)
		w.Discard(f)
		return
	}
	l.queue = append(l.queue, queued{dst, f})
}

// flush sends the queued frames whose next hop resolved, in order, and
// drops those whose next hop failed; it reports whether w stopped (the
// frames it did not take stay queued, and Backlog tries again).
func (l *Layer) flush(w Wire) (stop bool, err error) {
	l.flushed = l.neigh.Changed()
	ready, keep := l.ready[:0], l.queue[:0]
	for _, q := range l.queue {
		switch a := l.ether.Header(w.Packet(q.f)); a {
		case nexthop.Send:
			ready = append(ready, q.f)
		case nexthop.Queue:
			keep = append(keep, q)
		default:
			l.drop(q.f, a, w)
			w.Release(q.f)
		}
	}
	l.queue = keep
	k := 0
	if len(ready) > 0 {
		k, stop, err = w.SendKept(ready)
	}
	for _, f := range ready[k:] { // resolved: the next flush sends them
		l.queue = append(l.queue, queued{dstOf(f, w), f})
	}
	l.unsent = k < len(ready)
	return stop || l.unsent, err
}

// dstOf returns the destination of a frame's packet.
func dstOf(f frame.Frame, w Wire) netip.Addr {
	_, pkt := w.Packet(f)
	dst, _ := iphdr.Dst(pkt)
	return dst
}

// drop counts a frame dropped for want of a next hop and, if the
// resolution failed (a), answers its sender; the caller gives the frame
// back to w.
func (l *Layer) drop(f frame.Frame, a nexthop.Action, w Wire) {
	if a == nexthop.Unreachable && l.reply != nil {
		_, pkt := w.Packet(f)
		l.reply.Unreachable(pkt)
	}
	switch a {
	case nexthop.NotRouted:
		l.counts.NotRouted.Add(1)
	case nexthop.Control:
		l.counts.HostControl.Add(1)
	default:
		l.counts.Unresolved.Add(1)
	}
}

// Backlog returns a channel that is ready when Transmit, even with no
// frames, has queued frames to send or drop: a next hop resolved or
// failed, or the sink took only some of them; nil while none are
// queued. The sink loop waits for it beside its own queue.
func (l *Layer) Backlog() <-chan struct{} {
	switch {
	case len(l.queue) == 0:
		return nil
	case l.unsent && !l.down.Load():
		if !l.armed.Swap(true) {
			l.retry.Reset(retryWait)
		}
		return l.retried
	}
	return l.neigh.Wake(l.flushed)
}

// Wait waits d while the link is down, and reports whether it waited;
// if not, the sink waits its own way.
func (l *Layer) Wait(d time.Duration) bool {
	if !l.down.Load() {
		return false
	}
	time.Sleep(d)
	return true
}
