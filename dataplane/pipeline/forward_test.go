package pipeline_test

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/segment"
	"github.com/gsoplane/gsoplane/txqueue"
)

// newTestForwarder wires src and sink with a budget and a Block queue.
func newTestForwarder(t testing.TB, src frame.Source, sink frame.Sink) (*pipeline.Forwarder, *txqueue.Budget, *txqueue.Queue[frame.Frame]) {
	t.Helper()
	size := txqueue.Truesize(2048)
	budget, err := txqueue.NewBudget(txqueue.BudgetConfig{Burst: 128 * size, Limit: 512 * size})
	if err != nil {
		t.Fatal(err)
	}
	queue := newQueue(t)
	f, err := pipeline.NewForwarder(pipeline.ForwarderConfig{
		Source: src, HeaderSize: segment.HeaderSize, Sink: sink, FrameSize: 2048, Budget: budget, Queue: queue,
	})
	if err != nil {
		t.Fatal(err)
	}
	return f, budget, queue
}

// newQueue returns a Block queue of 256 frames of 2048 bytes.
func newQueue(t testing.TB) *txqueue.Queue[frame.Frame] {
	t.Helper()
	size := txqueue.Truesize(2048)
	queue, err := txqueue.NewQueue[frame.Frame](txqueue.QueueConfig{Policy: txqueue.Block, Packets: 256, Bytes: 1024 * size})
	if err != nil {
		t.Fatal(err)
	}
	return queue
}

// runWithin runs f and fails the test if it does not return in time.
func runWithin(t *testing.T, f *pipeline.Forwarder) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f.Run(context.Background()) }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Run hung")
		return nil
	}
}

// failingSink takes some frames, then fails for good.
type failingSink struct {
	*memSink
	left int
}

func (s *failingSink) Transmit(frames []frame.Frame) (int, error) {
	if s.left <= 0 {
		return 0, errors.New("link gone")
	}
	n, err := s.memSink.Transmit(frames[:min(len(frames), s.left)])
	s.left -= n
	return n, err
}

// A sink that fails stops the forwarder, and nothing stays charged once
// the queue is closed.
func TestForwarderSinkFailure(t *testing.T) {
	pkts := make([][]byte, 20)
	for i := range pkts {
		pkts[i] = tcpSuperPacket(10 << 10)
	}
	f, budget, queue := newTestForwarder(t, &sliceSource{pkts: pkts}, &failingSink{newMemSink(256, 2048), 20})
	if err := runWithin(t, f); err == nil || errors.Is(err, pipeline.ErrSourceClosed) {
		t.Fatalf("Run = %v, want the sink's error", err)
	}
	queue.Close()
	if st := budget.Stats(); st.InFlight != 0 {
		t.Fatalf("%d bytes still charged", st.InFlight)
	}
}

// stuckSink takes frames but never reports them gone, and its Wait fails.
type stuckSink struct{ *memSink }

var errWait = errors.New("completion ring gone")

func (s stuckSink) Complete() (int, error)   { return 0, nil }
func (s stuckSink) Wait(time.Duration) error { return errWait }

// A sink whose Wait fails stops the forwarder with that error, as a failed
// Transmit does, and nothing stays charged once the queue is closed.
func TestForwarderSinkWaitFailure(t *testing.T) {
	f, budget, queue := newTestForwarder(t, &sliceSource{pkts: [][]byte{tcpSuperPacket(10 << 10)}}, stuckSink{newMemSink(256, 2048)})
	if err := runWithin(t, f); !errors.Is(err, errWait) {
		t.Fatalf("Run = %v, want the sink's Wait error", err)
	}
	if st := f.Stats(); st.Transmitted == 0 || st.TxErrors != 0 {
		t.Fatalf("stats %+v: want frames transmitted and no Transmit errors", st)
	}
	queue.Close()
	if st := budget.Stats(); st.InFlight != 0 {
		t.Fatalf("%d bytes still charged", st.InFlight)
	}
}

// truncSource returns a packet together with ErrPacketTruncated, then
// another packet, then io.EOF.
type truncSource struct{ calls int }

func (s *truncSource) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	s.calls++
	switch s.calls {
	case 1:
		sizes[0] = copy(bufs[0][offset:], tcpSuperPacket(3000))
		return 1, frame.ErrPacketTruncated
	case 2:
		sizes[0] = copy(bufs[0][offset:], tcpSuperPacket(3000))
		return 1, nil
	}
	return 0, io.EOF
}

// Packets read together with an error are forwarded, and a truncated
// packet is counted, not fatal.
func TestForwarderReadError(t *testing.T) {
	f, _, _ := newTestForwarder(t, &truncSource{}, newMemSink(256, 2048))
	if err := runWithin(t, f); !errors.Is(err, io.EOF) {
		t.Fatalf("Run = %v, want io.EOF", err)
	}
	st := f.Stats()
	if st.SuperPackets != 2 || st.Segments != 6 || st.Drops[frame.DropInvalid] != 1 {
		t.Fatalf("stats %+v: want 2 super-packets, 6 segments, 1 invalid", st)
	}
}

// A super-packet with more segments than the sink has frames is dropped
// instead of waiting forever.
func TestForwarderSmallSink(t *testing.T) {
	src := &sliceSource{pkts: [][]byte{tcpSuperPacket(60 << 10), tcpSuperPacket(3000)}}
	f, _, _ := newTestForwarder(t, src, newMemSink(8, 2048))
	if err := runWithin(t, f); !errors.Is(err, io.EOF) {
		t.Fatalf("Run = %v, want io.EOF", err)
	}
	if st := f.Stats(); st.Drops[frame.DropNoFrames] != 1 || st.Segments != 3 {
		t.Fatalf("stats %+v: want 1 super-packet dropped for want of frames, 3 segments forwarded", st)
	}
}

// gateSource yields one packet, then blocks until gate is closed, then
// ends (io.EOF).
type gateSource struct {
	gate chan struct{}
	sent bool
}

func (s *gateSource) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if !s.sent {
		s.sent = true
		sizes[0] = copy(bufs[0][offset:], tcpSuperPacket(10<<10))
		return 1, nil
	}
	<-s.gate
	return 0, io.EOF
}

// backlogSink is a memSink with a backlog: ready, once closed, until a
// Transmit with no frames works it off and closes flushed.
type backlogSink struct {
	*memSink
	ready, flushed chan struct{}
	done           atomic.Bool
}

func (s *backlogSink) Backlog() <-chan struct{} {
	if s.done.Load() {
		return nil
	}
	return s.ready
}

func (s *backlogSink) Transmit(frames []frame.Frame) (int, error) {
	if len(frames) == 0 && !s.done.Swap(true) {
		close(s.flushed)
	}
	return s.memSink.Transmit(frames)
}

// A BackloggedSink's backlog wakes an idle forwarder, whose sink loop
// then calls Transmit with no frames.
func TestForwarderBacklog(t *testing.T) {
	src := &gateSource{gate: make(chan struct{})}
	sink := &backlogSink{memSink: newMemSink(256, 2048), ready: make(chan struct{}), flushed: make(chan struct{})}
	f, _, _ := newTestForwarder(t, src, sink)
	done := make(chan error, 1)
	go func() { done <- f.Run(context.Background()) }()
	for deadline := time.Now().Add(5 * time.Second); f.Stats().Completed == 0 || f.Stats().Completed != f.Stats().Transmitted; {
		if time.Now().After(deadline) {
			t.Fatalf("the packet did not go out: %+v", f.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond) // the sink loop waits for the queue
	close(sink.ready)
	select {
	case <-sink.flushed:
	case <-time.After(5 * time.Second):
		t.Error("the backlog was not worked off")
	}
	close(src.gate)
	if err := <-done; err != nil && !errors.Is(err, pipeline.ErrSourceClosed) && !errors.Is(err, io.EOF) {
		t.Errorf("Run: %v", err)
	}
}
