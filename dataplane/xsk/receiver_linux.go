package xsk

// The receive side of a socket: the RX ring, the fill ring, and the
// reassembly of multi-buffer packets.
//
// A packet that fits one UMEM frame comes as one RX descriptor and is
// handed over as a view into its frame (zero-copy), which goes back to
// the fill ring when the caller is done with it. A longer one (multi-
// buffer: the socket bound with XDP_USE_SG) comes as a chain of
// descriptors, each but the last with XDP_PKT_CONTD in its options, one
// UMEM frame each; Receive must hand it over as one contiguous packet,
// so its bytes are copied, once, into the socket's arena, and its frames
// go back to the fill ring at once. The ring is read descriptor by
// descriptor: a chain may wrap around the ring's end, and one whose end
// the kernel has not put on the ring yet goes on in the next receive (in
// copy mode the kernel puts a chain on the ring whole, or drops it).
// A chain of more than maxChain descriptors, or with a descriptor that
// is not one of the socket's RX frames in the kernel's hands, is
// dropped and counted; every frame of the socket it names goes back to
// the fill ring. Nothing marks where a chain starts but the end of the
// one before, so a chain cut short by the kernel would run into the next
// packet: the maxChain bound holds such a run to that many frames.

import (
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/internal/copycount"
	"github.com/gsoplane/gsoplane/internal/ethernet"
	"github.com/gsoplane/gsoplane/segment"
)

// rxFront is the room the Receiver's views keep in front of a received
// Ethernet frame: with the Ethernet header's 14 bytes, room for the
// largest virtio-net header (segment.HeaderSizeTunnel) that a return path
// writes in front of the IP packet. A frame in its own UMEM frame has it
// within the XDP_PACKET_HEADROOM the kernel leaves before the packet; a
// chain copied into the arena has it before its copy.
const rxFront = segment.HeaderSizeTunnel - ethHdrLen

// xskArenaChains is how many chains of the most frames the arena holds:
// so many multi-buffer packets of the largest size, or more smaller ones,
// fit one receive.
const xskArenaChains = 4

// rxChain is the chain being received: its bytes so far, copied into the
// arena, and its state.
type rxChain struct {
	start, end int  // its bytes in the arena
	frames     int  // descriptors so far; 0: no chain is being received
	broken     bool // a descriptor was bad
}

// initChains sets the most frames of a received packet and makes the
// arena for multi-buffer packets (none with maxChain 1: every chain is
// then dropped).
func (x *Socket) initChains(maxChain int) {
	x.maxChain = maxChain
	if maxChain > 1 {
		x.chainRoom = rxFront + maxChain*x.frameSize
		x.arena = make([]byte, xskArenaChains*x.chainRoom)
	}
}

// multiBuffer reports whether the socket receives multi-buffer packets.
func (x *Socket) multiBuffer() bool { return x.maxChain > 1 }

// receive returns up to len(bufs) received packets (Ethernet frames,
// each behind front bytes of room, front at most rxFront) and how many
// frames it put in addrs. A packet in one UMEM frame is a view
// into its frame, valid until the frame is recycled, and its frame's
// address goes into addrs, to give back with recycle. A multi-buffer
// packet is a view into the arena, valid until the next receive, and its
// frames go back to the fill ring at once. 0, 0 when none is waiting
// (see waitRX).
func (x *Socket) receive(bufs [][]byte, addrs []uint64, front int) (n, m int) {
	if !x.enter() {
		return 0, 0
	}
	defer x.mu.RUnlock()
	if x.chain.frames == 0 {
		x.arenaPos = 0
	}
	prod := x.rx.loadProducer()
	for ; x.rx.local != prod; x.rx.local++ {
		d := x.rx.descs[x.rx.local&x.rx.mask]
		chained := x.chain.frames > 0 || d.Options&unix.XDP_PKT_CONTD != 0
		if x.chain.frames == 0 && !x.rxRoom(chained, len(bufs)-n, len(addrs)-m) {
			break
		}
		base, good := x.rxTake(d, chained)
		switch {
		case chained:
			if c := x.chainAdd(d, good); c != nil {
				bufs[n] = x.arena[c.start-front : c.end : c.end]
				n++
			}
		case good:
			bufs[n] = x.umem[d.Addr-uint64(front) : d.Addr+uint64(d.Len) : base+uint64(x.frameSize)]
			addrs[m] = base
			n, m = n+1, m+1
		}
	}
	x.rx.publishConsumer()
	x.st.rx.Add(uint64(n))
	if len(x.rxSpare) > 0 {
		x.fillFromSpare()
		x.kickFill()
	}
	return n, m
}

// rxRoom reports whether a packet may start with room for bufs more
// packets and addrs more frames: a chain needs the arena's room for the
// most frames, a packet in one frame an address.
func (x *Socket) rxRoom(chained bool, bufs, addrs int) bool {
	if chained {
		return bufs > 0 && len(x.arena)-x.arenaPos >= x.chainRoom
	}
	return bufs > 0 && addrs > 0
}

// rxTake takes the frame of descriptor d from the kernel: the frame
// becomes the caller's if it holds a packet on its own, else (a chain, or
// a bad descriptor) it goes back to the spare frames. It returns the
// frame's address and whether d is good: one of the socket's RX frames
// in the kernel's hands, the packet within it and rxFront bytes or more
// from its start (the kernel leaves XDP_PACKET_HEADROOM). A bad descriptor is
// counted (BadFrames); a frame that is not the kernel's is left alone.
func (x *Socket) rxTake(d unix.XDPDesc, chained bool) (base uint64, good bool) {
	base = d.Addr &^ uint64(x.frameSize-1)
	f, ok := x.frameIndex(base)
	if !ok || f >= x.rxFrames || x.state[f] != xskFrameKernel {
		x.st.badFrames.Add(1)
		return base, false
	}
	good = d.Addr >= base+rxFront && d.Addr+uint64(d.Len) <= base+uint64(x.frameSize)
	if !good {
		x.st.badFrames.Add(1)
	}
	if good && !chained {
		x.state[f] = xskFrameUser
		return base, true
	}
	x.state[f] = xskFrameSpare
	x.rxSpare = append(x.rxSpare, base)
	return base, good
}

// chainAdd adds descriptor d to the chain being received (starting one,
// rxFront bytes into the arena's free room) and returns the chain if d
// ends it and it is kept.
func (x *Socket) chainAdd(d unix.XDPDesc, good bool) *rxChain {
	c := &x.chain
	if c.frames == 0 {
		*c = rxChain{start: x.arenaPos + rxFront, end: x.arenaPos + rxFront}
	}
	c.frames++
	switch {
	case !good:
		c.broken = true
	case c.frames <= x.maxChain && !c.broken && x.multiBuffer():
		src := x.umem[d.Addr : d.Addr+uint64(d.Len)]
		n := copy(x.arena[c.end:], src)
		copycount.Add(x.arena[c.end:c.end+n], src)
		c.end += n
	}
	if d.Options&unix.XDP_PKT_CONTD != 0 {
		return nil
	}
	return x.chainEnd()
}

// chainEnd ends the chain being received: it returns it, or nil for a
// chain that is too long or broken (a bad descriptor, or shorter than an
// Ethernet header), counted.
func (x *Socket) chainEnd() *rxChain {
	c := &x.chain
	frames := c.frames
	c.frames = 0
	switch {
	case frames > x.maxChain:
		x.st.chainTooLong.Add(1)
	case c.broken || c.end-c.start < ethHdrLen:
		x.st.chainBroken.Add(1)
	default:
		x.arenaPos = c.end
		x.st.multiBuffer.Add(1)
		return c
	}
	return nil
}

// recycle gives received frames back to the kernel (fill ring). Addresses
// that are not received frames are counted (BadFrames) and ignored.
func (x *Socket) recycle(addrs []uint64) {
	if !x.enter() {
		return
	}
	defer x.mu.RUnlock()
	for _, a := range addrs {
		f, ok := x.frameIndex(a)
		if !ok || f >= x.rxFrames || x.state[f] != xskFrameUser {
			x.st.badFrames.Add(1)
			continue
		}
		x.state[f] = xskFrameSpare
		x.rxSpare = append(x.rxSpare, a)
	}
	x.fillFromSpare()
	x.kickFill()
}

// fillFromSpare moves spare RX frames into the fill ring while it has room.
func (x *Socket) fillFromSpare() {
	room := x.fill.size - (x.fill.local - x.fill.loadConsumer())
	n := min(int(room), len(x.rxSpare))
	if n == 0 {
		return
	}
	top := len(x.rxSpare) - n
	for i, a := range x.rxSpare[top:] {
		x.state[a>>x.frameShift] = xskFrameKernel
		x.fill.descs[(x.fill.local+uint32(i))&x.fill.mask] = a
	}
	x.rxSpare = x.rxSpare[:top]
	x.fill.local += uint32(n)
	x.fill.publishProducer()
}

// receiver is a socket's receive side as a frame.Receiver.
type receiver struct {
	x     *Socket
	addrs []uint64 // the frames of the last Receive, given back by the next
}

var _ frame.Receiver = (*receiver)(nil)

// Receiver returns the socket's receive side as a frame.Receiver: each
// Receive gives the frames of the previous one back to the kernel (fill
// ring), then returns the Ethernet frames waiting, waiting (through the
// Go runtime's netpoller) until one comes, the port stops receiving
// (Port.StopReceive: then it returns none) or the port is closed. A
// frame in one UMEM frame is handed over in place; a multi-buffer one
// (a chain of UMEM frames) is copied into one buffer of the socket.
// Either stays valid until the next Receive. A frame whose EtherType is
// not IPv4 or IPv6, or does not match its IP version, comes back with an
// empty packet (the return path counts it as invalid). Use one Receiver
// per socket, from one goroutine.
func (x *Socket) Receiver() frame.Receiver { return &receiver{x: x} }

// Headroom is the Ethernet header and the room in front of it (rxFront):
// 24 bytes, the largest virtio-net header.
func (r *receiver) Headroom() int { return rxFront + ethHdrLen }

func (r *receiver) Receive(frames [][]byte) (int, error) {
	r.x.recycle(r.addrs)
	if cap(r.addrs) < len(frames) {
		r.addrs = make([]uint64, len(frames))
	}
	r.addrs = r.addrs[:len(frames)]
	n, m := r.x.receive(frames, r.addrs, rxFront)
	for n == 0 {
		if err := r.x.waitRX(); err != nil {
			r.addrs = r.addrs[:0]
			if err == errStopped {
				return 0, nil
			}
			return 0, err
		}
		n, m = r.x.receive(frames, r.addrs, rxFront)
	}
	r.addrs = r.addrs[:m]
	for i, f := range frames[:n] {
		if !ethernet.IsIP(f[rxFront:]) {
			frames[i] = f[:rxFront+ethHdrLen] // within the frame: an empty packet
		}
	}
	return n, nil
}
