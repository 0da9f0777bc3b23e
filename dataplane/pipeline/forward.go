package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gsoplane/gsoplane/segment"
	"github.com/gsoplane/gsoplane/txqueue"
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

// A Sink transmits IP packets from frames it owns and reports when they are
// gone. The forwarder calls Alloc and Free from its producer and Transmit,
// Complete and Wait from its sink loop, concurrently: a Sink must allow
// that. It must own at least BurstSegments frames: the forwarder takes
// the frames of a super-packet's segments, BurstSegments at most, at
// once, and drops a packet that needs more than the sink owns. Transmit and
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

// BurstSegments is the most segments the forwarder cuts and queues per
// admission of its budget. A super-packet of more (TSO at a small MSS: a
// 64 KiB one at MSS 88 has 745) is cut and queued BurstSegments at a time,
// each chunk admitted on its own, so that a Budget's Burst of
// BurstSegments truesizes bounds what every admission charges, however
// small the MSS. USO, the kernel's 128 segments at most, fits one chunk.
const BurstSegments = 128

// A Hook sees every segment before it is queued and returns false to drop
// it, like a netfilter hook; a super-packet an OffloadSink takes whole is
// seen whole. It runs on the forwarder's producer goroutine and must not
// keep pkt.
type Hook func(pkt []byte) bool

// ForwarderConfig configures a Forwarder.
type ForwarderConfig struct {
	Source     Source
	HeaderSize int // virtio-net header size of Source: segment.HeaderSize, HeaderSizeMrg or HeaderSizeTunnel
	Sink       Sink
	FrameSize  int // size of the sink's frames, for truesize

	// Budget charges every segment's truesize until its completion; the
	// producer stops reading the source while it is full. Nil turns
	// backpressure off (an ablation): then Queue should drop.
	Budget *txqueue.Budget
	Queue  *txqueue.Queue[Frame]

	Segmenter *segment.Segmenter
	Hook      Hook // nil: every segment passes
	Batch     int  // packets read per Source.Read; 0 → 32
	// TxRate caps the sink's rate in bits per second of IP packets, to
	// emulate a slower line; 0 → no cap.
	TxRate int64
	// MTU, if not 0, is the egress MTU: a packet whose segments would
	// exceed it is dropped (DropTooBig) and answered with Replier.TooBig,
	// as a router answers it. SetMTU changes it while running.
	MTU int
	// Replier answers the senders of packets dropped as too big; nil:
	// they are only counted.
	Replier Replier
	// DrainTime bounds how long Run, once stopped, waits for the queue to
	// empty; 0 → DefaultDrainTime.
	DrainTime time.Duration
}

// Forwarder moves super-packets from a Source through segmentation, the
// budget and the queue to a Sink. Run drives it.
type Forwarder struct {
	cfg   ForwarderConfig
	stats counters
	freed chan struct{} // signalled when the sink loop completes frames
	mtu   atomic.Int64  // see ForwarderConfig.MTU
	// The producer's and the sink loop's heartbeats (see Pulse).
	producing, sending heartbeat
}

// headerSizeOK reports a virtio-net header size a TUN device can have.
func headerSizeOK(n int) bool {
	return n == segment.HeaderSize || n == segment.HeaderSizeMrg || n == segment.HeaderSizeTunnel
}

// NewForwarder checks cfg and returns a Forwarder.
func NewForwarder(cfg ForwarderConfig) (*Forwarder, error) {
	switch {
	case cfg.Source == nil || cfg.Sink == nil || cfg.Queue == nil:
		return nil, fmt.Errorf("pipeline: %w: forwarder needs a Source, a Sink and a Queue", ErrInvalidConfig)
	case !headerSizeOK(cfg.HeaderSize):
		return nil, fmt.Errorf("pipeline: %w: virtio-net header size %d, want %d, %d or %d", ErrInvalidConfig, cfg.HeaderSize, segment.HeaderSize, segment.HeaderSizeMrg, segment.HeaderSizeTunnel)
	case cfg.FrameSize < cfg.Sink.Headroom()+576:
		return nil, fmt.Errorf("pipeline: %w: frame size %d too small", ErrInvalidConfig, cfg.FrameSize)
	case cfg.MTU < 0:
		return nil, fmt.Errorf("pipeline: %w: MTU %d", ErrInvalidConfig, cfg.MTU)
	}
	if cfg.Segmenter == nil {
		cfg.Segmenter = new(segment.Segmenter)
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 32
	}
	if cfg.DrainTime <= 0 {
		cfg.DrainTime = DefaultDrainTime
	}
	f := &Forwarder{cfg: cfg, freed: make(chan struct{}, 1)}
	f.mtu.Store(int64(cfg.MTU))
	return f, nil
}

// SetMTU sets the egress MTU (0: no limit); packets read from then on are
// held to it. The gateway calls it when the NIC's MTU changes.
func (f *Forwarder) SetMTU(mtu int) { f.mtu.Store(int64(max(mtu, 0))) }

// Run forwards until ctx ends, the source fails or the sink fails. Then it
// stops reading, lets the sink loop transmit what was queued (until the
// queue is empty, for at most DrainTime) and returns the error that ended
// it (nil when ctx ended). A Source.Read in progress is woken when ctx
// ends if the Source is a ReadDeadliner (tun.Queue is), and otherwise
// must return within a short while by itself: Run then returns as soon
// as the queue has drained (tested at 100 ms, idle and under load). After
// Run, Queue.Close releases whatever is still charged.
func (f *Forwarder) Run(ctx context.Context) error {
	prodCtx, stopProd := context.WithCancel(ctx)
	defer stopProd()
	defer wakeOnDone(prodCtx, f.cfg.Source)() // a failed sink wakes the producer too
	sinkCtx, stopSink := context.WithCancel(context.Background())
	var sinkErr error
	sinkDone := make(chan struct{})
	go func() {
		defer close(sinkDone)
		if sinkErr = f.sinkLoop(sinkCtx); sinkErr != nil {
			stopProd() // nothing will complete: stop taking packets
		}
	}()
	err := f.produce(prodCtx)
	f.drain(sinkDone)
	stopSink()
	<-sinkDone
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		err = nil
	}
	return errors.Join(err, sinkErr)
}

// DefaultDrainTime is how long Run waits, by default, for the queue to
// empty once it stops.
const DefaultDrainTime = time.Second

// drain waits until the queue is empty, DrainTime has passed or the sink
// loop has ended.
func (f *Forwarder) drain(sinkDone <-chan struct{}) {
	deadline := time.Now().Add(f.cfg.DrainTime)
	for time.Now().Before(deadline) {
		st := f.cfg.Queue.Stats()
		if st.Pending == 0 && st.InFlight == 0 {
			return
		}
		select {
		case <-sinkDone:
			return
		case <-time.After(time.Millisecond):
		}
	}
}

// Stats returns a snapshot of the forwarder's counters.
func (f *Forwarder) Stats() Stats { return f.stats.snapshot() }

// Pulses returns the pulses of the forwarder's two loops: the producer,
// which reads the source, and the sink loop, which transmits.
func (f *Forwarder) Pulses() [2]Pulse { return [2]Pulse{f.producing.pulse(), f.sending.pulse()} }

// signalFreed tells a producer waiting for frames that some came back.
func (f *Forwarder) signalFreed() {
	select {
	case f.freed <- struct{}{}:
	default:
	}
}
