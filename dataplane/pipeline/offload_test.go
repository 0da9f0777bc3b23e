package pipeline_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/segment"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// offloadSink is a memSink whose device finishes what mode says, with one
// large frame for whole super-packets, free again once transmitted.
type offloadSink struct {
	*memSink
	mode  frame.Offload
	mu    sync.Mutex // large: AllocLarge and Free run on the producer, Transmit on the sink loop
	large []byte
	got   []frame.Frame // copies of what was transmitted
	quiet bool          // keep no copies
}

func (s *offloadSink) Offload(segment.Layout) frame.Offload { return s.mode }

func (s *offloadSink) AllocLarge(size int) (frame.Frame, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.large == nil {
		return frame.Frame{}, false
	}
	f := frame.Frame{Buf: s.large, ID: 1 << 20}
	s.large = nil
	return f, true
}

func (s *offloadSink) Free(frames []frame.Frame) {
	for _, f := range frames {
		if f.ID == 1<<20 {
			s.putLarge(f.Buf)
			continue
		}
		s.memSink.Free([]frame.Frame{f})
	}
}

func (s *offloadSink) putLarge(b []byte) {
	s.mu.Lock()
	s.large = b
	s.mu.Unlock()
}

func (s *offloadSink) Transmit(frames []frame.Frame) (int, error) {
	for _, f := range frames {
		if !s.quiet {
			c := f
			c.Buf = bytes.Clone(f.Buf[:f.Len])
			s.got = append(s.got, c)
		}
		if f.ID == 1<<20 {
			s.putLarge(f.Buf) // completes at once
		}
	}
	return s.memSink.Transmit(frames)
}

// TestForwarderOffload: a GSO sink gets the super-packet whole, charged as
// its segments; a checksum sink gets segments with partial checksums that
// finish into the full-checksum segments.
func TestForwarderOffload(t *testing.T) {
	const payload = 10 * 1448
	raw := tcpSuperPacket(payload)
	h, _ := segment.DecodeHeader(raw, segment.HeaderSize)
	pkt := raw[segment.HeaderSize:]
	l, err := segment.Validate(pkt, h)
	if err != nil {
		t.Fatal(err)
	}
	run := func(mode frame.Offload) (*offloadSink, pipeline.Stats) {
		sink := &offloadSink{memSink: newMemSink(64, 2048), mode: mode, large: make([]byte, 1<<16)}
		sink.memSink.record = false
		f, budget, queue := newTestForwarder(t, &sliceSource{pkts: [][]byte{raw}}, sink)
		if err := runWithin(t, f); !errors.Is(err, io.EOF) {
			t.Fatalf("Run = %v, want io.EOF", err)
		}
		queue.Close()
		if st := budget.Stats(); st.InFlight != 0 {
			t.Errorf("mode %d: %d bytes still charged", mode, st.InFlight)
		}
		return sink, f.Stats()
	}

	sink, st := run(frame.OffloadGSO)
	if len(sink.got) != 1 || !bytes.Equal(sink.got[0].Buf, pkt) || sink.got[0].Header != l.GSOHeader() {
		t.Fatalf("GSO: %d frames, header %+v; want the super-packet whole with %+v", len(sink.got), sink.got[0].Header, l.GSOHeader())
	}
	if st.Offloaded != 1 || st.Cut != 0 || st.InPlace != 0 || st.Segments != uint64(l.Segments()) || st.Transmitted != 1 {
		t.Errorf("GSO stats %+v: want 1 offloaded, not in place, none cut, %d segments, 1 frame", st, l.Segments())
	}

	full := make([][]byte, l.Segments())
	sizes := make([]int, len(full))
	for i := range full {
		full[i] = make([]byte, 2048)
	}
	if _, err := segment.Split(pkt, h, full, sizes, 0); err != nil {
		t.Fatal(err)
	}
	sink, st = run(frame.OffloadCsum)
	if len(sink.got) != l.Segments() {
		t.Fatalf("checksum offload: %d frames, want %d", len(sink.got), l.Segments())
	}
	if st.Offloaded != 0 || st.Cut != 1 {
		t.Errorf("checksum offload stats %+v: want none offloaded, 1 cut", st)
	}
	for i, f := range sink.got {
		seg := f.Buf
		if f.Header.Flags != segment.FlagNeedsCsum || int(f.Header.CsumStart) != l.L3Len() {
			t.Fatalf("segment %d: header %+v, want NEEDS_CSUM at the TCP header", i, f.Header)
		}
		finishChecksum(seg, f.Header)
		if !bytes.Equal(seg, full[i][:sizes[i]]) {
			t.Errorf("segment %d does not finish into the full-checksum segment", i)
		}
	}
}

// finishChecksum completes a TCP partial checksum as a device would: the
// checksum of everything from csum_start on, the pseudo-header sum in the
// field included.
func finishChecksum(pkt []byte, h segment.Header) {
	start := int(h.CsumStart)
	c := segment.Checksum(pkt[start:], 0)
	field := pkt[start+int(h.CsumOffset):]
	field[0], field[1] = byte(c>>8), byte(c)
}

// headerReceiver is a frameReceiver that also gives each frame a
// virtio-net header, as an AF_PACKET socket does.
type headerReceiver struct {
	frameReceiver
	headers []segment.Header
}

func (r *headerReceiver) Header(i int) segment.Header { return r.headers[i] }

// TestReturnPathKernelHeaders: a packet the kernel merged goes into the
// writer whole with its header, in its place among the others.
func TestReturnPathKernelHeaders(t *testing.T) {
	segs := tcpSegments(t, 3*1448)
	raw := tcpSuperPacket(3 * 1448)
	merged := make([]byte, 14+len(raw)-segment.HeaderSize)
	copy(merged[14:], raw[segment.HeaderSize:])
	kh, _ := segment.DecodeHeader(raw, segment.HeaderSize)
	batch := [][]byte{segs[0], merged, segs[1]}
	rx := &headerReceiver{frameReceiver{batches: [][][]byte{batch}}, []segment.Header{{}, kh, {}}}
	w := &refusingWriter{}
	r, err := pipeline.NewReturnPath(pipeline.ReturnConfig{Receiver: rx, Writer: w, HeaderSize: segment.HeaderSize})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(w.pkts) != 3 {
		t.Fatalf("%d packets written, want 3", len(w.pkts))
	}
	if got, _ := segment.DecodeHeader(w.pkts[1], segment.HeaderSize); got != kh || !bytes.Equal(w.pkts[1][segment.HeaderSize:], raw[segment.HeaderSize:]) {
		t.Errorf("the kernel's super-packet: header %+v, want %+v, or its bytes changed", got, kh)
	}
	for _, i := range []int{0, 2} {
		if !bytes.Equal(w.pkts[i][segment.HeaderSize:], batch[i][14:]) {
			t.Errorf("packet %d changed or moved", i)
		}
	}
}

// lendingSink is an OffloadSink with AF_PACKET's headroom whose large
// frames hold any packet, so that the forwarder reads into them: it
// records (if record), per transmitted frame, its packet and where it is
// in memory.
type lendingSink struct {
	*memSink
	mu     sync.Mutex
	large  [][]byte // by ID less lendingID
	free   []int    // free large frames
	lent   int      // AllocLarge calls that succeeded
	got    [][]byte
	at     []*byte
	done   int // large frames transmitted since the last Complete
	record bool
}

const (
	lendingHeadroom = 24
	lendingID       = 1 << 20 // the first large frame's ID
)

func newLendingSink(large int) *lendingSink { return newLendingSinkOf(large, lendingHeadroom+65535+40) }

// newLendingSinkOf returns a lendingSink with large frames of size bytes.
func newLendingSinkOf(large, size int) *lendingSink {
	s := &lendingSink{memSink: newMemSink(64, 2048), record: true}
	s.memSink.record = false
	for i := range large {
		s.large = append(s.large, make([]byte, size))
		s.free = append(s.free, i)
	}
	return s
}

func (s *lendingSink) Headroom() int                        { return lendingHeadroom }
func (s *lendingSink) Offload(segment.Layout) frame.Offload { return frame.OffloadGSO }

func (s *lendingSink) AllocLarge(int) (frame.Frame, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.free) == 0 {
		return frame.Frame{}, false
	}
	i := s.free[len(s.free)-1]
	s.free = s.free[:len(s.free)-1]
	s.lent++
	return frame.Frame{Buf: s.large[i], ID: uint64(lendingID + i)}, true
}

func (s *lendingSink) Free(frames []frame.Frame) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range frames {
		if f.ID >= lendingID {
			s.free = append(s.free, int(f.ID-lendingID))
			continue
		}
		s.memSink.Free([]frame.Frame{f})
	}
}

func (s *lendingSink) Transmit(frames []frame.Frame) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range frames {
		if s.record {
			pkt := f.Buf[lendingHeadroom : lendingHeadroom+f.Len]
			s.got = append(s.got, bytes.Clone(pkt))
			s.at = append(s.at, &pkt[0])
		}
		if f.ID >= lendingID {
			s.free = append(s.free, int(f.ID-lendingID)) // completes at once
			s.done++
			continue
		}
		s.memSink.Transmit([]frame.Frame{f})
	}
	return len(frames), nil
}

func (s *lendingSink) Complete() (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, _ := s.memSink.Complete()
	n, s.done = n+s.done, 0
	return n, nil
}

// TestForwarderReadsIntoLargeFrame: a super-packet the device segments is
// read into the sink's large frame and transmitted from there, not
// copied; a packet that does not leave whole is read there too and cut
// into small frames, the frame (the sink's only one) staying lent for the
// next read; once the forwarder stops, it is back.
func TestForwarderReadsIntoLargeFrame(t *testing.T) {
	super, single := tcpSuperPacket(10*1448), tcpSuperPacket(1000)
	sink := newLendingSink(1)
	src := &placeSource{sliceSource: sliceSource{pkts: [][]byte{super, single, super}}}
	f, budget, queue := newTestForwarder(t, src, sink)
	if err := runWithin(t, f); !errors.Is(err, io.EOF) {
		t.Fatalf("Run = %v, want io.EOF", err)
	}
	queue.Close()
	if st := budget.Stats(); st.InFlight != 0 {
		t.Errorf("%d bytes still charged", st.InFlight)
	}
	want := [][]byte{super[segment.HeaderSize:], single[segment.HeaderSize:], super[segment.HeaderSize:]}
	if len(sink.got) != len(want) {
		t.Fatalf("%d frames transmitted, want %d", len(sink.got), len(want))
	}
	for i, w := range want {
		// The lone segment gets its checksum: compare its payload.
		if got := sink.got[i]; len(got) != len(w) || !bytes.Equal(got[40:], w[40:]) || i != 1 && !bytes.Equal(got, w) {
			t.Errorf("frame %d: not the packet read", i)
		}
	}
	for i, inPlace := range []bool{true, false, true} {
		if (sink.at[i] == src.at[i]) != inPlace {
			t.Errorf("frame %d sent from where it was read: %t, want %t", i, !inPlace, inPlace)
		}
	}
	if len(sink.free) != 1 || len(sink.memSink.free) != 64 {
		t.Errorf("frames not given back: %d of 1 large, %d of 64 small free", len(sink.free), len(sink.memSink.free))
	}
	if st := f.Stats(); st.Offloaded != 2 || st.InPlace != 2 {
		t.Errorf("%d super-packets offloaded, %d of them in place; want 2, 2", st.Offloaded, st.InPlace)
	}
}

// TestForwarderLendsNoSmallFrame: large frames that cannot hold the
// largest packet are not read into; a super-packet that fits them still
// leaves whole, copied, and every frame comes back.
func TestForwarderLendsNoSmallFrame(t *testing.T) {
	super := tcpSuperPacket(10 * 1448)
	sink := newLendingSinkOf(2, lendingHeadroom+len(super))
	f, _, queue := newTestForwarder(t, &sliceSource{pkts: [][]byte{super, super}}, sink)
	if err := runWithin(t, f); !errors.Is(err, io.EOF) {
		t.Fatalf("Run = %v, want io.EOF", err)
	}
	queue.Close()
	if st := f.Stats(); st.Offloaded != 2 || st.InPlace != 0 {
		t.Errorf("%d super-packets offloaded, %d of them in place; want 2, 0", st.Offloaded, st.InPlace)
	}
	if len(sink.free) != 2 {
		t.Errorf("%d of 2 large frames free", len(sink.free))
	}
}

// placeSource is a sliceSource that records where it puts each packet.
type placeSource struct {
	sliceSource
	at []*byte
}

func (s *placeSource) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	n, err := s.sliceSource.Read(bufs, sizes, offset)
	if n > 0 {
		s.at = append(s.at, &bufs[0][offset+segment.HeaderSize])
	}
	return n, err
}

// bigTCPFrame returns a BIG TCP super-packet of payload bytes as an
// AF_PACKET socket hands one over, behind 14 bytes of headroom: the
// headers of tcpSuperPacket with an IPv4 total length of 0, payload
// bytes counting up (mod 256), and its virtio-net header.
func bigTCPFrame(payload int) ([]byte, segment.Header) {
	const hdrs = header.IPv4MinimumSize + header.TCPMinimumSize
	raw := tcpSuperPacket(1)
	kh, _ := segment.DecodeHeader(raw, segment.HeaderSize)
	f := make([]byte, 14+hdrs+payload)
	copy(f[14:], raw[segment.HeaderSize:segment.HeaderSize+hdrs])
	ip := header.IPv4(f[14:])
	ip.SetTotalLength(0)
	ip.SetChecksum(0)
	ip.SetChecksum(^ip.CalculateChecksum())
	for i := range payload {
		f[14+hdrs+i] = byte(i)
	}
	return f, kh
}

// TestReturnPathBigTCP: a BIG TCP super-packet from a HeaderReceiver,
// longer than a TUN write takes, goes into the writer cut into TSO
// super-packets of at most 65535 bytes that carry its payload in order,
// each valid with its header; one whose header does not fit is dropped
// as invalid.
func TestReturnPathBigTCP(t *testing.T) {
	const payload = 180000
	segs := tcpSegments(t, 2*1448)
	big, kh := bigTCPFrame(payload)
	bad, badH := bigTCPFrame(payload)
	badH.CsumStart += 4
	batch := [][]byte{segs[0], big, segs[1], bad}
	rx := &headerReceiver{frameReceiver{batches: [][][]byte{batch}}, []segment.Header{{}, kh, {}, badH}}
	w := &refusingWriter{}
	r, err := pipeline.NewReturnPath(pipeline.ReturnConfig{Receiver: rx, Writer: w, HeaderSize: segment.HeaderSize})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(w.pkts) < 5 {
		t.Fatalf("%d packets written, want the 2 segments and the cut", len(w.pkts))
	}
	pieces := w.pkts[1 : len(w.pkts)-1]
	var data []byte
	for i, p := range pieces {
		h, err := segment.DecodeHeader(p, segment.HeaderSize)
		if err != nil || h.GSOType != segment.GSOTCPv4 || h.GSOSize != kh.GSOSize || !h.NeedsCsum() {
			t.Fatalf("piece %d: header %+v (%v)", i, h, err)
		}
		pkt := p[segment.HeaderSize:]
		l, err := segment.Validate(pkt, h)
		if err != nil || len(pkt) > 65535 {
			t.Fatalf("piece %d: %d bytes: %v", i, len(pkt), err)
		}
		data = append(data, pkt[l.HdrLen():]...)
	}
	if !bytes.Equal(data, big[len(big)-payload:]) {
		t.Errorf("the pieces carry %d bytes, not the %d of the super-packet in order", len(data), payload)
	}
	st := r.Stats()
	if st.BigTCP != 1 || st.Packets != 3 || st.Drops[frame.DropInvalid] != 1 || st.Drops.Total() != 1 {
		t.Errorf("stats %+v: want 1 BIG TCP super-packet of 3 packets, 1 dropped as invalid", st)
	}
}

// repeatReceiver hands out one frame with its header per Receive, n
// times, then says it is closed.
type repeatReceiver struct {
	frame []byte
	hdr   segment.Header
	n     int
}

func (r *repeatReceiver) Headroom() int             { return 14 }
func (r *repeatReceiver) Header(int) segment.Header { return r.hdr }
func (r *repeatReceiver) Receive(frames [][]byte) (int, error) {
	if r.n == 0 {
		return 0, net.ErrClosed
	}
	r.n--
	frames[0] = r.frame
	return 1, nil
}

// TestReturnPathBigTCPAllocs: cutting BIG TCP super-packets allocates
// only the pieces' buffers, for the first: a run of 200 allocates what a
// run of 1 does.
func TestReturnPathBigTCPAllocs(t *testing.T) {
	big, kh := bigTCPFrame(180000)
	allocs := func(n int) float64 {
		return testing.AllocsPerRun(5, func() {
			r, err := pipeline.NewReturnPath(pipeline.ReturnConfig{Receiver: &repeatReceiver{big, kh, n}, Writer: discardWriter{}, HeaderSize: segment.HeaderSize})
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Run(context.Background()); err != nil || r.Stats().BigTCP != uint64(n) {
				t.Fatalf("Run: %v, %d BIG TCP super-packets, want %d", err, r.Stats().BigTCP, n)
			}
		})
	}
	// A run allocates a dozen times, give or take one (not per packet).
	if one, many := allocs(1), allocs(200); many > one+1 {
		t.Errorf("%v allocations for 200 BIG TCP super-packets, %v for one", many, one)
	}
}
