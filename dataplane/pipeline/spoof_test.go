package pipeline_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/segment"
)

// TestReturnPathSpoofed: packets whose source lies in the prefixes
// behind the writer are dropped and counted, with GRO on and off; others
// pass.
func TestReturnPathSpoofed(t *testing.T) {
	inside := []netip.Prefix{netip.MustParsePrefix("2001:2::/48"), netip.MustParsePrefix("198.18.0.0/24")}
	elsewhere := []netip.Prefix{netip.MustParsePrefix("198.20.0.0/16")}
	for _, gro := range []bool{false, true} {
		for _, c := range []struct {
			inside  []netip.Prefix
			spoofed bool
		}{{inside, true}, {elsewhere, false}, {nil, false}} {
			segs := tcpSegments(t, 4*1448) // from 198.18.0.1
			w := &refusingWriter{}
			r, err := pipeline.NewReturnPath(pipeline.ReturnConfig{
				Receiver: &frameReceiver{batches: [][][]byte{segs}}, Writer: w,
				HeaderSize: segment.HeaderSize, TCP: gro, Inside: c.inside,
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			st := r.Stats()
			wantDrops, wantWritten := uint64(0), len(segs)
			if c.spoofed {
				wantDrops, wantWritten = uint64(len(segs)), 0
			}
			if st.Drops[frame.DropSpoofed] != wantDrops || len(w.pkts) != wantWritten {
				t.Errorf("gro %v, inside %v: %d spoofed, %d written; want %d, %d", gro, c.inside, st.Drops[frame.DropSpoofed], len(w.pkts), wantDrops, wantWritten)
			}
		}
	}
}

// TestWireSourceSpoofed: a packet from a source on the other side is
// dropped and counted; the next one passes.
func TestWireSourceSpoofed(t *testing.T) {
	recv := &frameReceiver{batches: [][][]byte{{wireFrame(udp4(10, false))}}}
	src, err := pipeline.NewWireSource(pipeline.WireConfig{Receiver: recv, MTU: 1500, Inside: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}})
	if err != nil {
		t.Fatal(err)
	}
	bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
	if n, err := src.Read(bufs, sizes, 0); n != 0 || err != nil {
		t.Errorf("Read = %d, %v; want the spoofed packet dropped", n, err)
	}
	if st := src.Stats(); st.Spoofed != 1 || st.Packets != 1 {
		t.Errorf("stats %+v, want 1 packet, 1 spoofed", st)
	}
}
