package pipeline_test

import (
	"context"
	"errors"
	"io"
	"runtime"
	"testing"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/segment"
)

// marks stops a steady source at two marks to let the test read the
// allocation counter: after warm packets and after warm+n.
type marks struct {
	read      int
	warm, end int
	mark      chan struct{} // the source reached a mark
	resume    chan struct{} // the test read the counter
}

func newMarks(warm, n int) *marks {
	return &marks{warm: warm, end: warm + n, mark: make(chan struct{}), resume: make(chan struct{})}
}

// next waits at a mark and reports whether another packet is due.
func (m *marks) next() bool {
	if m.read == m.warm || m.read == m.end {
		m.mark <- struct{}{}
		<-m.resume
	}
	if m.read == m.end {
		return false
	}
	m.read++
	return true
}

// steadySource yields the same super-packet, one per Read.
type steadySource struct {
	*marks
	pkt []byte
}

func (s *steadySource) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if !s.next() {
		return 0, io.EOF
	}
	sizes[0] = copy(bufs[0][offset:], s.pkt)
	return 1, nil
}

// steadyReceiver receives the same frame, one per Receive.
type steadyReceiver struct {
	*marks
	frame []byte
}

func (r *steadyReceiver) Headroom() int { return 14 }

func (r *steadyReceiver) Receive(frames [][]byte) (int, error) {
	if !r.next() {
		return 0, io.EOF
	}
	frames[0] = r.frame
	return 1, nil
}

// runtimeAllocs bounds the allocations per super-packet (or per chunk
// of one) that allocsPerPacket may see in a forwarder that allocates
// nothing: the Go runtime's own, at the goroutines' hand-overs (40 in
// 2000 super-packets beside other builds on two cores, where a hundredth
// once failed). Any allocation per packet or chunk makes at least one.
const runtimeAllocs = 0.1

// allocsPerPacket runs f, whose source counts packets with m, and
// returns the allocations per packet between m's marks.
func allocsPerPacket(t *testing.T, f *pipeline.Forwarder, m *marks) float64 {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f.Run(context.Background()) }()
	var before, after runtime.MemStats
	<-m.mark
	runtime.ReadMemStats(&before)
	m.resume <- struct{}{}
	<-m.mark
	runtime.ReadMemStats(&after)
	m.resume <- struct{}{}
	if err := <-done; err == nil {
		t.Fatal("Run ended without the source's error")
	}
	n := m.end - m.warm
	if st := f.Stats(); st.SuperPackets != uint64(m.end) || st.Drops.Total() != 0 {
		t.Fatalf("stats %+v", st)
	}
	t.Logf("%d allocations while forwarding %d super-packets", after.Mallocs-before.Mallocs, n)
	return float64(after.Mallocs-before.Mallocs) / float64(n)
}

// TestForwarderAllocs: in steady state, forwarding a 64 KiB super-packet
// (read, validate, admit, split into 45 frames, queue, transmit, complete,
// release) allocates nothing, nor at MSS 88 (728 frames in 6 chunks of at
// most BurstSegments, each admitted: the bound is per chunk, the
// runtime's rare allocations coming with the goroutines' hand-overs);
// nor does handing it whole to an OffloadSink from the large frame it
// was read into.
func TestForwarderAllocs(t *testing.T) {
	mem := newMemSink(512, 2048)
	mem.record = false // nothing grows
	lending := newLendingSink(16)
	lending.record = false
	for _, c := range []struct {
		name   string
		sink   frame.Sink
		pkt    []byte
		chunks float64
	}{
		{"split", mem, tcpSuperPacket(64000), 1},
		{"split in chunks", mem, withMSS(tcpSuperPacket(64000), 88), 6},
		{"in place", lending, tcpSuperPacket(64000), 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newMarks(200, 2000)
			f, _, _ := newTestForwarder(t, &steadySource{m, c.pkt}, c.sink)
			if a := allocsPerPacket(t, f, m); a > runtimeAllocs*c.chunks {
				t.Errorf("%.3f allocations per super-packet of %.0f chunks, want 0", a, c.chunks)
			}
		})
	}
	if lending.lent == 0 {
		t.Error("the lending sink lent no frame")
	}
}

// TestWireWholeAllocs: in steady state, a 64 KiB super-packet from a
// wire that leaves whole (receive, MSS lookup, ForWire, TTL, admit, one
// large frame, queue, transmit, complete) allocates nothing.
func TestWireWholeAllocs(t *testing.T) {
	m := newMarks(200, 2000)
	pkt := wireFrame(tcpSuperPacket(64000)[segment.HeaderSize:])
	src, err := pipeline.NewWireSource(pipeline.WireConfig{
		Receiver: &steadyReceiver{m, pkt}, MTU: 1500, MSS: pipeline.NewMSSTable(pipeline.MSSConfig{Flows: 64}), Clamp: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	sink := &offloadSink{memSink: newMemSink(64, 2048), mode: frame.OffloadGSO, large: make([]byte, 1<<16), quiet: true}
	sink.memSink.record = false
	f, _, _ := newTestForwarder(t, src, sink)
	if a := allocsPerPacket(t, f, m); a > runtimeAllocs {
		t.Errorf("%.3f allocations per super-packet, want 0", a)
	}
	if st := f.Stats(); st.Offloaded != uint64(m.end) || st.Cut != 0 {
		t.Errorf("%d super-packets left whole, %d cut; want %d and 0", st.Offloaded, st.Cut, m.end)
	}
}

// countingSource yields the same packet n times, then io.EOF.
type countingSource struct {
	pkt []byte
	n   int
}

func (s *countingSource) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if s.n == 0 {
		return 0, io.EOF
	}
	s.n--
	sizes[0] = copy(bufs[0][offset:], s.pkt)
	return 1, nil
}

// BenchmarkForwardWhole forwards 64 KiB super-packets to an OffloadSink
// that takes them whole: read into its large frames (in place), or into
// the forwarder's own buffers and copied (its frames too small to read
// into). The source's copy stands for the TUN read.
func BenchmarkForwardWhole(b *testing.B) {
	pkt := tcpSuperPacket(45 * 1448)
	for _, c := range []struct {
		name string
		size int
	}{{"in-place", lendingHeadroom + 65535 + 40}, {"copied", lendingHeadroom + len(pkt)}} {
		b.Run(c.name, func(b *testing.B) {
			sink := newLendingSinkOf(16, c.size)
			sink.record = false
			f, _, _ := newTestForwarder(b, &countingSource{pkt: pkt, n: b.N}, sink)
			b.SetBytes(int64(len(pkt)))
			b.ResetTimer()
			if err := f.Run(context.Background()); !errors.Is(err, io.EOF) {
				b.Fatal(err)
			}
			b.StopTimer()
			if st := f.Stats(); st.Offloaded != uint64(b.N) {
				b.Fatalf("%d of %d super-packets offloaded", st.Offloaded, b.N)
			}
		})
	}
}
