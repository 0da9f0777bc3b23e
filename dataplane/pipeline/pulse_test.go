package pipeline_test

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/segment"
)

// chanSource yields the packets sent on its channel, one per Read, and
// io.EOF once it is closed.
type chanSource chan []byte

func (s chanSource) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	p, ok := <-s
	if !ok {
		return 0, io.EOF
	}
	sizes[0] = copy(bufs[0][offset:], p)
	return 1, nil
}

// chanReceiver hands out the batches sent on its channel, and
// net.ErrClosed once it is closed.
type chanReceiver chan [][]byte

func (r chanReceiver) Headroom() int { return 14 }

func (r chanReceiver) Receive(frames [][]byte) (int, error) {
	b, ok := <-r
	if !ok {
		return 0, net.ErrClosed
	}
	return copy(frames, b), nil
}

// gate blocks its callers while shut: wedge shuts it, and the next
// caller says so on entered and waits until release.
type gate struct {
	shut             chan struct{}
	entered, release chan struct{}
}

func newGate() *gate {
	return &gate{shut: make(chan struct{}, 1), entered: make(chan struct{}), release: make(chan struct{})}
}

func (g *gate) wedge() { g.shut <- struct{}{} }

func (g *gate) pass() {
	select {
	case <-g.shut:
		close(g.entered)
		<-g.release
	default:
	}
}

// blockingWriter writes nothing, through its gate.
type blockingWriter struct{ *gate }

func (w blockingWriter) Write(bufs [][]byte, offset int) (int, error) {
	w.pass()
	return len(bufs), nil
}

// checkWedge checks that the loop whose pulse pulse returns is alive
// while it waits for work, not alive while g holds it, and alive again
// once g lets go; kick makes it work.
func checkWedge(t *testing.T, pulse func() pipeline.Pulse, g *gate, kick func()) {
	t.Helper()
	waitAlive := func(what string) {
		t.Helper()
		before := pulse()
		for deadline := time.Now().Add(10 * time.Second); !pulse().Alive(before); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the loop's pulse %d stays still", what, before)
			}
		}
	}
	waitAlive("idle")
	g.wedge()
	kick()
	<-g.entered
	before := pulse()
	if now := pulse(); now.Alive(before) {
		t.Errorf("wedged: pulse %d after %d is alive", now, before)
	}
	close(g.release)
	waitAlive("released")
}

// TestForwarderPulses: the producer's pulse is alive while it waits for
// packets and while the sink loop's is, and not while a hook holds the
// producer; the sink loop's stays alive all along, waiting for segments.
func TestForwarderPulses(t *testing.T) {
	src, g := make(chanSource), newGate()
	f, err := pipeline.NewForwarder(pipeline.ForwarderConfig{
		Source: src, HeaderSize: segment.HeaderSize, Sink: newMemSink(256, 2048), FrameSize: 2048, Queue: newQueue(t),
		Hook: func([]byte) bool { g.pass(); return true },
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- f.Run(context.Background()) }()
	sink := f.Pulses()[1]
	checkWedge(t, func() pipeline.Pulse { return f.Pulses()[0] }, g, func() { src <- tcpSuperPacket(4000) })
	for deadline := time.Now().Add(10 * time.Second); !f.Pulses()[1].Alive(sink); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) { // the loop may not have started when sink was read
			t.Fatalf("the sink loop's pulse %d after %d: not alive", f.Pulses()[1], sink)
		}
	}
	close(src)
	if err := <-done; err == nil {
		t.Error("Run: nil error after the source ended, want it")
	}
}

// TestReturnPathPulse: the return path's pulse is alive while it waits
// for frames, and not while its writer holds it.
func TestReturnPathPulse(t *testing.T) {
	recv, g := make(chanReceiver), newGate()
	r, err := pipeline.NewReturnPath(pipeline.ReturnConfig{Receiver: recv, Writer: blockingWriter{g}, HeaderSize: segment.HeaderSize})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	checkWedge(t, r.Pulse, g, func() { recv <- tcpSegments(t, 1000) })
	close(recv)
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// TestAlive: loops are alive together only if each is.
func TestAlive(t *testing.T) {
	for _, c := range []struct {
		before, now []pipeline.Pulse
		want        bool
	}{
		{[]pipeline.Pulse{2, 4}, []pipeline.Pulse{4, 6}, true},  // both came round
		{[]pipeline.Pulse{3, 4}, []pipeline.Pulse{3, 6}, true},  // one waits for work
		{[]pipeline.Pulse{2, 4}, []pipeline.Pulse{2, 6}, false}, // one wedged
		{[]pipeline.Pulse{2}, []pipeline.Pulse{4, 6}, false},    // not the same loops
	} {
		if got := pipeline.Alive(c.before, c.now); got != c.want {
			t.Errorf("Alive(%v, %v) = %v, want %v", c.before, c.now, got, c.want)
		}
	}
}
