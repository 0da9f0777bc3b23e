package xsk

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/internal/egress"
	"github.com/gsoplane/gsoplane/internal/ethernet"
	"github.com/gsoplane/gsoplane/segment"
)

// A Sink is a frame.OffloadSink: it leaves checksums to the kernel or
// the NIC where the socket can (Socket.TXChecksum).
var _ frame.OffloadSink = (*Sink)(nil)

const (
	ethHdrLen  = ethernet.HeaderLen
	sinkFrames = 256 // most frames one Alloc, Free or Transmit call handles
)

// Sink is the forwarder's Sink on an AF_XDP socket: segments are cut
// straight into UMEM frames behind room for an Ethernet header, which
// Transmit fills in from the kernel's routing and neighbour tables
// (dataplane/internal/nexthop). A frame whose next hop is being resolved is
// reported complete but kept (dataplane/internal/egress), while the others go on,
// until its next hop resolves (it is sent) or fails (it is dropped and
// counted, Unresolved, and its sender answered with host unreachable
// through the Replier, if one is set): a neighbour that never answers
// cannot stall the others.
type Sink struct {
	x     *Socket
	layer *egress.Layer

	mu    sync.Mutex // the Socket's TX side is single-threaded
	addrs []uint64
	lens  []int
	csums []uint32 // checksum offload per frame, as Socket.transmit takes it
	early int      // kept or dropped frames Complete has yet to report
	kept  int      // frames kept for their next hop
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
	l, err := egress.New(egress.Config{Ifname: ifi.Name, Ifindex: ifindex, MAC: ifi.HardwareAddr, Gateway: gateway, Frames: x.NumFrames() / 2})
	if err != nil {
		return nil, fmt.Errorf("xsk: sink: %w", err)
	}
	return &Sink{x: x, layer: l, addrs: make([]uint64, sinkFrames), lens: make([]int, sinkFrames), csums: make([]uint32, sinkFrames)}, nil
}

// SetReplier sets who answers the senders of packets whose next hop
// failed to resolve (nil: nobody), with host unreachable. Call it before
// the sink is used.
func (s *Sink) SetReplier(r frame.Replier) { s.layer.SetReplier(r) }

// SetLinkUp tells the sink whether the NIC is up. While it is down,
// Transmit puts nothing on the TX ring: the frames wait in the queue and
// the budget holds the senders back, rather than their next hops, which
// the kernel forgets on a link that goes down, failing to resolve.
func (s *Sink) SetLinkUp(up bool) { s.layer.SetLinkUp(up) }

// SetMAC tells the sink the NIC's MAC address after it changed: the
// frames it transmits from then on carry it as their source.
func (s *Sink) SetMAC(mac net.HardwareAddr) { s.layer.SetMAC(mac) }

// Close stops the sink's next-hop resolver and drops the frames waiting
// for their next hop, once the forwarder is done with the sink; the
// Socket belongs to its port.
func (s *Sink) Close() { s.layer.Close((*sinkWire)(s)) }

// Backlog is ready when frames that waited for their next hop are to be
// sent or dropped, even with nothing to Transmit (nil while none wait).
func (s *Sink) Backlog() <-chan struct{} { return s.layer.Backlog() }

// Headroom is the Ethernet header.
func (s *Sink) Headroom() int { return ethHdrLen }

// Offload is OffloadCsum for packets whose segments carry a partial
// checksum, where the socket sends those (Socket.TXChecksum), else
// OffloadNone. An AF_XDP socket sends no super-packets whole.
func (s *Sink) Offload(l segment.Layout) frame.Offload {
	if s.x.TXChecksum() && l.SegmentHeader(true).Flags&segment.FlagNeedsCsum != 0 {
		return frame.OffloadCsum
	}
	return frame.OffloadNone
}

// AllocLarge has no frame for a whole super-packet: Offload never asks for
// one.
func (s *Sink) AllocLarge(int) (frame.Frame, bool) { return frame.Frame{}, false }

// Alloc takes free TX frames from the UMEM.
func (s *Sink) Alloc(frames []frame.Frame) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.x.alloc(s.addrs[:min(len(frames), sinkFrames)])
	for i, a := range s.addrs[:n] {
		frames[i] = frame.Frame{Buf: s.x.frame(a), ID: a}
	}
	return n
}

// Free returns frames that will not be sent.
func (s *Sink) Free(frames []frame.Frame) {
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
// TX ring, at most 256 per call, in runs between the frames it keeps or
// drops for want of a next hop; the next Complete reports those, so that
// their charges are released like any other. It first sends or drops
// the kept frames whose next hop resolved or failed (Backlog), and takes
// nothing while the link is down.
func (s *Sink) Transmit(frames []frame.Frame) (int, error) {
	return s.layer.Transmit(frames[:min(len(frames), sinkFrames)], (*sinkWire)(s))
}

// Drops returns how many frames the sink dropped, by reason:
// DropUnresolved (a next hop the kernel could not resolve, or no room in
// the queue for one) and DropNotRouted.
func (s *Sink) Drops() frame.Drops { return s.layer.Drops() }

// HostControl returns how many frames the sink discarded as the host's
// own link signalling: neighbour discovery, MLD, IGMP (not drops).
func (s *Sink) HostControl() uint64 { return s.layer.HostControl() }

// Complete returns the frames the kernel has sent to the free list, and
// those kept or dropped for want of a next hop since the last call.
func (s *Sink) Complete() (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.x.complete() + s.early
	s.early = 0
	return n, nil
}

// Wait waits up to d until the kernel has completed transmitted frames,
// woken by the socket's writable event, and kicks it meanwhile for frames
// still on the TX ring; while the link is down, d.
func (s *Sink) Wait(d time.Duration) error {
	if s.layer.Wait(d) {
		return nil
	}
	if err := s.x.waitCompletions(d); err != ErrClosed {
		return err
	}
	return nil // Complete reports nothing more; the forwarder stops by its queue
}

// sinkWire is the sink as its link layer's egress.Wire.
type sinkWire Sink

// Check takes every frame: the TX ring refuses the ones that are not
// allocated TX frames (ErrBadFrame).
func (w *sinkWire) Check(frames []frame.Frame) (int, error) { return len(frames), nil }

// Packet returns the frame's Ethernet header and packet.
func (w *sinkWire) Packet(f frame.Frame) (eth, pkt []byte) {
	return f.Buf[:ethHdrLen], f.Buf[ethHdrLen : ethHdrLen+f.Len]
}

// Send puts frames on the TX ring; it stops the batch when the ring is
// full.
func (w *sinkWire) Send(frames []frame.Frame) (int, bool, error) { return w.send(frames, false) }

// send puts frames, kept ones or not, on the TX ring.
func (w *sinkWire) send(frames []frame.Frame, kept bool) (int, bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, f := range frames {
		w.addrs[i], w.lens[i], w.csums[i] = f.ID, ethHdrLen+f.Len, 0
		if h := f.Header; h.Flags&segment.FlagNeedsCsum != 0 {
			w.csums[i] = uint32(ethHdrLen+int(h.CsumStart))<<16 | uint32(h.CsumOffset)
		}
	}
	n, err := w.x.transmit(w.addrs[:len(frames)], w.lens[:len(frames)], w.csums[:len(frames)], kept)
	if kept {
		w.kept -= n
	}
	return n, n < len(frames), err
}

// Discard frees a frame dropped for want of a next hop: the next
// Complete reports it.
func (w *sinkWire) Discard(f frame.Frame) {
	w.mu.Lock()
	w.addrs[0] = f.ID
	w.x.free(w.addrs[:1])
	w.early++
	w.mu.Unlock()
}

// Keep keeps a frame that waits for its next hop, if one TX frame in
// egress.QueueShare is not kept already: the next Complete reports it.
func (w *sinkWire) Keep(frame.Frame) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.kept >= w.x.NumFrames()/2/egress.QueueShare {
		return false
	}
	w.kept++
	w.early++
	return true
}

// SendKept puts kept frames on the TX ring, which Complete, having
// reported them, frees without counting them.
func (w *sinkWire) SendKept(frames []frame.Frame) (int, bool, error) { return w.send(frames, true) }

// Release frees a kept frame.
func (w *sinkWire) Release(f frame.Frame) {
	w.mu.Lock()
	w.addrs[0] = f.ID
	w.x.free(w.addrs[:1])
	w.kept--
	w.mu.Unlock()
}
