package frame

import (
	"time"

	"github.com/gsoplane/gsoplane/segment"
)

// A Source yields packets, each behind its virtio-net header: packet i of a
// batch at bufs[i][offset:offset+sizes[i]]. tun.Queue is one. An error
// wrapping ErrPacketTruncated loses one packet and is not fatal; any other
// error ends the forwarder.
type Source interface {
	Read(bufs [][]byte, sizes []int, offset int) (n int, err error)
}

// A Frame is one transmit buffer owned by a Sink.
type Frame struct {
	Buf []byte // the packet goes at Buf[Sink.Headroom():]
	Len int    // the packet's length, without the headroom
	ID  uint64 // the sink's handle, such as a UMEM address
	// Header describes the packet to an OffloadSink: all zero for a
	// complete packet, NEEDS_CSUM for a partial checksum (OffloadCsum), a
	// GSO type for a whole super-packet (OffloadGSO).
	Header segment.Header
}

// Offload is what an OffloadSink's device finishes itself.
type Offload int

// What a device may finish.
const (
	OffloadNone Offload = iota // nothing: complete segments, checksums included
	OffloadCsum                // checksums: segments with partial checksums
	OffloadGSO                 // segmentation: the whole super-packet in one frame
)

// An OffloadSink is a Sink whose device checksums or segments packets
// itself, such as an AF_PACKET socket with a virtio-net header per packet
// on a NIC with TSO. The forwarder asks it per super-packet; with
// OffloadGSO it still charges the budget every future segment's truesize,
// released when the frame completes. A super-packet of more than
// BurstSegments segments is cut here instead, as for OffloadCsum: a
// device that segments packets completes their checksums.
//
// Where the sink's headroom has room for the source's virtio-net header
// and its large frames for the largest packet, the forwarder reads
// packets straight into large frames it takes before it knows them, the
// packet at the headroom as always: a super-packet the device segments
// then leaves from the frame it was read into, without a copy
// (Stats.InPlace). A frame whose packet was cut into small frames, or
// that no packet was read into, stays with the forwarder for its next
// read, and all are freed when it stops: it may hold every free large
// frame while the source is idle. A sink that hands nothing whole (its
// device segments nothing) should return no large frame, so that none is
// taken in vain.
type OffloadSink interface {
	Sink
	// Offload says what the device finishes for packets of this layout.
	Offload(l segment.Layout) Offload
	// AllocLarge takes a free frame with room for a whole super-packet of
	// size bytes after the headroom; false when none is free.
	AllocLarge(size int) (Frame, bool)
}

// A BackloggedSink is a Sink with work of its own: frames whose
// completion it reported but that it keeps to send later, such as frames
// waiting for their next hop (the NIC ports' sinks). Backlog returns a
// channel that is ready when Transmit, called with no frames, has some
// of them to send or drop, or nil while it keeps none. The sink loop
// waits for it beside the queue, and calls it from the same goroutine as
// Transmit.
type BackloggedSink interface {
	Sink
	Backlog() <-chan struct{}
}

// A SyncSink is a Sink whose frames are gone once Transmit has taken
// them, as a packet socket's sendmmsg copies them: Complete reports them
// at once. While its sink loop is idle, the forwarder transmits on one
// from its producer goroutine, right after queueing (run to completion),
// rather than waking the sink loop for every batch; the sink loop takes
// over what Transmit left (a full device queue) and waits for the sink.
// Transmit, Complete and Wait are still called by one goroutine at a
// time. afpacket.Sink is one. udp.Sink, though as synchronous, is not:
// its sendmmsg of tens of datagrams per super-packet, batched across
// super-packets by a sink loop of its own, measured faster in the
// tunnel (docs/design.md).
type SyncSink interface {
	Sink
	// CompletesOnTransmit reports whether the sink is synchronous as
	// above; false makes it a plain Sink.
	CompletesOnTransmit() bool
}

// A Sink transmits IP packets from frames it owns and reports when they are
// gone. The forwarder calls Alloc and Free from its producer and Transmit,
// Complete and Wait from its sink loop (a SyncSink's from its producer
// too, one goroutine at a time), concurrently: a Sink must allow that.
// It must own at least BurstSegments frames: the forwarder takes the
// frames of a super-packet's segments, BurstSegments at most, at once,
// and drops a packet that needs more than the sink owns. Transmit and
// Complete return an error only when the sink can no longer send: that
// stops the forwarder; transient conditions are the sink's to retry and
// count. xsk.Sink and udp.Sink are Sinks.
type Sink interface {
	// Headroom is the space before each packet that the sink fills in
	// itself, such as a link-layer header.
	Headroom() int
	// Alloc fills frames with free frames, at most len(frames), and
	// returns how many; 0 when every frame is in flight.
	Alloc(frames []Frame) int
	// Free returns frames that were allocated but not transmitted.
	Free(frames []Frame)
	// Transmit sends frames in order and returns how many it took; the
	// rest are offered again later.
	Transmit(frames []Frame) (int, error)
	// Complete returns how many transmitted frames are gone since the last
	// call, in Transmit order; their frames are free again.
	Complete() (int, error)
	// Wait blocks for at most d until Complete may report more. An
	// error from Transmit, Complete or Wait ends the forwarder.
	Wait(d time.Duration) error
}

// BurstSegments is the most segments the forwarder (pipeline.Forwarder)
// cuts and queues per admission of its budget, and so the fewest frames a
// Sink owns. A super-packet of more (TSO at a small MSS: a
// 64 KiB one at MSS 88 has 745) is cut and queued BurstSegments at a time,
// each chunk admitted on its own, so that a Budget's Burst of
// BurstSegments truesizes bounds what every admission charges, however
// small the MSS. USO, the kernel's 128 segments at most, fits one chunk.
const BurstSegments = 128

// A Replier answers the sender of a packet the dataplane drops, as a
// router does. The forwarder and a WireSource call TooBig, a WireSource
// TimeExceeded, a sink Unreachable; each may be called from several
// goroutines and must not keep pkt.
type Replier interface {
	// Unreachable: the next hop of pkt did not resolve.
	Unreachable(pkt []byte)
	// TooBig: pkt, or each of its segments, exceeds the egress MTU.
	TooBig(pkt []byte, mtu int)
	// TimeExceeded: pkt arrived with a TTL (hop limit) of 1 or less.
	TimeExceeded(pkt []byte)
}

// A Receiver is a port's receive side. Receive returns up to len(frames)
// received frames, views into the port's memory that stay valid until the
// next Receive, which gives them back to the port. The IP packet of frame
// i is frames[i][Headroom():]: the headroom (a link-layer header, a
// tunnel's header) is at least as long as a virtio-net header, and the
// return path writes one there. A frame whose packet is empty is one the
// receiver refused (a bad link-layer header) and is counted as invalid.
// Receive either waits a short while for frames (a poll timeout, as the
// AF_XDP and AF_PACKET receivers do) and may return 0 with a nil error,
// or blocks until frames come and is then a ReadDeadliner (udp.Receiver
// is), so that a ReturnPath or WireSource wakes it when its context
// ends; an error wrapping net.ErrClosed means the port was closed.
type Receiver interface {
	Receive(frames [][]byte) (int, error)
	Headroom() int
}

// A HeaderReceiver is a Receiver whose frames carry the virtio-net header
// the kernel gave them, such as an AF_PACKET socket with PACKET_VNET_HDR,
// behind which the kernel's own GRO may have merged packets already:
// Header(i) is that of frame i of the last Receive. A frame with a GSO
// type or a partial checksum goes into the writer whole, with its header,
// but for a BIG TCP super-packet (longer than an IP length field can say,
// segment.IsBig), which is cut into TSO super-packets of at most 65535
// bytes first; the others go on as from any Receiver.
type HeaderReceiver interface {
	Receiver
	Header(i int) segment.Header
}

// An IntoReceiver is a Receiver that can also receive into buffers its
// caller gives, as a packet socket's recvmmsg does into any memory: a
// WireSource whose forwarder reads into an OffloadSink's large frames
// then copies nothing. ReceiveInto is Receive with frame i received into
// bufs[i] from its start (the headroom, then the IP packet) and frames[i]
// a view of bufs[i]; a HeaderReceiver's Header(i) describes it as after
// Receive. A frame longer than bufs[i] is cut short: frames[i] is then
// nil and bufs[i] holds its start (the receiver counts it as
// truncated). afpacket's Receiver is one.
type IntoReceiver interface {
	Receiver
	ReceiveInto(bufs, frames [][]byte) (int, error)
}

// A Writer writes packets, bufs[i][offset:] each, virtio-net header
// first, in order, and returns how many it wrote; on error, bufs[n] is
// the packet that failed. tun.Queue is one.
type Writer interface {
	Write(bufs [][]byte, offset int) (int, error)
}

// A VectorWriter is a Writer that also writes packets given in pieces:
// packet i is the concatenation of pkts[i], virtio-net header first, as a
// segment.Coalescer produces them. tun.Queue is one.
type VectorWriter interface {
	Writer
	WriteVectors(pkts [][][]byte) (int, error)
}

// A ReadDeadliner is a Source or Receiver whose Read or Receive blocks
// until packets come, and which a read deadline wakes: once the deadline
// has passed, a Read or Receive in progress or to come returns an error
// wrapping os.ErrDeadlineExceeded. tun.Queue, udp.Receiver and a
// WireSource over one are ReadDeadliners. A Forwarder, a ReturnPath and a
// WireSource set a deadline in the past on their Source or Receiver when
// their context ends, which is how their Run returns promptly on cancel
// without the device being closed; Run clears the deadline when it
// starts. Nothing is done per packet.
type ReadDeadliner interface {
	SetReadDeadline(t time.Time) error
}
