package pipeline_test

import (
	"errors"
	"io"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/segment"
)

// dfSuperPacket is tcpSuperPacket with DF set.
func dfSuperPacket(payload int) []byte {
	b := tcpSuperPacket(payload)
	ip := header.IPv4(b[segment.HeaderSize:])
	ip.SetFlagsFragmentOffset(header.IPv4FlagDontFragment, 0)
	ip.SetChecksum(0)
	ip.SetChecksum(^ip.CalculateChecksum())
	return b
}

// tooBigs records TooBig calls, and the TTL (hop limit) of the packets
// answered with time exceeded.
type tooBigs struct{ mtus, ttls []int }

func (r *tooBigs) Unreachable([]byte)         {}
func (r *tooBigs) TooBig(pkt []byte, mtu int) { r.mtus = append(r.mtus, mtu) }
func (r *tooBigs) TimeExceeded(pkt []byte) {
	ttl := int(pkt[8]) // IPv4 TTL
	if pkt[0]>>4 == 6 {
		ttl = int(pkt[7]) // IPv6 hop limit
	}
	r.ttls = append(r.ttls, ttl)
}

// TestForwarderMTU: a super-packet whose segments exceed the MTU is
// dropped and answered; one whose segments fit goes through; SetMTU(0)
// lifts the limit.
func TestForwarderMTU(t *testing.T) {
	src := &sliceSource{pkts: [][]byte{dfSuperPacket(10 << 10), dfSuperPacket(1000)}}
	sink := newMemSink(256, 2048)
	var replies tooBigs
	f, err := pipeline.NewForwarder(pipeline.ForwarderConfig{
		Source: src, HeaderSize: segment.HeaderSize, Sink: sink, FrameSize: 2048, Queue: newQueue(t),
		MTU: 1400, Replier: &replies,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := runWithin(t, f); !errors.Is(err, io.EOF) {
		t.Fatalf("Run = %v", err)
	}
	st := f.Stats()
	if st.Drops[frame.DropTooBig] != 1 || st.Segments != 1 || len(replies.mtus) != 1 || replies.mtus[0] != 1400 {
		t.Errorf("drops %v, segments %d, TooBig MTUs %v: want the 1488-byte segments refused at MTU 1400, the 1040-byte packet sent", st.Drops, st.Segments, replies.mtus)
	}
	if _, err := pipeline.NewForwarder(pipeline.ForwarderConfig{Source: src, HeaderSize: segment.HeaderSize, Sink: sink, FrameSize: 2048, Queue: newQueue(t), MTU: -1}); !errors.Is(err, frame.ErrInvalidConfig) {
		t.Errorf("MTU -1: %v, want ErrInvalidConfig", err)
	}
}
