package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/internal/copycount"
	"github.com/gsoplane/gsoplane/segment"
	"github.com/gsoplane/gsoplane/txqueue"
)

var errNoFrames = errors.New("no free frames")

// maxPacket is the largest IP packet a Source hands over (IPv6 with a
// 64 KiB payload), maxSuperPacket the same behind the largest virtio-net
// header (a UDP tunnel's).
const (
	maxPacket      = 65535 + 40
	maxSuperPacket = maxPacket + segment.HeaderSizeTunnel
)

// producer is the forwarder's source side: it reads super-packets, cuts
// them into the sink's frames and queues the segments. Its buffers are
// allocated once.
type producer struct {
	f        *Forwarder
	offload  frame.OffloadSink  // the sink, if it offloads
	partial  *segment.Segmenter // cuts with partial checksums, for OffloadCsum
	bufs     [][]byte           // read buffers: own, or lent (see lend)
	own      [][]byte           // the producer's own read buffers
	off      int                // where the packets go in bufs: a large frame's headroom less the header
	sizes    []int
	lent     []frame.Frame // large frames bufs[:nLent] read into; Buf nil once a packet left in it
	nLent    int
	lends    bool          // the sink's large frames can be read into
	waitLend bool          // the last super-packet left whole: wait for a large frame to read into
	frames   []frame.Frame // one per segment of the chunk at hand (see BurstSegments)
	segs     [][]byte
	lens     []int
	items    []txqueue.Item[frame.Frame]
	size     int // truesize of one segment
}

func newProducer(f *Forwarder) *producer {
	offload, _ := f.cfg.Sink.(frame.OffloadSink)
	p := &producer{
		f:       f,
		offload: offload,
		partial: &segment.Segmenter{Partial: true, MaxSegments: f.cfg.Segmenter.MaxSegments},
		bufs:    make([][]byte, f.cfg.Batch),
		own:     make([][]byte, f.cfg.Batch),
		sizes:   make([]int, f.cfg.Batch),
		lent:    make([]frame.Frame, f.cfg.Batch),
		lends:   offload != nil && f.cfg.Sink.Headroom() >= f.cfg.HeaderSize,
		frames:  make([]frame.Frame, frame.BurstSegments),
		segs:    make([][]byte, frame.BurstSegments),
		lens:    make([]int, frame.BurstSegments),
		items:   make([]txqueue.Item[frame.Frame], 0, frame.BurstSegments),
		size:    txqueue.Truesize(f.cfg.FrameSize),
	}
	if p.lends {
		p.off = f.cfg.Sink.Headroom() - f.cfg.HeaderSize
	}
	for i := range p.own {
		p.own[i] = make([]byte, p.off+maxSuperPacket)
	}
	copy(p.bufs, p.own)
	return p
}

// produce reads batches from the source until ctx ends or the source
// fails. While the budget is full it does not read: the packets wait in
// the kernel and their senders feel it.
func (f *Forwarder) produce(ctx context.Context) error {
	p := newProducer(f)
	defer p.giveBack()
	for {
		f.producing.beat()
		bufs, err := p.lend(ctx)
		if err != nil {
			return err
		}
		n, err := p.read(bufs)
		for i := range n {
			if err := p.forward(ctx, p.bufs[i][p.off:p.off+p.sizes[i]], i); err != nil {
				return err
			}
		}
		p.keepLent()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, frame.ErrPacketTruncated):
			f.stats.drop(frame.DropInvalid, 1) // one packet larger than a buffer
		case err != nil:
			return fmt.Errorf("pipeline: %w: %w", ErrSourceClosed, err)
		}
	}
}

// read reads a batch from the source, waiting for work (see Pulse).
func (p *producer) read(bufs [][]byte) (int, error) {
	p.f.producing.wait()
	defer p.f.producing.woke()
	return p.f.cfg.Source.Read(bufs, p.sizes, p.off)
}

// forward handles packet i of the batch read, raw, virtio-net header
// first. Bad packets are counted and dropped; only a context or budget
// error stops the producer.
func (p *producer) forward(ctx context.Context, raw []byte, i int) error {
	cfg, st := &p.f.cfg, &p.f.stats
	st.superPackets.Add(1)
	h, err := segment.DecodeHeader(raw, cfg.HeaderSize)
	if err != nil {
		st.drop(frame.DropInvalid, 1)
		return nil
	}
	pkt := raw[cfg.HeaderSize:]
	l, err := cfg.Segmenter.Validate(pkt, h)
	if err != nil {
		st.drop(frame.DropInvalid, 1)
		return nil
	}
	if mtu := int(p.f.mtu.Load()); mtu > 0 && l.MaxSegLen() > mtu {
		st.drop(frame.DropTooBig, 1)
		if cfg.Replier != nil {
			cfg.Replier.TooBig(pkt, mtu)
		}
		return nil
	}
	flow := flowKey(pkt, l)
	if cfg.Budget != nil {
		p.f.producing.wait() // while the budget is full: for the sink loop
		err := cfg.Budget.Admit(ctx, flow)
		p.f.producing.woke()
		if err != nil {
			return err
		}
	}
	mode := p.offloadMode(l)
	p.waitLend = mode == frame.OffloadGSO && l.Segments() > 1
	if p.waitLend {
		return p.whole(ctx, pkt, l, flow, i)
	}
	return p.split(ctx, pkt, l, flow, mode == frame.OffloadCsum)
}

// offloadMode asks the sink what its device finishes for l. A
// super-packet of more than BurstSegments segments is not handed whole,
// since its charge would exceed one admission's: it is cut here, its
// checksums left to the device, which completes those of what it
// segments.
func (p *producer) offloadMode(l segment.Layout) frame.Offload {
	if p.offload == nil {
		return frame.OffloadNone
	}
	mode := p.offload.Offload(l)
	if mode == frame.OffloadGSO && l.Segments() > frame.BurstSegments {
		return frame.OffloadCsum
	}
	return mode
}

// alloc fills frames from the sink, waiting for completions when every
// frame is in flight (see waitFreed).
func (p *producer) alloc(ctx context.Context, frames []frame.Frame) error {
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
func (p *producer) allocLarge(ctx context.Context, size int) (frame.Frame, error) {
	for {
		if f, ok := p.offload.AllocLarge(size); ok {
			return f, nil
		}
		if err := p.waitFreed(ctx); err != nil {
			return frame.Frame{}, err
		}
	}
}

// waitFreed waits until the sink loop completes frames. Without a budget
// (backpressure off) it does not wait, and it gives up when no frame can
// come back (the sink has fewer frames than the packet needs): then it
// returns errNoFrames and the packet is dropped. Frames that came back
// since the caller's failed Alloc (the queue emptied meanwhile) are
// signalled before the queue shows them gone: then it returns at once,
// and the caller allocates again.
func (p *producer) waitFreed(ctx context.Context) error {
	if p.f.cfg.Budget == nil {
		return errNoFrames
	}
	if st := p.f.cfg.Queue.Stats(); st.Pending == 0 && st.InFlight == 0 {
		select {
		case <-p.f.freed:
			return nil
		default:
			return errNoFrames
		}
	}
	p.f.stats.frameStalls.Add(1)
	start := time.Now()
	p.f.producing.wait()
	defer p.f.producing.woke()
	select {
	case <-p.f.freed:
	case <-ctx.Done():
		return ctx.Err()
	}
	p.f.stats.frameStallNanos.Add(uint64(time.Since(start)))
	return nil
}

// whole hands a super-packet, packet i of the batch read, to an
// OffloadSink in one frame, charged as the segments the device will cut,
// and queues it. The frame is the one the packet was read into, if it was
// lent (no copy), else a new one the packet is copied into.
func (p *producer) whole(ctx context.Context, pkt []byte, l segment.Layout, flow uint64, i int) error {
	cfg, st := &p.f.cfg, &p.f.stats
	headroom, segs := cfg.Sink.Headroom(), l.Segments()
	f, inPlace, err := p.largeFrame(ctx, pkt, i)
	switch {
	case err == errNoFrames:
		st.drop(frame.DropNoFrames, 1)
		return nil
	case err != nil:
		return err
	case len(f.Buf) < headroom+len(pkt):
		p.frames[0] = f
		cfg.Sink.Free(p.frames[:1])
		st.drop(frame.DropOversize, 1)
		return nil
	}
	p.frames[0] = f
	f.Header = l.GSOHeader()
	if !inPlace {
		f.Len = copy(f.Buf[headroom:], pkt)
		copycount.Add(f.Buf[headroom:headroom+f.Len], pkt)
	}
	st.segmented(segs)
	if cfg.Hook != nil && !cfg.Hook(f.Buf[headroom:headroom+f.Len]) {
		cfg.Sink.Free(p.frames[:1])
		st.drop(frame.DropHook, segs)
		return nil
	}
	st.offloaded.Add(1)
	if inPlace {
		st.inPlace.Add(1)
	}
	st.segments.Add(uint64(segs))
	st.bytes.Add(uint64(len(pkt) + (segs-1)*l.HdrLen()))
	p.items = append(p.items[:0], txqueue.Item[frame.Frame]{Owner: cfg.Budget, Flow: flow, Size: segs * p.size, Value: f})
	return p.enqueue(ctx)
}

// largeFrame returns the frame packet i of the batch read, pkt, was read
// into, with its length set, taking it from the lent ones (inPlace); or,
// if it was read into the producer's own buffer, a free large frame for
// the caller to copy pkt into, waiting like alloc.
func (p *producer) largeFrame(ctx context.Context, pkt []byte, i int) (f frame.Frame, inPlace bool, err error) {
	if i < p.nLent && p.lent[i].Buf != nil {
		f = p.lent[i]
		p.lent[i].Buf = nil // handed over: keepLent drops it
		f.Len = len(pkt)
		return f, true, nil
	}
	f, err = p.allocLarge(ctx, len(pkt))
	return f, false, err
}

// lend points the read buffers at large frames of an OffloadSink, the
// super-packet in each at the sink's headroom, so that one the device
// segments leaves in the frame it was read into, without a copy, and
// returns the buffers to read into. The frames stay lent from one read
// to the next until a packet leaves in them (keepLent), and lend only
// tops them up with the free ones. While it holds any, it reads into
// them only: a super-packet in a buffer of the producer's own would need
// a free large frame, and none may come back while it holds them. When
// it holds none, it waits for one if the last super-packet left whole
// (the next one most likely will too, and reading it elsewhere would
// cost a copy), else it reads into its own buffers. A sink whose large
// frames cannot hold the largest packet lends none. The buffers are the
// whole frames, read into at p.off (the packet at the headroom), so that
// a source that receives from a wire in place (a WireSource over a
// frame.IntoReceiver) has room in front for what its port writes there.
func (p *producer) lend(ctx context.Context) ([][]byte, error) {
	headroom := p.f.cfg.Sink.Headroom()
	for p.lends && p.nLent < len(p.bufs) {
		f, ok := p.offload.AllocLarge(maxPacket)
		switch {
		case !ok && p.nLent > 0:
			return p.bufs[:p.nLent], nil
		case !ok && !p.waitLend:
			return p.bufs, nil
		case !ok:
			if err := p.waitFreed(ctx); err == errNoFrames {
				return p.bufs, nil
			} else if err != nil {
				return nil, err
			}
		case len(f.Buf) < headroom+maxPacket:
			p.frames[0] = f
			p.f.cfg.Sink.Free(p.frames[:1])
			p.lends = false
		default:
			p.lendFirst(f, headroom)
		}
	}
	return p.bufs, nil
}

// lendFirst lends f as the first read buffer, ahead of those already
// lent: the sink's most recently freed frame is the one most likely still
// in the CPU's caches, where an older one, read into in turn, would not
// be.
func (p *producer) lendFirst(f frame.Frame, headroom int) {
	copy(p.lent[1:p.nLent+1], p.lent[:p.nLent])
	copy(p.bufs[1:p.nLent+1], p.bufs[:p.nLent])
	p.lent[0], p.bufs[0] = f, f.Buf[headroom-p.f.cfg.HeaderSize-p.off:] // the whole frame
	p.nLent++
}

// keepLent keeps the lent frames no packet left in, at the front, for
// the next read, and gives the other read buffers back their own memory.
func (p *producer) keepLent() {
	k := 0
	for i := range p.nLent {
		if p.lent[i].Buf != nil {
			p.lent[k], p.bufs[k] = p.lent[i], p.bufs[i]
			k++
		}
	}
	for i := k; i < p.nLent; i++ {
		p.bufs[i] = p.own[i]
	}
	p.nLent = k
}

// giveBack frees the lent frames no packet left in: the producer is done.
func (p *producer) giveBack() {
	for _, f := range p.lent[:p.nLent] {
		if f.Buf != nil {
			p.frames[0] = f
			p.f.cfg.Sink.Free(p.frames[:1])
		}
	}
	p.nLent = 0
}

// split cuts pkt into frames (with partial checksums for an OffloadCsum
// sink), runs the hook and queues the segments, at most BurstSegments at
// a time: each chunk after the first is admitted by the budget on its
// own, so that no admission charges more than one Burst.
func (p *producer) split(ctx context.Context, pkt []byte, l segment.Layout, flow uint64, partial bool) error {
	cfg, st := &p.f.cfg, &p.f.stats
	seg, hdr := cfg.Segmenter, segment.Header{}
	if partial {
		seg, hdr = p.partial, l.SegmentHeader(true)
	}
	for first := 0; first < l.Segments(); first += frame.BurstSegments {
		if first > 0 && cfg.Budget != nil {
			if err := cfg.Budget.Admit(ctx, flow); err != nil {
				return err
			}
		}
		frames := p.frames[:min(frame.BurstSegments, l.Segments()-first)]
		if err := p.alloc(ctx, frames); err == errNoFrames {
			st.drop(frame.DropNoFrames, 1) // the rest of the super-packet, not cut
			return nil
		} else if err != nil {
			return err
		}
		for i := range frames {
			p.segs[i] = frames[i].Buf
		}
		if _, err := seg.SplitFrom(pkt, l, first, p.segs[:len(frames)], p.lens, cfg.Sink.Headroom()); err != nil {
			cfg.Sink.Free(frames) // segments larger than a frame: at the first chunk
			st.drop(frame.DropOversize, 1)
			return nil
		}
		if first == 0 {
			st.segmented(l.Segments())
			if l.Segments() > 1 {
				st.cut.Add(1)
			}
		}
		if err := p.queue(ctx, frames, hdr, flow); err != nil {
			return err
		}
	}
	return nil
}

// queue runs the hook on the segments just cut into frames, each of
// p.lens' length with the header hdr, and queues those it passes.
func (p *producer) queue(ctx context.Context, frames []frame.Frame, hdr segment.Header, flow uint64) error {
	cfg, st := &p.f.cfg, &p.f.stats
	headroom := cfg.Sink.Headroom()
	p.items = p.items[:0]
	bytes := 0
	for i := range frames {
		frames[i].Len, frames[i].Header = p.lens[i], hdr
		if cfg.Hook != nil && !cfg.Hook(frames[i].Buf[headroom:headroom+p.lens[i]]) {
			cfg.Sink.Free(frames[i : i+1])
			st.drop(frame.DropHook, 1)
			continue
		}
		bytes += p.lens[i]
		p.items = append(p.items, txqueue.Item[frame.Frame]{Owner: cfg.Budget, Flow: flow, Size: p.size, Value: frames[i]})
	}
	st.segments.Add(uint64(len(p.items))) // once per chunk: the counters are shared
	st.bytes.Add(uint64(bytes))
	return p.enqueue(ctx)
}

// enqueue queues p.items and, running to completion, transmits them. What
// a DropTail queue refuses is counted and its frames are freed.
func (p *producer) enqueue(ctx context.Context) error {
	q := p.f.cfg.Queue
	p.f.producing.wait() // while the queue is full: for the sink loop
	n, err := q.Enqueue(ctx, p.items)
	p.f.producing.woke()
	if n > 0 {
		p.f.push()
	}
	if err == nil {
		return nil
	}
	rest := p.frames[:0]
	for _, it := range p.items[n:] {
		rest = append(rest, it.Value)
	}
	p.f.cfg.Sink.Free(rest)
	if errors.Is(err, txqueue.ErrQueueFull) {
		p.f.stats.drop(frame.DropQueueFull, len(p.items)-n)
		return nil
	}
	return err
}
