package pipeline_test

import (
	"bytes"
	"testing"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/internal/testing/dirtybuf"
	"github.com/gsoplane/gsoplane/segment"
)

// intoReceiver is a frame.IntoReceiver over one batch of frames with a
// 14-byte headroom: ReceiveInto writes frame i into bufs[i], a frame
// longer than its buffer cut short (nil); Receive, into memory of its
// own.
type intoReceiver struct {
	frames       [][]byte
	into, copied int // ReceiveInto and Receive calls
}

func (r *intoReceiver) Headroom() int { return 14 }

func (r *intoReceiver) Receive(frames [][]byte) (int, error) {
	r.copied++
	n := copy(frames, r.frames)
	for i := range n {
		frames[i] = bytes.Clone(frames[i])
	}
	return n, nil
}

func (r *intoReceiver) ReceiveInto(bufs, frames [][]byte) (int, error) {
	r.into++
	n := min(len(bufs), len(r.frames))
	for i, f := range r.frames[:n] {
		frames[i] = bufs[i][:copy(bufs[i], f)]
		if len(f) > len(bufs[i]) {
			frames[i] = nil
		}
	}
	return n, nil
}

var _ frame.IntoReceiver = (*intoReceiver)(nil)

// An IntoReceiver receives straight into the forwarder's buffers where
// the read offset leaves room for its headroom: the packets come out as
// those received through Receive (dropped ones closing up, TTLs taken
// down, whatever the buffers held), a frame cut short counts as BIG TCP
// by its header (OnBigTCP once) or as invalid; without the room, Read
// receives as from any Receiver.
func TestWireSourceReceiveInto(t *testing.T) {
	big, _ := bigTCPFrame(100000)
	long := wireFrame(udp4(4000, false))
	frames := [][]byte{
		wireFrame(udp4(10, false)), wireFrame([]byte{0x45, 1, 2}), wireFrame(tcpSuperPacket(2000)[segment.HeaderSize:]),
		big, long, wireFrame(udp6(100, 64)),
	}
	const size = 3000 // long and big do not fit
	read := func(r frame.Receiver, bufs [][]byte, off int) ([][]byte, pipeline.WireStats, int) {
		calls := 0
		src, err := pipeline.NewWireSource(pipeline.WireConfig{Receiver: r, MTU: 1500, OnBigTCP: func() { calls++ }})
		if err != nil {
			t.Fatal(err)
		}
		sizes := make([]int, len(bufs))
		n, err := src.Read(bufs, sizes, off)
		if err != nil && n == 0 {
			t.Fatalf("Read: %v", err)
		}
		out := make([][]byte, n)
		for i := range out {
			out[i] = bufs[i][off : off+sizes[i]]
		}
		return out, src.Stats(), calls
	}
	// The others, as received through Receive.
	others := [][]byte{frames[0], frames[1], frames[2], frames[5]}
	want, _, _ := read(&frameReceiver{batches: [][][]byte{others}}, dirtybuf.New(len(others), size), 4)
	if len(want) != 3 {
		t.Fatalf("%d packets through Receive, want 3", len(want))
	}
	const off = 4 // 4 + a 10-byte header: room for the 14-byte headroom
	bufs := dirtybuf.New(len(frames), off+size)
	stale := dirtybuf.Leave(off, tcpSuperPacket(2900), udp4(1000, true))
	var st pipeline.WireStats
	var calls int
	r := &intoReceiver{frames: frames}
	dirtybuf.Check(t, bufs, stale, func(bufs [][]byte) [][]byte {
		var got [][]byte
		got, st, calls = read(r, bufs, off)
		return got
	})
	if r.copied != 0 || r.into == 0 {
		t.Fatalf("Receive called %d times, ReceiveInto %d: want only ReceiveInto", r.copied, r.into)
	}
	got, _, _ := read(&intoReceiver{frames: frames}, dirtybuf.New(len(frames), off+size), off)
	for i := range want {
		if i >= len(got) || !bytes.Equal(got[i], want[i]) {
			t.Fatalf("packet %d received in place differs from the one received through Receive", i)
		}
	}
	if st != (pipeline.WireStats{Packets: 6, Cut: 1, Invalid: 2, BigTCP: 1}) || calls != 1 {
		t.Errorf("stats %+v, OnBigTCP called %d times; want 6 packets, 1 cut, 2 invalid (garbage, cut short), 1 BIG TCP, one call", st, calls)
	}
	r = &intoReceiver{frames: frames[:1]}
	if read(r, dirtybuf.New(1, size), 3); r.copied != 1 || r.into != 0 {
		t.Errorf("offset 3 (no room for the headroom): Receive called %d times, ReceiveInto %d; want Receive", r.copied, r.into)
	}
}
