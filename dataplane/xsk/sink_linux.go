package xsk

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/internal/nexthop"
)

// A Sink is a pipeline.Sink.
var _ pipeline.Sink = (*Sink)(nil)

const (
	ethHdrLen  = 14
	etherIPv4  = 0x0800
	etherIPv6  = 0x86dd
	sinkFrames = 256 // most frames one Alloc, Free or Transmit call handles
)

// Sink is the forwarder's Sink on an AF_XDP socket: segments are cut
// straight into UMEM frames behind room for an Ethernet header, which
// Transmit fills in from the kernel's routing and neighbour tables.
type Sink struct {
	x     *Socket
	src   net.HardwareAddr
	neigh *nexthop.Resolver

	mu    sync.Mutex // the Socket's TX side is single-threaded
	addrs []uint64
	lens  []int

	lastDst    netip.Addr // the last destination, its MAC and until when (sink loop only)
	lastMAC    net.HardwareAddr
	lastExp    time.Time
	early      int // dropped frames Complete has yet to report
	unresolved atomic.Uint64
}

// NewSink returns a Sink transmitting on x, an AF_XDP socket of the
// interface with index ifindex, to gateway's MAC address or, if gateway is
// the zero Addr, to the next hop of each destination's route through the
// interface. Call it in the interface's network namespace: it opens a
// netlink handle there for next-hop lookups.
func NewSink(x *Socket, ifindex int, gateway netip.Addr) (*Sink, error) {
	ifi, err := net.InterfaceByIndex(ifindex)
	if err != nil {
		return nil, fmt.Errorf("xsk: sink: interface %d: %w", ifindex, err)
	}
	if len(ifi.HardwareAddr) != 6 {
		return nil, fmt.Errorf("xsk: sink: %s has no Ethernet address", ifi.Name)
	}
	n, err := nexthop.New(ifindex, gateway)
	if err != nil {
		return nil, err
	}
	return &Sink{x: x, src: ifi.HardwareAddr, neigh: n, addrs: make([]uint64, sinkFrames), lens: make([]int, sinkFrames)}, nil
}

// Close releases the sink's netlink handle; the Socket belongs to its port.
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
// TX ring. Waiting for the kernel to resolve a next hop holds the sink, and
// so the queue and the budget, for up to 3 s; a frame whose next
// hop does not resolve is dropped, counted (Unresolved) and reported by the
// next Complete, so that its charge is released like any other.
func (s *Sink) Transmit(frames []pipeline.Frame) (int, error) {
	n := min(len(frames), sinkFrames)
	now := time.Now()
	m := 0
	for m < n && s.link(frames[m], now) == nil {
		m++
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range frames[:m] {
		s.addrs[i], s.lens[i] = f.ID, ethHdrLen+f.Len
	}
	k, err := s.x.transmit(s.addrs[:m], s.lens[:m])
	if k == m && m < n {
		s.addrs[0] = frames[m].ID
		s.x.free(s.addrs[:1])
		s.unresolved.Add(1)
		s.early++
		k++
	}
	return k, err
}

// Unresolved returns how many frames were dropped for want of a next hop.
func (s *Sink) Unresolved() uint64 { return s.unresolved.Load() }

// link writes the Ethernet header in front of a frame's IP packet.
func (s *Sink) link(f pipeline.Frame, now time.Time) error {
	pkt := f.Buf[ethHdrLen : ethHdrLen+f.Len]
	dst, ether, ok := ipDst(pkt)
	if !ok {
		return fmt.Errorf("not an IP packet")
	}
	if dst != s.lastDst || s.lastMAC == nil || !now.Before(s.lastExp) {
		mac, err := s.neigh.Lookup(dst)
		if err != nil {
			return err
		}
		s.lastDst, s.lastMAC, s.lastExp = dst, mac, now.Add(nexthop.TTL)
	}
	copy(f.Buf[0:6], s.lastMAC)
	copy(f.Buf[6:12], s.src)
	binary.BigEndian.PutUint16(f.Buf[12:14], ether)
	return nil
}

// ipDst returns an IP packet's destination and EtherType.
func ipDst(pkt []byte) (netip.Addr, uint16, bool) {
	switch {
	case len(pkt) >= 20 && pkt[0]>>4 == 4:
		return netip.AddrFrom4([4]byte(pkt[16:20])), etherIPv4, true
	case len(pkt) >= 40 && pkt[0]>>4 == 6:
		return netip.AddrFrom16([16]byte(pkt[24:40])), etherIPv6, true
	}
	return netip.Addr{}, 0, false
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
// still on the TX ring.
func (s *Sink) Wait(d time.Duration) error {
	if err := s.x.waitCompletions(d); err != ErrClosed {
		return err
	}
	return nil // Complete reports nothing more; the forwarder stops by its queue
}
