package pipeline_test

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/segment"
)

// TestFanIn reads two Receivers through a FanIn, in batches of up to 4
// and then one frame per Receive while their batches hold more: every
// frame comes once, each Receiver's in its order, each Receiver's end
// once; after Close, Receive says closed.
func TestFanIn(t *testing.T) {
	a := &frameReceiver{batches: [][][]byte{{[]byte("a1"), []byte("a2")}, {[]byte("a3")}}}
	b := &frameReceiver{batches: [][][]byte{{[]byte("b1")}, {[]byte("b2"), []byte("b3"), []byte("b4")}}}
	f := pipeline.NewFanIn([]frame.Receiver{a, b})
	if f.Headroom() != 14 {
		t.Errorf("headroom %d", f.Headroom())
	}
	got := map[byte]string{}
	frames := make([][]byte, 4)
	for ends := 0; ends < 2; {
		n, err := f.Receive(frames)
		switch {
		case errors.Is(err, net.ErrClosed):
			ends++
		case err != nil || n > len(frames):
			t.Fatalf("Receive = %d, %v", n, err)
		}
		for _, fr := range frames[:n] {
			got[fr[0]] += string(fr[1:])
		}
		frames = frames[:1]
	}
	if got['a'] != "123" || got['b'] != "1234" {
		t.Errorf("got %q", got)
	}
	f.Close()
	if n, err := f.Receive(frames); n != 0 || !errors.Is(err, net.ErrClosed) {
		t.Errorf("Receive after Close = %d, %v", n, err)
	}
}

// reusingReceiver writes each batch into the same buffer, as a port
// reuses its frames once they are given back.
type reusingReceiver struct {
	buf  []byte
	next byte
}

func (r *reusingReceiver) Headroom() int { return 0 }

func (r *reusingReceiver) Receive(frames [][]byte) (int, error) {
	r.next++
	r.buf[0] = r.next
	frames[0] = r.buf
	return 1, nil
}

// TestFanInHolds: a Receiver is not asked again while the caller still
// has its frames; its frame keeps its contents until the next Receive.
func TestFanInHolds(t *testing.T) {
	rs := []frame.Receiver{&reusingReceiver{buf: []byte{0}}, &reusingReceiver{buf: []byte{0}}}
	f := pipeline.NewFanIn(rs)
	defer f.Close()
	frames := make([][]byte, 4)
	for range 50 {
		n, err := f.Receive(frames)
		if n != 1 || err != nil {
			t.Fatalf("Receive = %d, %v", n, err)
		}
		was := frames[0][0]
		time.Sleep(200 * time.Microsecond) // the other goroutine runs meanwhile
		if frames[0][0] != was {
			t.Fatalf("frame changed from %d to %d before the next Receive", was, frames[0][0])
		}
	}
}

// TestFanInAllocs: a Receive through a FanIn allocates nothing.
func TestFanInAllocs(t *testing.T) {
	pkt := make([]byte, 100)
	f := pipeline.NewFanIn([]frame.Receiver{&loopReceiver{frames: [][]byte{pkt}}, &loopReceiver{frames: [][]byte{pkt, pkt}}})
	defer f.Close()
	frames := make([][]byte, 8)
	f.Receive(frames)
	if a := testing.AllocsPerRun(1000, func() { f.Receive(frames) }); a != 0 {
		t.Errorf("%v allocations per Receive, want 0", a)
	}
}

// sizedReceiver is a HeaderReceiver whose frames say their header's
// gso_size in their second byte.
type sizedReceiver struct {
	frameReceiver
	last [][]byte
}

func (r *sizedReceiver) Receive(frames [][]byte) (int, error) {
	if len(r.batches) > 0 {
		r.last = r.batches[0]
	}
	return r.frameReceiver.Receive(frames)
}

func (r *sizedReceiver) Header(i int) segment.Header {
	return segment.Header{GSOType: segment.GSOTCPv4, GSOSize: uint16(r.last[i][1])}
}

// TestFanInHeaders: a FanIn passes on each frame's header from its
// HeaderReceiver, also when its batch is handed out in pieces, and the
// zero Header for a plain Receiver's frames.
func TestFanInHeaders(t *testing.T) {
	a := &sizedReceiver{frameReceiver: frameReceiver{batches: [][][]byte{{{'a', 1}, {'a', 2}, {'a', 3}}, {{'a', 4}}}}}
	b := &sizedReceiver{frameReceiver: frameReceiver{batches: [][][]byte{{{'b', 5}, {'b', 6}}}}}
	c := &frameReceiver{batches: [][][]byte{{{'c', 7}, {'c', 8}}}}
	f := pipeline.NewFanIn([]frame.Receiver{a, b, c})
	defer f.Close()
	frames, seen := make([][]byte, 4), 0 // the first Receive sizes the batches
	for ends := 0; ends < 3; {
		n, err := f.Receive(frames)
		if errors.Is(err, net.ErrClosed) {
			ends++
		}
		for i, fr := range frames[:n] {
			want := segment.Header{GSOType: segment.GSOTCPv4, GSOSize: uint16(fr[1])}
			if fr[0] == 'c' {
				want = segment.Header{}
			}
			if h := f.Header(i); h != want {
				t.Errorf("frame %q: header %+v, want %+v", fr, h, want)
			}
			seen++
		}
		frames = frames[:1+seen%2] // pieces of one and of two frames
	}
	if seen != 8 {
		t.Errorf("%d frames, want 8", seen)
	}
}
