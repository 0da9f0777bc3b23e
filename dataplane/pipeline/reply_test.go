package pipeline_test

import (
	"errors"
	"io"
	"net/netip"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/internal/testing/dirtybuf"
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

// packetWriter records what is written to it.
type packetWriter struct {
	pkts [][]byte
	err  error
}

func (w *packetWriter) Write(bufs [][]byte, offset int) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	for _, b := range bufs {
		w.pkts = append(w.pkts, append([]byte(nil), b[offset:]...))
	}
	return len(bufs), nil
}

// TestICMPReplier writes errors behind a zeroed virtio-net header, from
// the router address of the packet's IP version, within the kernel's
// rate limits, and stays silent where a router must.
func TestICMPReplier(t *testing.T) {
	w := &packetWriter{}
	router := netip.MustParseAddr("198.18.0.2")
	r := pipeline.NewICMP(w, segment.HeaderSize, router, netip.Addr{})
	pkt := dfSuperPacket(1000)[segment.HeaderSize:]
	r.Unreachable(pkt)
	r.TooBig(pkt, 1280)
	if len(w.pkts) != 2 {
		t.Fatalf("%d packets written, want 2", len(w.pkts))
	}
	for i, want := range []header.ICMPv4Code{header.ICMPv4HostUnreachable, header.ICMPv4FragmentationNeeded} {
		b := w.pkts[i]
		if h, err := segment.DecodeHeader(b, segment.HeaderSize); err != nil || h != (segment.Header{}) {
			t.Errorf("error %d: virtio-net header %+v (%v), want zero", i, h, err)
		}
		ip := header.IPv4(b[segment.HeaderSize:])
		icmp := header.ICMPv4(ip.Payload())
		if ip.SourceAddress().String() != router.String() || ip.DestinationAddress().String() != "198.18.0.1" ||
			icmp.Type() != header.ICMPv4DstUnreachable || icmp.Code() != want {
			t.Errorf("error %d: %v → %v type %d code %d, want %v → 198.18.0.1 code %d", i, ip.SourceAddress(), ip.DestinationAddress(), icmp.Type(), icmp.Code(), router, want)
		}
	}
	if mtu := header.ICMPv4(header.IPv4(w.pkts[1][segment.HeaderSize:]).Payload()).MTU(); mtu != 1280 {
		t.Errorf("fragmentation needed carries MTU %d, want 1280", mtu)
	}
	r.Unreachable(w.pkts[0][segment.HeaderSize:]) // an ICMP error: never answered
	noDF := tcpSuperPacket(1000)[segment.HeaderSize:]
	r.TooBig(noDF, 1280) // a router fragments it
	v6 := make([]byte, 48)
	v6[0], v6[6], v6[7] = 0x60, 17, 64
	r.Unreachable(v6) // no IPv6 router address
	for range 10 {
		r.Unreachable(pkt) // the destination's bucket: 6, then one a second
	}
	st := r.Stats()
	if st.Sent < 6 || st.Sent > 7 || st.Limited == 0 || st.Silent != 3 || st.Failed != 0 {
		t.Errorf("stats %+v: want about 6 sent, the rest limited, 3 silent", st)
	}
	w.err = errors.New("gone")
	pipeline.NewICMP(w, 0, router, netip.Addr{}).Unreachable(pkt)
}

// TestICMPDirtyBuffer: an error is the same whatever its buffer held
// before (stale: a longer error), virtio-net header included. Packet too
// big, which has no IP ID and no per-destination limit, gives the same
// bytes every time.
func TestICMPDirtyBuffer(t *testing.T) {
	w := &packetWriter{}
	r := pipeline.NewICMP(w, segment.HeaderSizeMrg, netip.Addr{}, netip.MustParseAddr("2001:2:0:1::2"))
	longer := func([][]byte) [][]byte {
		r.TooBig(udp6(1400, 64), 1280)
		return nil
	}
	out := dirtybuf.Check(t, [][]byte{pipeline.ReplyBuffer(r)}, longer, func([][]byte) [][]byte {
		w.pkts = nil
		r.TooBig(udp6(100, 64), 1280)
		return w.pkts
	})
	if want := segment.HeaderSizeMrg + 48 + len(udp6(100, 64)); len(out) != 1 || len(out[0]) != want {
		t.Fatalf("%d errors written, want one of %d bytes", len(out), want)
	}
}

// TestICMPTimeExceeded: the ICMP Replier answers a packet whose TTL ran
// out with time exceeded, TTL exceeded in transit (ICMPv6: hop limit
// exceeded in transit), from the router's address of the packet's
// family, behind a zero virtio-net header for a TUN device.
func TestICMPTimeExceeded(t *testing.T) {
	w := &packetWriter{}
	router4, router6 := netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("2001:2:0:1::2")
	r := pipeline.NewICMP(w, segment.HeaderSize, router4, router6)
	r.TimeExceeded(udp4(100, true))
	r.TimeExceeded(udp6(100, 1))
	if len(w.pkts) != 2 || r.Stats().Sent != 2 {
		t.Fatalf("%d packets written (stats %+v), want 2", len(w.pkts), r.Stats())
	}
	if h, err := segment.DecodeHeader(w.pkts[0], segment.HeaderSize); err != nil || h != (segment.Header{}) {
		t.Errorf("virtio-net header %+v (%v), want zero", h, err)
	}
	ip4 := header.IPv4(w.pkts[0][segment.HeaderSize:])
	if icmp := header.ICMPv4(ip4.Payload()); ip4.SourceAddress().String() != router4.String() ||
		icmp.Type() != header.ICMPv4TimeExceeded || icmp.Code() != header.ICMPv4TTLExceeded {
		t.Errorf("IPv4: from %v type %d code %d, want time exceeded (11/0) from %v", ip4.SourceAddress(), icmp.Type(), icmp.Code(), router4)
	}
	ip6 := header.IPv6(w.pkts[1][segment.HeaderSize:])
	if icmp := header.ICMPv6(ip6.Payload()); ip6.SourceAddress().String() != router6.String() ||
		icmp.Type() != header.ICMPv6TimeExceeded || icmp.Code() != header.ICMPv6HopLimitExceeded {
		t.Errorf("IPv6: from %v type %d code %d, want time exceeded (3/0) from %v", ip6.SourceAddress(), icmp.Type(), icmp.Code(), router6)
	}
}
