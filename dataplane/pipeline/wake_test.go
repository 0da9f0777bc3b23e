package pipeline_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/segment"
)

// stopWithin is how soon Run must return once its context ends.
const stopWithin = 100 * time.Millisecond

// wakeable blocks each Read or Receive until a packet comes (one every
// call under load) or a read deadline in the past is set, as a TUN queue
// or a UDP socket does.
type wakeable struct {
	pkt  []byte // handed out by every call under load; nil: idle
	mu   sync.Mutex
	woke chan struct{} // closed by a deadline in the past
	buf  []byte        // the Receiver's frame
}

func newWakeable(t *testing.T, load bool) *wakeable {
	w := &wakeable{woke: make(chan struct{})}
	if load {
		w.pkt = tcpSuperPacket(60 << 10)
		w.buf = make([]byte, 14+1500)
		copy(w.buf[14:], tcpSegments(t, 1400)[0][14:])
	}
	return w
}

func (w *wakeable) SetReadDeadline(t time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.woke:
		if t.IsZero() || t.After(time.Now()) {
			w.woke = make(chan struct{})
		}
	default:
		if !t.IsZero() && !t.After(time.Now()) {
			close(w.woke)
		}
	}
	return nil
}

// wait blocks while idle and not woken.
func (w *wakeable) wait() error {
	w.mu.Lock()
	woke := w.woke
	w.mu.Unlock()
	select {
	case <-woke:
		return os.ErrDeadlineExceeded
	default:
	}
	if w.pkt != nil {
		return nil
	}
	<-woke
	return os.ErrDeadlineExceeded
}

func (w *wakeable) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if err := w.wait(); err != nil {
		return 0, err
	}
	sizes[0] = copy(bufs[0][offset:], w.pkt)
	return 1, nil
}

func (w *wakeable) Headroom() int { return 14 }

func (w *wakeable) Receive(frames [][]byte) (int, error) {
	if err := w.wait(); err != nil {
		return 0, err
	}
	frames[0] = w.buf
	return 1, nil
}

// discard is a VectorWriter that takes everything.
type discard struct{}

func (discard) Write(bufs [][]byte, _ int) (int, error)   { return len(bufs), nil }
func (discard) WriteVectors(pkts [][][]byte) (int, error) { return len(pkts), nil }

// Forwarder.Run (from a Source, or a WireSource over a Receiver) and
// ReturnPath.Run return within stopWithin of their context's end, idle
// (blocked in Read or Receive) and under load, and run again afterwards.
func TestRunStopsOnCancel(t *testing.T) {
	for _, load := range []bool{false, true} {
		name := map[bool]string{false: "idle", true: "load"}[load]
		t.Run("forwarder/"+name, func(t *testing.T) {
			f, _, queue := newTestForwarder(t, newWakeable(t, load), newMemSink(256, 2048))
			defer queue.Close()
			checkStops(t, f.Run, load, func() uint64 { return f.Stats().Segments })
		})
		t.Run("wire/"+name, func(t *testing.T) {
			ws, err := pipeline.NewWireSource(pipeline.WireConfig{Receiver: newWakeable(t, load), MTU: 1500})
			if err != nil {
				t.Fatal(err)
			}
			f, _, queue := newTestForwarder(t, ws, newMemSink(256, 2048))
			defer queue.Close()
			checkStops(t, f.Run, load, func() uint64 { return ws.Stats().Packets })
		})
		t.Run("return/"+name, func(t *testing.T) {
			r, err := pipeline.NewReturnPath(pipeline.ReturnConfig{
				Receiver: newWakeable(t, load), Writer: discard{}, HeaderSize: segment.HeaderSize, TCP: true,
			})
			if err != nil {
				t.Fatal(err)
			}
			checkStops(t, r.Run, load, func() uint64 { return r.Stats().Packets })
		})
	}
}

// checkStops runs run three times (each Run after the first clears the
// deadline the one before left), under load once it moves packets
// (progress counts them), and cancels it. Every Run must return nil, and
// one at least within stopWithin: the bound is a bound, not a speed, and
// this machine's scheduler sometimes runs a goroutine tens of
// milliseconds late, while a Run that waits for a timeout or for a
// device to close misses it every time. Idle, nothing may move.
func checkStops(t *testing.T, run func(context.Context) error, load bool, progress func() uint64) {
	t.Helper()
	var late []time.Duration
	for range 3 {
		if el := checkStop(t, run, load, progress); el > stopWithin {
			late = append(late, el)
		}
	}
	if len(late) == 3 {
		t.Errorf("Run returned %v after cancel, want within %v", late, stopWithin)
	}
	if !load && progress() != 0 {
		t.Errorf("idle, yet %d packets moved", progress())
	}
}

// checkStop runs run until it moves packets (load) or for a while (idle),
// cancels it and returns how long Run took to return; it fails the test
// if Run fails, never moves a packet under load, or does not return.
func checkStop(t *testing.T, run func(context.Context) error, load bool, progress func() uint64) time.Duration {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	time.Sleep(30 * time.Millisecond)
	for from, deadline := progress(), time.Now().Add(5*time.Second); load && progress() == from; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no packet moved under load")
		}
	}
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run returned %v", err)
		}
		return time.Since(start)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
		return 0
	}
}
