package pipeline_test

import (
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/pipeline"
)

// syncSink is a memSink that says it completes on Transmit
// (frame.SyncSink); each Transmit call whose number refuse picks takes
// nothing, as a full device queue does.
type syncSink struct {
	*memSink
	calls  int
	refuse func(call int) bool
}

func (s *syncSink) CompletesOnTransmit() bool { return true }

func (s *syncSink) Transmit(frames []frame.Frame) (int, error) {
	s.mu.Lock()
	s.calls++
	no := s.refuse != nil && s.refuse(s.calls)
	s.mu.Unlock()
	if no {
		return 0, nil
	}
	return s.memSink.Transmit(frames)
}

// transmitted is how many segments the sink has sent.
func (s *syncSink) transmitted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sent)
}

// checkSource yields pkts one per Read and then io.EOF; before each Read
// it calls check with the number of packets yielded so far, and before
// the first it waits for the forwarder's sink loop to wait for work.
type checkSource struct {
	f     *pipeline.Forwarder
	pkts  [][]byte
	given int
	check func(given int) error
	err   error
}

func (s *checkSource) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if s.given == 0 {
		for deadline := time.Now().Add(5 * time.Second); s.f.Pulses()[1]&1 == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				return 0, errors.New("the sink loop never waited for work")
			}
		}
	}
	if s.err == nil {
		s.err = s.check(s.given)
	}
	if s.given == len(s.pkts) {
		return 0, io.EOF
	}
	sizes[0] = copy(bufs[0][offset:], s.pkts[s.given])
	s.given++
	return 1, nil
}

// On a SyncSink the forwarder runs to completion: every super-packet's
// segments are transmitted and complete before the producer reads the
// next, with the sink loop idle, and nothing stays charged.
func TestForwarderRunsToCompletion(t *testing.T) {
	const pkts, segs = 20, 8 // tcpSuperPacket(10 << 10): 8 segments of 1448 bytes at most
	src := &checkSource{pkts: make([][]byte, pkts)}
	for i := range src.pkts {
		src.pkts[i] = tcpSuperPacket(10 << 10)
	}
	sink := &syncSink{memSink: newMemSink(256, 2048)}
	f, budget, _ := newTestForwarder(t, src, sink)
	src.f = f
	src.check = func(given int) error {
		if n := sink.transmitted(); n != given*segs {
			return fmt.Errorf("before read %d: %d segments transmitted, want %d", given+1, n, given*segs)
		}
		if st := budget.Stats(); st.InFlight != 0 {
			return fmt.Errorf("before read %d: %d bytes still charged", given+1, st.InFlight)
		}
		return nil
	}
	if err := runWithin(t, f); !errors.Is(err, pipeline.ErrSourceClosed) {
		t.Fatalf("Run = %v", err)
	}
	if src.err != nil {
		t.Fatal(src.err)
	}
	if st := f.Stats(); st.Segments != pkts*segs || st.Completed != pkts*segs {
		t.Fatalf("stats %+v: want %d segments forwarded and completed", st, pkts*segs)
	}
}

// What a SyncSink does not take at once (a full device queue) the sink
// loop sends: nothing is lost or reordered, nothing stays charged.
func TestForwarderRunToCompletionHandsOver(t *testing.T) {
	const pkts = 50
	src := &checkSource{pkts: make([][]byte, pkts), check: func(int) error { return nil }}
	var want []int
	for i := range src.pkts {
		src.pkts[i] = tcpSuperPacket(1000 + 997*i)
	}
	for _, p := range src.pkts {
		n := len(p) - 10 - 40 // header, IPv4 and TCP
		for ; n > 1448; n -= 1448 {
			want = append(want, 40+1448)
		}
		want = append(want, 40+n)
	}
	sink := &syncSink{memSink: newMemSink(256, 2048), refuse: func(call int) bool { return call%3 != 0 }}
	f, budget, queue := newTestForwarder(t, src, sink)
	src.f = f
	if err := runWithin(t, f); !errors.Is(err, pipeline.ErrSourceClosed) {
		t.Fatalf("Run = %v", err)
	}
	if src.err != nil {
		t.Fatal(src.err)
	}
	if fmt.Sprint(sink.sent) != fmt.Sprint(want) {
		t.Fatalf("segments sent %v, want %v", sink.sent, want)
	}
	queue.Close()
	if st := budget.Stats(); st.InFlight != 0 {
		t.Fatalf("%d bytes still charged", st.InFlight)
	}
}
