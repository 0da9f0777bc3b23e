package pipeline_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/segment"
	"github.com/gsoplane/gsoplane/txqueue"
)

// withMSS returns a copy of a super-packet from tcpSuperPacket with
// gso_size mss.
func withMSS(raw []byte, mss int) []byte {
	raw = bytes.Clone(raw)
	h, err := segment.DecodeHeader(raw, segment.HeaderSize)
	if err != nil {
		panic(err)
	}
	h.GSOSize = uint16(mss)
	if err := h.Encode(raw, segment.HeaderSize); err != nil {
		panic(err)
	}
	return raw
}

// TestForwarderManySegments: a 64 KiB TSO super-packet at a small MSS
// (745 segments at 88, 65,495 at 1, as a hostile TUN writer may send)
// goes through a sink of BurstSegments frames and a budget of one Burst,
// less than the packet's charge, a chunk of BurstSegments segments per
// admission, exactly as Split cuts it: none dropped, nothing left
// charged, never more than one Burst in flight. A sink that would take it
// whole gets it cut, with partial checksums.
func TestForwarderManySegments(t *testing.T) {
	size := txqueue.Truesize(2048)
	burst := frame.BurstSegments * size
	for _, c := range []struct {
		name string
		mss  int
		mode frame.Offload
	}{
		{"mss88", 88, frame.OffloadNone},
		{"mss88/gso-sink", 88, frame.OffloadGSO},
		{"mss1", 1, frame.OffloadNone},
	} {
		t.Run(c.name, func(t *testing.T) {
			raw := withMSS(tcpSuperPacket(65535-40), c.mss)
			h, _ := segment.DecodeHeader(raw, segment.HeaderSize)
			pkt := raw[segment.HeaderSize:]
			l, err := segment.Validate(pkt, h)
			if err != nil {
				t.Fatal(err)
			}
			sink := &offloadSink{memSink: newMemSink(frame.BurstSegments, 2048), mode: c.mode, large: make([]byte, 1<<17), quiet: c.mss == 1}
			sink.memSink.record = c.mss == 1
			budget, err := txqueue.NewBudget(txqueue.BudgetConfig{Burst: burst, Limit: burst, Fixed: true})
			if err != nil {
				t.Fatal(err)
			}
			queue := newQueue(t)
			f, err := pipeline.NewForwarder(pipeline.ForwarderConfig{
				Source: &sliceSource{pkts: [][]byte{raw}}, HeaderSize: segment.HeaderSize, Sink: sink, FrameSize: 2048, Budget: budget, Queue: queue,
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := runWithin(t, f); !errors.Is(err, io.EOF) {
				t.Fatalf("Run = %v, want io.EOF", err)
			}
			queue.Close()
			st, bst := f.Stats(), budget.Stats()
			if st.Segments != uint64(l.Segments()) || st.Completed != st.Segments || st.Drops.Total() != 0 || st.Offloaded != 0 || st.Cut != 1 {
				t.Fatalf("stats %+v: want %d segments cut and completed, none dropped, none offloaded", st, l.Segments())
			}
			if st.SegmentsPerRead[len(pipeline.SegmentBounds)] != 1 {
				t.Errorf("segments per read %v: want the super-packet in the last bucket, over %d", st.SegmentsPerRead, pipeline.SegmentBounds[len(pipeline.SegmentBounds)-1])
			}
			if bst.InFlight != 0 || bst.Peak > int64(burst) {
				t.Errorf("budget %+v: want nothing left charged and at most one Burst (%d) in flight", bst, burst)
			}
			if c.mss == 1 {
				checkLengths(t, sink.sent, l)
				return
			}
			checkSegments(t, sink.got, pkt, h, c.mode != frame.OffloadNone)
		})
	}
}

// checkLengths checks the lengths of the segments of a super-packet of
// layout l.
func checkLengths(t *testing.T, sent []int, l segment.Layout) {
	t.Helper()
	total := 0
	for _, n := range sent {
		total += n - l.HdrLen()
	}
	if len(sent) != l.Segments() || total != l.PayloadLen() {
		t.Fatalf("%d segments of %d payload bytes, want %d of %d", len(sent), total, l.Segments(), l.PayloadLen())
	}
}

// checkSegments checks that the frames the sink got are Split's segments
// of pkt, those with a partial checksum once it is finished.
func checkSegments(t *testing.T, got []frame.Frame, pkt []byte, h segment.Header, partial bool) {
	t.Helper()
	l, _ := segment.Validate(pkt, h)
	want := make([][]byte, l.Segments())
	sizes := make([]int, len(want))
	for i := range want {
		want[i] = make([]byte, l.MaxSegLen())
	}
	if _, err := segment.Split(pkt, h, want, sizes, 0); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d frames, want %d segments", len(got), len(want))
	}
	for i, f := range got {
		if partial != (f.Header.Flags == segment.FlagNeedsCsum) {
			t.Fatalf("segment %d: header %+v, partial checksum %v", i, f.Header, partial)
		}
		if partial {
			finishChecksum(f.Buf, f.Header)
		}
		if !bytes.Equal(f.Buf, want[i][:sizes[i]]) {
			t.Fatalf("segment %d is not Split's", i)
		}
	}
}
