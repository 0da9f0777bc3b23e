package pipeline

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/internal/iphdr"
	"github.com/gsoplane/gsoplane/segment"
)

// returnBatch is how many packets the return path takes per Receive.
const returnBatch = 64

// maxWriteLen is the longest IP packet the return path writes: what an IP
// length field can say, and a TUN write with a virtio-net header takes.
const maxWriteLen = 65535

// ReturnConfig configures a ReturnPath.
type ReturnConfig struct {
	Receiver   frame.Receiver
	Writer     frame.Writer // a VectorWriter when TCP or UDP is set
	HeaderSize int          // virtio-net header size of Writer: segment.HeaderSize, HeaderSizeMrg or HeaderSizeTunnel
	// TCP and UDP turn GRO on: each received batch is merged into TCP
	// and UDP super-packets by the kernel's rules (segment.Coalescer),
	// written with one writev(2) each. UDP needs a TUN device that takes
	// USO (Linux 6.2 or later).
	TCP, UDP bool
	// OnRefused, if set, is called (once per kind) when the writer refuses
	// a super-packet: that kind of merge is then off, and the packets are
	// written one by one.
	OnRefused func(kind segment.GSOType, err error)
	// Inside are the prefixes behind the writer (a TUN device's routes):
	// a received packet whose source lies in one of them cannot have come
	// from the receiver's side and is dropped (DropSpoofed), as the
	// kernel's strict reverse-path filter drops it.
	Inside []netip.Prefix
}

// ReturnStats counts the return path.
type ReturnStats struct {
	Packets      uint64      // IP packets received and handed on
	Bytes        uint64      // their IP bytes
	Writes       uint64      // packets written, a super-packet counting once
	SuperPackets uint64      // writes that carried two packets or more
	Refused      uint64      // super-packets the writer refused (their packets went one by one)
	BigTCP       uint64      // BIG TCP super-packets from a HeaderReceiver, cut into ones of at most 64 KiB
	Drops        frame.Drops // DropInvalid: refused by the receiver or (without GRO) not a valid IP packet; DropWriteError: refused by the writer; DropSpoofed: a source inside
	// GRO counts what the coalescer merged and why it passed packets
	// through (zero with GRO off).
	GRO segment.CoalesceStats
}

// Add returns the field-by-field sum of s and o.
func (s ReturnStats) Add(o ReturnStats) ReturnStats {
	s.Packets += o.Packets
	s.Bytes += o.Bytes
	s.Writes += o.Writes
	s.SuperPackets += o.SuperPackets
	s.Refused += o.Refused
	s.BigTCP += o.BigTCP
	s.Drops.Add(o.Drops)
	s.GRO = s.GRO.Add(o.GRO)
	return s
}

// ReturnPath moves the IP packets of the frames a Receiver hands over into
// a Writer: merged into super-packets with GRO on, one by one otherwise.
// The virtio-net header goes into each frame's headroom, so no packet byte
// is copied on the way.
type ReturnPath struct {
	cfg       ReturnConfig
	vw        frame.VectorWriter
	hr        frame.HeaderReceiver // the receiver, if it gives headers
	gro       *segment.Coalescer   // nil with GRO off
	seg       segment.Segmenter    // cuts BIG TCP super-packets
	refused   [2]bool              // TCP, UDP: OnRefused was called
	closed    bool                 // the writer said it was closed
	beat      heartbeat            // the loop's (see Pulse)
	packets   atomic.Uint64
	bytes     atomic.Uint64
	writes    atomic.Uint64
	supers    atomic.Uint64
	refusals  atomic.Uint64
	big       atomic.Uint64
	invalid   atomic.Uint64
	writeErrs atomic.Uint64
	spoofed   atomic.Uint64
	groMu     sync.Mutex
	groStats  segment.CoalesceStats // a copy, taken after each batch
}

// NewReturnPath returns a return path configured by cfg.
func NewReturnPath(cfg ReturnConfig) (*ReturnPath, error) {
	switch {
	case cfg.Receiver == nil || cfg.Writer == nil:
		return nil, fmt.Errorf("pipeline: %w: a return path needs a Receiver and a Writer", frame.ErrInvalidConfig)
	case !headerSizeOK(cfg.HeaderSize):
		return nil, fmt.Errorf("pipeline: %w: virtio-net header size %d", frame.ErrInvalidConfig, cfg.HeaderSize)
	case cfg.Receiver.Headroom() < cfg.HeaderSize:
		return nil, fmt.Errorf("pipeline: %w: receiver headroom %d is shorter than the virtio-net header", frame.ErrInvalidConfig, cfg.Receiver.Headroom())
	}
	// The cap keeps a BIG TCP super-packet's pieces within a batch's
	// buffers.
	r := &ReturnPath{cfg: cfg, seg: segment.Segmenter{MaxSegments: returnBatch}}
	r.hr, _ = cfg.Receiver.(frame.HeaderReceiver)
	if !cfg.TCP && !cfg.UDP {
		return r, nil
	}
	vw, ok := cfg.Writer.(frame.VectorWriter)
	if !ok {
		return nil, fmt.Errorf("pipeline: %w: GRO needs a VectorWriter", frame.ErrInvalidConfig)
	}
	gro, err := segment.NewCoalescer(segment.CoalescerConfig{
		HeaderSize: cfg.HeaderSize, TCP: cfg.TCP, UDP: cfg.UDP, MaxBatch: returnBatch,
		IPChecked: true, // by check: every IP header once
	})
	if err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	r.vw, r.gro = vw, gro
	return r, nil
}

// Stats returns a snapshot of the return path's counters.
func (r *ReturnPath) Stats() ReturnStats {
	s := ReturnStats{
		Packets: r.packets.Load(), Bytes: r.bytes.Load(), Writes: r.writes.Load(),
		SuperPackets: r.supers.Load(), Refused: r.refusals.Load(), BigTCP: r.big.Load(),
	}
	s.Drops[frame.DropInvalid] = r.invalid.Load()
	s.Drops[frame.DropWriteError] = r.writeErrs.Load()
	s.Drops[frame.DropSpoofed] = r.spoofed.Load()
	r.groMu.Lock()
	s.GRO = r.groStats
	r.groMu.Unlock()
	return s
}

// Run moves packets until ctx ends or the receiver or the writer is
// closed (then it returns nil) or the receiver fails. When ctx ends, a
// Receive in progress is woken if the Receiver is a ReadDeadliner, and
// otherwise returns within its short wait: either way Run returns
// promptly (tested at 100 ms, idle and under load).
func (r *ReturnPath) Run(ctx context.Context) error {
	defer wakeOnDone(ctx, r.cfg.Receiver)()
	b := &returnBatchBufs{
		frames: make([][]byte, returnBatch), sizes: make([]int, returnBatch),
		out: make([][]byte, returnBatch), one: make([][]byte, 1),
	}
	for ctx.Err() == nil && !r.closed {
		r.beat.beat()
		n, err := r.receive(b.frames)
		if errors.Is(err, net.ErrClosed) || err != nil && ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		r.batch(b, n)
	}
	return nil
}

// receive receives a batch, waiting for work (see Pulse).
func (r *ReturnPath) receive(frames [][]byte) (int, error) {
	r.beat.wait()
	defer r.beat.woke()
	return r.cfg.Receiver.Receive(frames)
}

// Pulse returns the pulse of the return path's loop.
func (r *ReturnPath) Pulse() Pulse { return r.beat.pulse() }

// returnBatchBufs are Run's buffers, allocated once; those for the
// pieces of BIG TCP super-packets as the first cut into that many comes.
type returnBatchBufs struct {
	frames [][]byte
	sizes  []int
	out    [][]byte
	one    [][]byte
	pieces [][]byte
}

// batch writes the n frames just received, in order: runs of plain
// packets through GRO (or one by one), and between them the packets the
// kernel finished (HeaderReceiver) with their own headers.
func (r *ReturnPath) batch(b *returnBatchBufs, n int) {
	start := 0
	for i := range n {
		if r.hr == nil {
			break
		}
		if h := r.hr.Header(i); h.GSOType.Kind() != segment.GSONone || h.NeedsCsum() {
			r.run(b, start, i)
			r.passKernel(b, b.frames[i], h)
			start = i + 1
		}
	}
	r.run(b, start, n)
}

// run writes the plain packets of frames [from, to).
func (r *ReturnPath) run(b *returnBatchBufs, from, to int) {
	frames, sizes := b.frames[from:to], b.sizes[from:to]
	m := r.check(frames, sizes)
	if m == 0 {
		return
	}
	h := r.cfg.Receiver.Headroom()
	if r.gro != nil {
		// The batches fit the Coalescer (returnBatch packets, the
		// receiver's headroom); one that did not would go out unmerged.
		if out, err := r.gro.Coalesce(frames[:m], sizes[:m], h); err == nil {
			r.writeVectors(out)
			r.groMu.Lock()
			r.groStats = r.gro.Stats()
			r.groMu.Unlock()
			return
		}
	}
	for i, f := range frames[:m] {
		hdr := f[h-r.cfg.HeaderSize : h]
		clear(hdr) // no offload: the kernel checks the checksums
		b.out[i] = f[h-r.cfg.HeaderSize : h+sizes[i]]
	}
	r.write(b.out[:m])
}

// passKernel writes a packet the kernel merged or left with a partial
// checksum, behind its own header.
func (r *ReturnPath) passKernel(b *returnBatchBufs, f []byte, hdr segment.Header) {
	h := r.cfg.Receiver.Headroom()
	if segment.IsBig(f[h:]) {
		r.passBig(b, f[h:], hdr)
		return
	}
	pkt := ipPacket(f[h:])
	if len(pkt) == 0 || hdr.Encode(f[h-r.cfg.HeaderSize:h], r.cfg.HeaderSize) != nil {
		r.invalid.Add(1)
		return
	}
	if r.fromInside(pkt) {
		r.spoofed.Add(1)
		return
	}
	r.packets.Add(1)
	r.bytes.Add(uint64(len(pkt)))
	b.one[0] = f[h-r.cfg.HeaderSize : h+len(pkt)]
	r.write(b.one)
}

// passBig writes a BIG TCP super-packet, which no TUN write takes whole,
// cut into TSO super-packets of at most 65535 bytes (copied into buffers
// of the return path's own), with their headers.
func (r *ReturnPath) passBig(b *returnBatchBufs, pkt []byte, hdr segment.Header) {
	if r.fromInside(pkt) {
		r.spoofed.Add(1)
		return
	}
	n := len(pkt)
	pkt, l, err := r.seg.ValidateBig(pkt, hdr, maxWriteLen)
	if err != nil {
		r.invalid.Add(1)
		return
	}
	hs := r.cfg.HeaderSize
	b.growPieces(l.Segments(), hs+maxWriteLen)
	sizes := b.sizes[:l.Segments()]
	if _, err := r.seg.Split(pkt, l, b.pieces, sizes, hs); err != nil {
		r.invalid.Add(1)
		return
	}
	r.packets.Add(1)
	r.bytes.Add(uint64(n))
	r.big.Add(1)
	ph := l.SegmentHeader(true)
	for i, size := range sizes {
		p := b.pieces[i][:hs+size]
		ph.Encode(p[:hs], hs) // cannot fail: hs is a header size
		b.out[i] = p
	}
	r.write(b.out[:len(sizes)])
}

// growPieces makes sure of n piece buffers, adding new ones of size
// bytes (the return path always asks for the same size).
func (b *returnBatchBufs) growPieces(n, size int) {
	for len(b.pieces) < n {
		b.pieces = append(b.pieces, make([]byte, size))
	}
}

// check keeps the frames holding an IP packet, moving them to the front,
// with each packet's length (trimmed to its IP length: Ethernet pads short
// frames) in sizes; it returns how many it kept. Without GRO a packet must
// pass segment.Validate; with GRO the coalescer parses every packet
// itself and passes a malformed one through to the kernel, which drops it
// (counted as GRO.Malformed), so check only drops what the receiver
// refused.
func (r *ReturnPath) check(frames [][]byte, sizes []int) int {
	h := r.cfg.Receiver.Headroom()
	m, bytes := 0, 0
	for _, f := range frames {
		pkt := ipPacket(f[h:])
		if !r.valid(pkt) {
			r.invalid.Add(1)
			continue
		}
		if r.fromInside(pkt) {
			r.spoofed.Add(1)
			continue
		}
		frames[m], sizes[m] = f, len(pkt)
		bytes += len(pkt)
		m++
	}
	r.packets.Add(uint64(m))
	r.bytes.Add(uint64(bytes))
	return m
}

// valid reports whether pkt may be handed on. Without GRO, Validate
// checks it all; with GRO, the IP header is checked here, as a router
// checks it (RFC 1812 5.2.2: a bad header, length or checksum is
// dropped), and the coalescer, which trusts that check
// (CoalescerConfig.IPChecked) and parses the rest, passes on what it
// cannot merge for the receiving host to judge.
func (r *ReturnPath) valid(pkt []byte) bool {
	if r.gro != nil {
		return ipHeaderValid(pkt)
	}
	_, err := segment.Validate(pkt, segment.Header{})
	return err == nil
}

// fromInside reports whether pkt's source lies in the Inside prefixes.
func (r *ReturnPath) fromInside(pkt []byte) bool {
	return sourceIn(r.cfg.Inside, pkt)
}

// sourceIn reports whether pkt's source address lies in one of prefixes.
func sourceIn(prefixes []netip.Prefix, pkt []byte) bool {
	if len(prefixes) == 0 {
		return false
	}
	src, ok := iphdr.Src(pkt)
	for _, p := range prefixes {
		if ok && p.Contains(src) {
			return true
		}
	}
	return false
}

// ipHeaderValid reports whether pkt, trimmed by ipPacket, starts with a
// whole IP header whose lengths match pkt: for IPv4, IHL at least 5, a
// total length of at least IHL words, a correct header checksum.
func ipHeaderValid(pkt []byte) bool {
	return iphdr.Whole(pkt) && (iphdr.Version(pkt) == 6 || segment.Checksum(pkt[:iphdr.HeaderLen(pkt)], 0) == 0)
}

// ipPacket trims b to the length its IP header gives, if shorter.
func ipPacket(b []byte) []byte {
	if n, ok := iphdr.Len(b); ok && n < len(b) {
		return b[:n]
	}
	return b
}

// write writes packets one by one; a packet the writer refuses is
// counted and skipped.
func (r *ReturnPath) write(pkts [][]byte) {
	for len(pkts) > 0 {
		n, err := r.cfg.Writer.Write(pkts, 0)
		n = min(max(n, 0), len(pkts)) // a writer's count is not trusted
		r.writes.Add(uint64(n))
		if err == nil || n == len(pkts) || r.writerClosed(err) {
			return
		}
		r.writeErrs.Add(1)
		pkts = pkts[n+1:]
	}
}

// writeVectors writes the coalescer's output. A super-packet the writer
// refuses turns its kind of merge off and goes out again one packet at a
// time; any other refused packet is counted and skipped.
func (r *ReturnPath) writeVectors(pkts [][][]byte) {
	for len(pkts) > 0 {
		n, err := r.vw.WriteVectors(pkts)
		n = min(max(n, 0), len(pkts))
		r.wrote(pkts[:n])
		if err == nil || n == len(pkts) || r.writerClosed(err) {
			return
		}
		if len(pkts[n]) > 1 {
			r.refuse(pkts[n], err)
		} else {
			r.writeErrs.Add(1)
		}
		pkts = pkts[n+1:]
	}
}

// writerClosed reports, and remembers, that the writer was closed: the
// return path then ends.
func (r *ReturnPath) writerClosed(err error) bool {
	r.closed = r.closed || errors.Is(err, os.ErrClosed) || errors.Is(err, net.ErrClosed)
	return r.closed
}

// wrote counts written packets, super-packets among them.
func (r *ReturnPath) wrote(pkts [][][]byte) {
	supers := 0
	for _, p := range pkts {
		if len(p) > 1 {
			supers++
		}
	}
	r.writes.Add(uint64(len(pkts)))
	r.supers.Add(uint64(supers))
}

// refuse handles a super-packet the writer refused: its kind of merge is
// switched off (and reported once), and its packets are cut apart again
// and written one by one. This path is rare and may allocate.
func (r *ReturnPath) refuse(pieces [][]byte, werr error) {
	r.refusals.Add(1)
	raw := make([]byte, 0, 1<<16+r.cfg.HeaderSize)
	for _, p := range pieces {
		raw = append(raw, p...)
	}
	h, err := segment.DecodeHeader(raw, r.cfg.HeaderSize)
	if err != nil {
		r.writeErrs.Add(1)
		return
	}
	kind, udp := h.GSOType.Kind(), h.GSOType.Kind() == segment.GSOUDPL4
	if udp {
		r.gro.SetUDP(false)
	} else {
		r.gro.SetTCP(false)
	}
	if k := btoi(udp); !r.refused[k] {
		r.refused[k] = true
		if r.cfg.OnRefused != nil {
			r.cfg.OnRefused(kind, werr)
		}
	}
	segs, err := resplit(raw[r.cfg.HeaderSize:], h, r.cfg.HeaderSize)
	if err != nil {
		r.writeErrs.Add(1)
		return
	}
	r.write(segs)
}

// resplit cuts a super-packet back into its packets, each behind an
// all-zero virtio-net header of hdrSize bytes.
func resplit(pkt []byte, h segment.Header, hdrSize int) ([][]byte, error) {
	l, err := segment.Validate(pkt, h)
	if err != nil {
		return nil, err
	}
	bufs := make([][]byte, l.Segments())
	for i := range bufs {
		bufs[i] = make([]byte, hdrSize+l.MaxSegLen())
	}
	sizes := make([]int, len(bufs))
	var seg segment.Segmenter
	n, err := seg.Split(pkt, l, bufs, sizes, hdrSize)
	for i := range n {
		bufs[i] = bufs[i][:hdrSize+sizes[i]]
	}
	return bufs[:n], err
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
