package pipeline_test

import (
	"context"
	"io"
	"runtime"
	"testing"
)

// steadySource yields the same super-packet, one per Read, and stops at
// two marks to let the test read the allocation counter: after warm
// packets and after warm+n.
type steadySource struct {
	pkt       []byte
	read      int
	warm, end int
	mark      chan struct{} // the source reached a mark
	resume    chan struct{} // the test read the counter
}

func (s *steadySource) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if s.read == s.warm || s.read == s.end {
		s.mark <- struct{}{}
		<-s.resume
	}
	if s.read == s.end {
		return 0, io.EOF
	}
	s.read++
	sizes[0] = copy(bufs[0][offset:], s.pkt)
	return 1, nil
}

// TestForwarderAllocs: in steady state, forwarding a 64 KiB super-packet
// (read, validate, admit, split into 45 frames, queue, transmit, complete,
// release) allocates nothing.
func TestForwarderAllocs(t *testing.T) {
	const warm, n = 200, 2000
	src := &steadySource{pkt: tcpSuperPacket(64000), warm: warm, end: warm + n, mark: make(chan struct{}), resume: make(chan struct{})}
	sink := newMemSink(512, 2048)
	sink.record = false // nothing grows
	f, _, _ := newTestForwarder(t, src, sink)
	done := make(chan error, 1)
	go func() { done <- f.Run(context.Background()) }()
	var before, after runtime.MemStats
	<-src.mark
	runtime.ReadMemStats(&before)
	src.resume <- struct{}{}
	<-src.mark
	runtime.ReadMemStats(&after)
	src.resume <- struct{}{}
	if err := <-done; err == nil {
		t.Fatal("Run ended without the source's error")
	}
	st := f.Stats()
	if st.SuperPackets != warm+n || st.Drops.Total() != 0 {
		t.Fatalf("stats %+v", st)
	}
	t.Logf("%d allocations while forwarding %d super-packets", after.Mallocs-before.Mallocs, n)
	if perPacket := float64(after.Mallocs-before.Mallocs) / n; perPacket > 0.01 {
		t.Errorf("%.3f allocations per super-packet (%d in %d), want 0", perPacket, after.Mallocs-before.Mallocs, n)
	}
}
