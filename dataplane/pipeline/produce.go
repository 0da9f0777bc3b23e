package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gsoplane/gsoplane/segment"
	"github.com/gsoplane/gsoplane/txqueue"
)

var errNoFrames = errors.New("no free frames")

// maxSuperPacket is the largest packet a Source hands over: a 64 KiB IP
// packet behind the largest virtio-net header.
const maxSuperPacket = 65535 + 40 + segment.HeaderSizeTunnel

// producer is the forwarder's source side: it reads super-packets, cuts
// them into the sink's frames and queues the segments. Its buffers are
// allocated once.
type producer struct {
	f       *Forwarder
	offload OffloadSink        // the sink, if it offloads
	partial *segment.Segmenter // cuts with partial checksums, for OffloadCsum
	bufs    [][]byte           // read buffers
	sizes   []int
	frames  []Frame // one per segment of the packet at hand
	segs    [][]byte
	lens    []int
	items   []txqueue.Item[Frame]
	size    int // truesize of one segment
}

func newProducer(f *Forwarder) *producer {
	maxSegs := f.cfg.Segmenter.MaxSegments
	if maxSegs <= 0 {
		maxSegs = segment.DefaultMaxSegments
	}
	offload, _ := f.cfg.Sink.(OffloadSink)
	p := &producer{
		f:       f,
		offload: offload,
		partial: &segment.Segmenter{Partial: true, MaxSegments: f.cfg.Segmenter.MaxSegments},
		bufs:    make([][]byte, f.cfg.Batch),
		sizes:   make([]int, f.cfg.Batch),
		frames:  make([]Frame, maxSegs),
		segs:    make([][]byte, maxSegs),
		lens:    make([]int, maxSegs),
		items:   make([]txqueue.Item[Frame], 0, maxSegs),
		size:    txqueue.Truesize(f.cfg.FrameSize),
	}
	for i := range p.bufs {
		p.bufs[i] = make([]byte, maxSuperPacket)
	}
	return p
}

// produce reads batches from the source until ctx ends or the source
// fails. While the budget is full it does not read: the packets wait in
// the kernel and their senders feel it.
func (f *Forwarder) produce(ctx context.Context) error {
	p := newProducer(f)
	for {
		n, err := f.cfg.Source.Read(p.bufs, p.sizes, 0)
		for i := range n {
			if err := p.forward(ctx, p.bufs[i][:p.sizes[i]]); err != nil {
				return err
			}
		}
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, ErrPacketTruncated):
			f.stats.drop(DropInvalid, 1) // one packet larger than a buffer
		case err != nil:
			return fmt.Errorf("pipeline: %w: %w", ErrSourceClosed, err)
		}
	}
}

// forward handles one packet from the source, virtio-net header first.
// Bad packets are counted and dropped; only a context or budget error
// stops the producer.
func (p *producer) forward(ctx context.Context, raw []byte) error {
	cfg, st := &p.f.cfg, &p.f.stats
	st.superPackets.Add(1)
	h, err := segment.DecodeHeader(raw, cfg.HeaderSize)
	if err != nil {
		st.drop(DropInvalid, 1)
		return nil
	}
	pkt := raw[cfg.HeaderSize:]
	l, err := cfg.Segmenter.Validate(pkt, h)
	if err != nil {
		st.drop(DropInvalid, 1)
		return nil
	}
	if mtu := int(p.f.mtu.Load()); mtu > 0 && l.MaxSegLen() > mtu {
		st.drop(DropTooBig, 1)
		if cfg.Replier != nil {
			cfg.Replier.TooBig(pkt, mtu)
		}
		return nil
	}
	flow := flowKey(pkt, l)
	if cfg.Budget != nil {
		if err := cfg.Budget.Admit(ctx, flow); err != nil {
			return err
		}
	}
	mode := OffloadNone
	if p.offload != nil {
		mode = p.offload.Offload(l)
	}
	if mode == OffloadGSO && l.Segments() > 1 {
		return p.whole(ctx, pkt, l, flow)
	}
	frames := p.frames[:l.Segments()]
	if err := p.alloc(ctx, frames); err == errNoFrames {
		st.drop(DropNoFrames, 1)
		return nil
	} else if err != nil {
		return err
	}
	return p.split(ctx, pkt, l, frames, flow, mode == OffloadCsum)
}

// alloc fills frames from the sink, waiting for completions when every
// frame is in flight (see waitFreed).
func (p *producer) alloc(ctx context.Context, frames []Frame) error {
	got := p.f.cfg.Sink.Alloc(frames)
	for got < len(frames) {
		if err := p.waitFreed(ctx); err != nil {
			p.f.cfg.Sink.Free(frames[:got])
			return err
		}
		got += p.f.cfg.Sink.Alloc(frames[got:])
	}
	return nil
}

// allocLarge takes a frame for a whole super-packet of size bytes from an
// OffloadSink, waiting like alloc.
func (p *producer) allocLarge(ctx context.Context, size int) (Frame, error) {
	for {
		if f, ok := p.offload.AllocLarge(size); ok {
			return f, nil
		}
		if err := p.waitFreed(ctx); err != nil {
			return Frame{}, err
		}
	}
}

// waitFreed waits until the sink loop completes frames. Without a budget
// (backpressure off) it does not wait, and it gives up when no frame can
// come back (the sink has fewer frames than the packet needs): then it
// returns errNoFrames and the packet is dropped.
func (p *producer) waitFreed(ctx context.Context) error {
	if p.f.cfg.Budget == nil {
		return errNoFrames
	}
	if st := p.f.cfg.Queue.Stats(); st.Pending == 0 && st.InFlight == 0 {
		return errNoFrames
	}
	p.f.stats.frameStalls.Add(1)
	start := time.Now()
	select {
	case <-p.f.freed:
	case <-ctx.Done():
		return ctx.Err()
	}
	p.f.stats.frameStallNanos.Add(uint64(time.Since(start)))
	return nil
}

// whole hands a super-packet to an OffloadSink in one frame, charged as
// the segments the device will cut, and queues it.
func (p *producer) whole(ctx context.Context, pkt []byte, l segment.Layout, flow uint64) error {
	cfg, st := &p.f.cfg, &p.f.stats
	f, err := p.allocLarge(ctx, len(pkt))
	if err == errNoFrames {
		st.drop(DropNoFrames, 1)
		return nil
	} else if err != nil {
		return err
	}
	headroom, segs := cfg.Sink.Headroom(), l.Segments()
	p.frames[0] = f
	if len(f.Buf) < headroom+len(pkt) {
		cfg.Sink.Free(p.frames[:1])
		st.drop(DropOversize, 1)
		return nil
	}
	f.Len, f.Header = copy(f.Buf[headroom:], pkt), l.GSOHeader()
	st.segmented(segs)
	if cfg.Hook != nil && !cfg.Hook(f.Buf[headroom:headroom+f.Len]) {
		cfg.Sink.Free(p.frames[:1])
		st.drop(DropHook, segs)
		return nil
	}
	st.offloaded.Add(1)
	st.segments.Add(uint64(segs))
	st.bytes.Add(uint64(len(pkt) + (segs-1)*l.HdrLen()))
	p.items = append(p.items[:0], txqueue.Item[Frame]{Owner: cfg.Budget, Flow: flow, Size: segs * p.size, Value: f})
	return p.enqueue(ctx)
}

// split cuts pkt into frames (with partial checksums for an OffloadCsum
// sink), runs the hook and queues the segments.
func (p *producer) split(ctx context.Context, pkt []byte, l segment.Layout, frames []Frame, flow uint64, partial bool) error {
	cfg, st := &p.f.cfg, &p.f.stats
	headroom := cfg.Sink.Headroom()
	for i := range frames {
		p.segs[i] = frames[i].Buf
	}
	seg, hdr := cfg.Segmenter, segment.Header{}
	if partial {
		seg, hdr = p.partial, l.SegmentHeader(true)
	}
	n, err := seg.Split(pkt, l, p.segs[:len(frames)], p.lens, headroom)
	if err != nil { // segments larger than a frame
		cfg.Sink.Free(frames)
		st.drop(DropOversize, 1)
		return nil
	}
	p.f.stats.segmented(n)
	p.items = p.items[:0]
	bytes := 0
	for i := range n {
		frames[i].Len, frames[i].Header = p.lens[i], hdr
		if cfg.Hook != nil && !cfg.Hook(frames[i].Buf[headroom:headroom+p.lens[i]]) {
			cfg.Sink.Free(frames[i : i+1])
			st.drop(DropHook, 1)
			continue
		}
		bytes += p.lens[i]
		p.items = append(p.items, txqueue.Item[Frame]{Owner: cfg.Budget, Flow: flow, Size: p.size, Value: frames[i]})
	}
	st.segments.Add(uint64(len(p.items))) // once per super-packet: the counters are shared
	st.bytes.Add(uint64(bytes))
	return p.enqueue(ctx)
}

// enqueue queues p.items. What a DropTail queue refuses is counted and its
// frames are freed.
func (p *producer) enqueue(ctx context.Context) error {
	q := p.f.cfg.Queue
	n, err := q.Enqueue(ctx, p.items)
	if err == nil {
		return nil
	}
	rest := p.frames[:0]
	for _, it := range p.items[n:] {
		rest = append(rest, it.Value)
	}
	p.f.cfg.Sink.Free(rest)
	if errors.Is(err, txqueue.ErrQueueFull) {
		p.f.stats.drop(DropQueueFull, len(p.items)-n)
		return nil
	}
	return err
}
