package xsk

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/internal/ethernet"
	"github.com/gsoplane/gsoplane/internal/nexthop"
)

// A Sink is a pipeline.Sink.
var _ pipeline.Sink = (*Sink)(nil)

const (
	ethHdrLen  = ethernet.HeaderLen
	sinkFrames = 256 // most frames one Alloc, Free or Transmit call handles
)

// Sink is the forwarder's Sink on an AF_XDP socket: segments are cut
// straight into UMEM frames behind room for an Ethernet header, which
// Transmit fills in from the kernel's routing and neighbour tables
// (internal/nexthop). A frame whose next hop is being resolved holds the
// batch briefly (nexthop.HoldTime, once per destination) and is then
// dropped and counted (Unresolved), as is one whose next hop failed,
// whose sender is answered with host unreachable through the Replier, if
// one is set: a neighbour that never answers cannot stall the others.
type Sink struct {
	x     *Socket
	neigh *nexthop.Resolver
	ether *nexthop.Ether // sink loop only
	reply pipeline.Replier

	mu    sync.Mutex // the Socket's TX side is single-threaded
	addrs []uint64
	lens  []int
	early int  // dropped frames Complete has yet to report
	held  bool // the last Transmit stopped at a frame whose next hop is being resolved

	down                  atomic.Bool // see SetLinkUp
	unresolved, notRouted atomic.Uint64
}

// NewSink returns a Sink transmitting on x, an AF_XDP socket of the
// interface with index ifindex, to gateway's MAC address or, if gateway is
// the zero Addr, to the next hop of each destination's route through the
// interface. Call it in the interface's network namespace: it starts a
// next-hop resolver there (netlink sockets and goroutines), which
// resolves gateway at once. Close it when done.
func NewSink(x *Socket, ifindex int, gateway netip.Addr) (*Sink, error) {
	ifi, err := net.InterfaceByIndex(ifindex)
	if err != nil {
		return nil, fmt.Errorf("xsk: sink: interface %d: %w", ifindex, err)
	}
	if len(ifi.HardwareAddr) != 6 {
		return nil, fmt.Errorf("xsk: sink: %s has no Ethernet address", ifi.Name)
	}
	n, err := nexthop.New(nexthop.Config{Ifindex: ifindex, Gateway: gateway})
	if err != nil {
		return nil, fmt.Errorf("xsk: sink on %s: %w", ifi.Name, err)
	}
	if gateway.IsValid() {
		n.Lookup(gateway)
	}
	return &Sink{
		x: x, neigh: n, ether: nexthop.NewEther(n, [6]byte(ifi.HardwareAddr)),
		addrs: make([]uint64, sinkFrames), lens: make([]int, sinkFrames),
	}, nil
}

// SetReplier sets who answers the senders of packets whose next hop
// failed to resolve (nil: nobody). Call it before the sink is used.
func (s *Sink) SetReplier(r pipeline.Replier) { s.reply = r }

// SetLinkUp tells the sink whether the NIC is up. While it is down,
// Transmit takes nothing: the frames wait in the queue and the budget
// holds the senders back, rather than their next hops, which the kernel
// forgets on a link that goes down, failing to resolve.
func (s *Sink) SetLinkUp(up bool) { s.down.Store(!up) }

// Close stops the sink's next-hop resolver; the Socket belongs to its
// port.
func (s *Sink) Close() { s.neigh.Close() }

// Headroom is the Ethernet header.
func (s *Sink) Headroom() int { return ethHdrLen }

// Alloc takes free TX frames from the UMEM.
func (s *Sink) Alloc(frames []pipeline.Frame) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.x.alloc(s.addrs[:min(len(frames), sinkFrames)])
	for i, a := range s.addrs[:n] {
		frames[i] = pipeline.Frame{Buf: s.x.frame(a), ID: a}
	}
	return n
}

// Free returns frames that will not be sent.
func (s *Sink) Free(frames []pipeline.Frame) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(frames) > 0 {
		n := min(len(frames), sinkFrames)
		for i := range n {
			s.addrs[i] = frames[i].ID
		}
		s.x.free(s.addrs[:n])
		frames = frames[n:]
	}
}

// Transmit writes each frame's Ethernet header and puts the frames on the
// TX ring, in runs between the frames it drops for want of a next hop;
// the next Complete reports those, so that their charges are released
// like any other. It stops at a frame held for its next hop (Wait waits
// for it).
func (s *Sink) Transmit(frames []pipeline.Frame) (int, error) {
	n := min(len(frames), sinkFrames)
	s.ether.Forget()
	s.held = false
	if s.down.Load() {
		return 0, nil
	}
	taken := 0
	for taken < n {
		m, a := s.link(frames[taken:n])
		k, err := s.send(frames[taken : taken+m])
		taken += k
		if err != nil || k < m || taken == n {
			return taken, err
		}
		if a == nexthop.Hold {
			s.held = true
			return taken, nil
		}
		s.drop(frames[taken], a)
		taken++
	}
	return taken, nil
}

// link writes the Ethernet headers of frames up to the first that is not
// to be sent, and returns how many it wrote and what to do with that one.
func (s *Sink) link(frames []pipeline.Frame) (int, nexthop.Action) {
	for i, f := range frames {
		if a := s.ether.Header(f.Buf, f.Buf[ethHdrLen:ethHdrLen+f.Len]); a != nexthop.Send {
			return i, a
		}
	}
	return len(frames), nexthop.Send
}

// send puts frames on the TX ring.
func (s *Sink) send(frames []pipeline.Frame) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range frames {
		s.addrs[i], s.lens[i] = f.ID, ethHdrLen+f.Len
	}
	return s.x.transmit(s.addrs[:len(frames)], s.lens[:len(frames)])
}

// drop frees a frame without a next hop, counts it and, if the
// resolution failed, answers its sender.
func (s *Sink) drop(f pipeline.Frame, a nexthop.Action) {
	if a == nexthop.Unreachable && s.reply != nil {
		s.reply.Unreachable(f.Buf[ethHdrLen : ethHdrLen+f.Len])
	}
	s.mu.Lock()
	s.addrs[0] = f.ID
	s.x.free(s.addrs[:1])
	s.early++
	s.mu.Unlock()
	if a == nexthop.NotRouted {
		s.notRouted.Add(1)
	} else {
		s.unresolved.Add(1)
	}
}

// Drops returns how many frames the sink dropped, by reason:
// DropUnresolved (a next hop the kernel could not resolve, or was still
// resolving after the hold) and DropNotRouted.
func (s *Sink) Drops() pipeline.Drops {
	var d pipeline.Drops
	d[pipeline.DropUnresolved], d[pipeline.DropNotRouted] = s.unresolved.Load(), s.notRouted.Load()
	return d
}

// Complete returns the frames the kernel has sent to the free list.
func (s *Sink) Complete() (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.x.complete() + s.early
	s.early = 0
	return n, nil
}

// Wait waits up to d until the kernel has completed transmitted frames,
// woken by the socket's writable event, and kicks it meanwhile for frames
// still on the TX ring; after Transmit held a frame, until its next hop
// may have resolved.
func (s *Sink) Wait(d time.Duration) error {
	switch {
	case s.held:
		s.ether.Wait(d)
		return nil
	case s.down.Load():
		time.Sleep(d)
		return nil
	}
	if err := s.x.waitCompletions(d); err != ErrClosed {
		return err
	}
	return nil // Complete reports nothing more; the forwarder stops by its queue
}
