package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/segment"
	"github.com/gsoplane/gsoplane/txqueue"
)

// A Hook sees every segment before it is queued and returns false to drop
// it, like a netfilter hook; a super-packet an OffloadSink takes whole is
// seen whole. It runs on the forwarder's producer goroutine and must not
// keep pkt.
type Hook func(pkt []byte) bool

// ForwarderConfig configures a Forwarder.
type ForwarderConfig struct {
	Source     frame.Source
	HeaderSize int // virtio-net header size of Source: segment.HeaderSize, HeaderSizeMrg or HeaderSizeTunnel
	Sink       frame.Sink
	FrameSize  int // size of the sink's frames, for truesize

	// Budget charges every segment's truesize until its completion; the
	// producer stops reading the source while it is full. Nil turns
	// backpressure off (an ablation): then Queue should drop.
	Budget *txqueue.Budget
	Queue  *txqueue.Queue[frame.Frame]

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
	Replier frame.Replier
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

	// Run to completion (a SyncSink, no TxRate): the producer transmits
	// what it queues itself while the sink loop is idle. snd is the sink
	// side's state, used by whoever holds tx; kick wakes the sink loop
	// for what the producer left or could not take.
	inline bool
	tx     sync.Mutex
	snd    *sender
	kick   chan struct{}
}

// headerSizeOK reports a virtio-net header size a TUN device can have.
func headerSizeOK(n int) bool {
	return n == segment.HeaderSize || n == segment.HeaderSizeMrg || n == segment.HeaderSizeTunnel
}

// NewForwarder checks cfg and returns a Forwarder.
func NewForwarder(cfg ForwarderConfig) (*Forwarder, error) {
	switch {
	case cfg.Source == nil || cfg.Sink == nil || cfg.Queue == nil:
		return nil, fmt.Errorf("pipeline: %w: forwarder needs a Source, a Sink and a Queue", frame.ErrInvalidConfig)
	case !headerSizeOK(cfg.HeaderSize):
		return nil, fmt.Errorf("pipeline: %w: virtio-net header size %d, want %d, %d or %d", frame.ErrInvalidConfig, cfg.HeaderSize, segment.HeaderSize, segment.HeaderSizeMrg, segment.HeaderSizeTunnel)
	case cfg.FrameSize < cfg.Sink.Headroom()+576:
		return nil, fmt.Errorf("pipeline: %w: frame size %d too small", frame.ErrInvalidConfig, cfg.FrameSize)
	case cfg.MTU < 0:
		return nil, fmt.Errorf("pipeline: %w: MTU %d", frame.ErrInvalidConfig, cfg.MTU)
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
	f := &Forwarder{cfg: cfg, freed: make(chan struct{}, 1), kick: make(chan struct{}, 1)}
	if s, ok := cfg.Sink.(frame.SyncSink); ok && s.CompletesOnTransmit() && cfg.TxRate <= 0 {
		f.inline = true
	}
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
	f.snd = newSender(f)
	go func() {
		defer close(sinkDone)
		if sinkErr = f.sinkLoop(sinkCtx, f.snd); sinkErr != nil {
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
