package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/icmp"
	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/internal/testing/dirtybuf"
	"github.com/gsoplane/gsoplane/segment"
)

// wireFrame puts pkt behind a 14-byte link-layer header and pads it to
// 60 bytes, as Ethernet does.
func wireFrame(pkt []byte) []byte {
	f := append(make([]byte, 14), pkt...)
	for len(f) < 60 {
		f = append(f, 0xee)
	}
	return f
}

// udp4 returns a UDP/IPv4 datagram of payload bytes with a complete
// checksum, DF set if df.
func udp4(payload int, df bool) []byte {
	pkt := make([]byte, header.IPv4MinimumSize+header.UDPMinimumSize+payload)
	src, dst := tcpip.AddrFrom4([4]byte{198, 18, 0, 1}), tcpip.AddrFrom4([4]byte{198, 19, 0, 2})
	ip := header.IPv4(pkt)
	var flags uint8
	if df {
		flags = header.IPv4FlagDontFragment
	}
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(pkt)), TTL: 64, Protocol: uint8(header.UDPProtocolNumber), SrcAddr: src, DstAddr: dst, Flags: flags})
	ip.SetChecksum(^ip.CalculateChecksum())
	u := header.UDP(ip.Payload())
	u.Encode(&header.UDPFields{SrcPort: 4000, DstPort: 9, Length: uint16(len(u))})
	for i := range u.Payload() {
		u.Payload()[i] = byte(i)
	}
	pseudo := header.PseudoHeaderChecksum(header.UDPProtocolNumber, src, dst, uint16(len(u)))
	u.SetChecksum(^u.CalculateChecksum(checksum.Checksum(u.Payload(), pseudo)))
	return pkt
}

// TestWireSource forwards packets received from a link through a
// forwarder at MTU 1500: what fits passes whole (Ethernet padding
// trimmed), a TCP super-packet and a UDP datagram without DF are cut to
// the MTU, a UDP datagram with DF is refused and answered, garbage is
// counted.
func TestWireSource(t *testing.T) {
	tcp := tcpSuperPacket(20000)[segment.HeaderSize:]
	small := udp4(10, false)
	recv := &frameReceiver{batches: [][][]byte{{
		wireFrame(small), wireFrame(tcp), wireFrame(udp4(3000, false)), wireFrame(udp4(3000, true)), wireFrame([]byte{0x45}),
	}}}
	var replies tooBigs
	src, err := pipeline.NewWireSource(pipeline.WireConfig{Receiver: recv, MTU: 1500, MSS: pipeline.NewMSSTable(pipeline.MSSConfig{}), Replier: &replies})
	if err != nil {
		t.Fatal(err)
	}
	sink := newMemSink(256, 2048)
	f, err := pipeline.NewForwarder(pipeline.ForwarderConfig{
		Source: src, HeaderSize: segment.HeaderSize, Sink: sink, FrameSize: 2048, Queue: newQueue(t), MTU: 1500,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := runWithin(t, f); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Run = %v, want the receiver's net.ErrClosed", err)
	}
	ws, st := src.Stats(), f.Stats()
	if want := (pipeline.WireStats{Packets: 5, Cut: 2, TooBig: 1, Invalid: 1}); ws != want {
		t.Errorf("wire stats %+v, want %+v", ws, want)
	}
	if len(replies.mtus) != 1 || replies.mtus[0] != 1500 {
		t.Errorf("TooBig answers %v, want one at MTU 1500", replies.mtus)
	}
	segs := 1 + (20000+1447)/1448 + (3008+1479)/1480 // the datagram, TSO at MSS 1448, UFO fragments of 1480
	if st.Segments != uint64(segs) || st.Drops.Total() != 0 {
		t.Errorf("forwarder: %d segments, drops %v; want %d, none", st.Segments, st.Drops, segs)
	}
	for _, n := range sink.sent {
		if n > 1500 {
			t.Errorf("a %d-byte packet left at MTU 1500", n)
		}
	}
	if sink.sent[0] != len(small) {
		t.Errorf("the small datagram left with %d bytes, want %d (padding trimmed)", sink.sent[0], len(small))
	}
}

// TestWireSourceDirtyBuffers: what Read writes (virtio-net header,
// packet with its TTL taken down) is the same whatever its buffers held.
func TestWireSourceDirtyBuffers(t *testing.T) {
	frames := [][]byte{
		wireFrame(udp4(10, false)), wireFrame(tcpSuperPacket(20000)[segment.HeaderSize:]), wireFrame(udp4(3000, false)),
		wireFrame(udp6(100, 64)), wireFrame(tcpSuperPacket(1000)[segment.HeaderSize:]),
	}
	const off = 3
	bufs := dirtybuf.New(len(frames), off+segment.HeaderSize+20040)
	stale := dirtybuf.Leave(off, tcpSuperPacket(30000), udp4(1000, true))
	dirtybuf.Check(t, bufs, stale, func(bufs [][]byte) [][]byte {
		src, err := pipeline.NewWireSource(pipeline.WireConfig{Receiver: &frameReceiver{batches: [][][]byte{frames}}, MTU: 1500, MSS: pipeline.NewMSSTable(pipeline.MSSConfig{})})
		if err != nil {
			t.Fatal(err)
		}
		sizes := make([]int, len(bufs))
		n, err := src.Read(bufs, sizes, off)
		if n != len(frames) || err != nil {
			t.Fatalf("Read = %d, %v; want %d packets", n, err, len(frames))
		}
		out := make([][]byte, n)
		for i := range out {
			out[i] = bufs[i][off : off+sizes[i]]
		}
		return out
	})
}

// TestWireSourceClamp lowers a SYN's MSS option to the smaller MTU and
// remembers it for the flow's data.
func TestWireSourceClamp(t *testing.T) {
	syn := tcpSuperPacket(0)[segment.HeaderSize:]
	tcpHdr := header.TCP(syn[header.IPv4MinimumSize:])
	tcpHdr.SetFlags(uint8(header.TCPFlagSyn))
	syn = append(syn[:header.IPv4MinimumSize+header.TCPMinimumSize:header.IPv4MinimumSize+header.TCPMinimumSize], 2, 4, 0x23, 0x28) // MSS 9000
	ip := header.IPv4(syn)
	ip.SetTotalLength(uint16(len(syn)))
	ip.SetChecksum(0)
	ip.SetChecksum(^ip.CalculateChecksum())
	tcpHdr = header.TCP(syn[header.IPv4MinimumSize:])
	tcpHdr.SetDataOffset(header.TCPMinimumSize + 4)
	tcpHdr.SetChecksum(0)
	tcpHdr.SetChecksum(^tcpHdr.CalculateChecksum(header.PseudoHeaderChecksum(header.TCPProtocolNumber, ip.SourceAddress(), ip.DestinationAddress(), uint16(len(tcpHdr)))))
	recv := &frameReceiver{batches: [][][]byte{{wireFrame(syn)}}}
	src, err := pipeline.NewWireSource(pipeline.WireConfig{Receiver: recv, MTU: 1500, IngressMTU: 9000, Clamp: true})
	if err != nil {
		t.Fatal(err)
	}
	bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
	if n, err := src.Read(bufs, sizes, 0); n != 1 || err != nil {
		t.Fatalf("Read = %d, %v", n, err)
	}
	opt := bufs[0][segment.HeaderSize+header.IPv4MinimumSize+header.TCPMinimumSize:]
	if mss := int(opt[2])<<8 | int(opt[3]); mss != 1460 || src.Stats().Clamped != 1 {
		t.Errorf("MSS option %d after clamping, want 1460 (clamped %d)", mss, src.Stats().Clamped)
	}
	if _, err := pipeline.NewWireSource(pipeline.WireConfig{Receiver: recv, MTU: 20}); !errors.Is(err, frame.ErrInvalidConfig) {
		t.Errorf("MTU 20: %v, want ErrInvalidConfig", err)
	}
}

// loopReceiver hands out the same frames on every Receive.
type loopReceiver struct{ frames [][]byte }

func (r *loopReceiver) Headroom() int { return 14 }

func (r *loopReceiver) Receive(frames [][]byte) (int, error) {
	return copy(frames, r.frames), nil
}

// TestWireSourceAllocs: reading a batch (a TCP super-packet to cut, a
// SYN to clamp and remember, a small datagram) allocates nothing.
func TestWireSourceAllocs(t *testing.T) {
	recv := &loopReceiver{frames: [][]byte{wireFrame(tcpSuperPacket(20000)[segment.HeaderSize:]), wireFrame(udp4(10, false))}}
	src, err := pipeline.NewWireSource(pipeline.WireConfig{Receiver: recv, MTU: 1500, MSS: pipeline.NewMSSTable(pipeline.MSSConfig{}), Clamp: true})
	if err != nil {
		t.Fatal(err)
	}
	bufs, sizes := [][]byte{make([]byte, 70000), make([]byte, 70000)}, make([]int, 2)
	src.Read(bufs, sizes, 0)
	if a := testing.AllocsPerRun(100, func() { src.Read(bufs, sizes, 0) }); a != 0 {
		t.Errorf("%v allocations per Read, want 0", a)
	}
}

// udp6 returns an IPv6 UDP datagram with payload bytes and the given hop
// limit.
func udp6(payload int, hops uint8) []byte {
	pkt := make([]byte, header.IPv6MinimumSize+header.UDPMinimumSize+payload)
	src, dst := tcpip.AddrFrom16([16]byte{0x20, 0x01, 0, 2, 0, 1, 15: 1}), tcpip.AddrFrom16([16]byte{0x20, 0x01, 0, 2, 0, 0x19, 15: 2})
	ip := header.IPv6(pkt)
	ip.Encode(&header.IPv6Fields{PayloadLength: uint16(len(pkt) - header.IPv6MinimumSize), TransportProtocol: header.UDPProtocolNumber, HopLimit: hops, SrcAddr: src, DstAddr: dst})
	u := header.UDP(ip.Payload())
	u.Encode(&header.UDPFields{SrcPort: 4000, DstPort: 9, Length: uint16(len(u))})
	pseudo := header.PseudoHeaderChecksum(header.UDPProtocolNumber, src, dst, uint16(len(u)))
	u.SetChecksum(^u.CalculateChecksum(checksum.Checksum(u.Payload(), pseudo)))
	return pkt
}

// withTTL returns an IPv4 packet with its TTL and, for a valid header
// checksum, its checksum field set.
func withTTL(pkt []byte, ttl uint8, csum uint16) []byte {
	ip := header.IPv4(pkt)
	ip.SetTTL(ttl)
	ip.SetChecksum(csum)
	return pkt
}

// TestWireSourceTTL: a packet forwarded from a wire leaves with its TTL
// (hop limit) one lower and a valid IPv4 header checksum, whatever the
// checksum was (the end-around carry, and 0xffff, included), also when
// it is cut; one that arrives with a TTL of 1 or 0 is dropped, counted
// and answered with time exceeded, quoting it as it arrived.
func TestWireSourceTTL(t *testing.T) {
	// Checksums that make the incremental update carry or wrap: the
	// TTL's value steers the checksum, the IP ID compensates.
	var pkts [][]byte
	for _, ttl := range []uint8{2, 64, 255} {
		p := udp4(100, true)
		withTTL(p, ttl, 0)
		header.IPv4(p).SetChecksum(^header.IPv4(p).CalculateChecksum())
		pkts = append(pkts, p)
	}
	for _, want := range []uint16{0x0000, 0xfeff, 0xff00, 0xfffe} {
		// Find an ID for which the valid checksum is want.
		p := udp4(100, true)
		ip := header.IPv4(p)
		for id := range 1 << 16 {
			ip.SetID(uint16(id))
			ip.SetChecksum(0)
			if c := ^ip.CalculateChecksum(); c == want {
				ip.SetChecksum(c)
				break
			}
		}
		if ip.Checksum() != want || !ip.IsChecksumValid() {
			t.Fatalf("no ID gives checksum %#04x", want)
		}
		pkts = append(pkts, p)
	}
	cut := udp4(3000, false)
	pkts = append(pkts, cut, udp6(100, 2), udp6(100, 255))
	expired := [][]byte{withTTL(udp4(100, true), 1, 0), withTTL(udp4(100, true), 0, 0), udp6(100, 1), udp6(100, 0)}
	for _, p := range expired[:2] {
		header.IPv4(p).SetChecksum(^header.IPv4(p).CalculateChecksum())
	}
	var frames [][]byte
	for _, p := range append(append([][]byte{}, pkts...), expired...) {
		frames = append(frames, wireFrame(p))
	}
	reply := &tooBigs{}
	src, err := pipeline.NewWireSource(pipeline.WireConfig{Receiver: &frameReceiver{batches: [][][]byte{frames}}, MTU: 1500, Replier: reply})
	if err != nil {
		t.Fatal(err)
	}
	bufs, sizes := make([][]byte, len(frames)), make([]int, len(frames))
	for i := range bufs {
		bufs[i] = make([]byte, 4096)
	}
	n, err := src.Read(bufs, sizes, 0)
	if n != len(pkts) || err != nil {
		t.Fatalf("Read = %d, %v; want %d packets", n, err, len(pkts))
	}
	for i, p := range pkts {
		got := bufs[i][segment.HeaderSize:sizes[i]]
		if p[0]>>4 == 6 {
			if got[7] != p[7]-1 {
				t.Errorf("packet %d: hop limit %d, arrived with %d", i, got[7], p[7])
			}
			continue
		}
		ip := header.IPv4(got)
		if ip.TTL() != p[8]-1 || !ip.IsChecksumValid() {
			t.Errorf("packet %d: TTL %d (arrived with %d), checksum %#04x (was %#04x) valid %v", i, ip.TTL(), p[8], ip.Checksum(), header.IPv4(p).Checksum(), ip.IsChecksumValid())
		}
	}
	if st := src.Stats(); st.TTLExceeded != 4 || st.Packets != uint64(len(frames)) || st.Cut != 1 {
		t.Errorf("stats %+v: want 4 TTL exceeded, 1 cut", st)
	}
	if fmt.Sprint(reply.ttls) != "[1 0 1 0]" {
		t.Errorf("time exceeded answered packets with TTLs %v, want [1 0 1 0]", reply.ttls)
	}
	// The cut datagram's fragments, from the forwarder, carry the lower
	// TTL and valid checksums.
	sink := newMemSink(64, 2048)
	f, _, _ := newTestForwarder(t, &sliceSource{pkts: [][]byte{bufs[len(pkts)-3][:sizes[len(pkts)-3]]}}, sink)
	f.Run(context.Background())
	frags := 0
	for _, fr := range sink.frames { // those never used are zero
		if ip := header.IPv4(fr[sink.Headroom():]); ip[0]>>4 == 4 {
			frags++
			if ip.TTL() != 63 || !ip.IsChecksumValid() {
				t.Errorf("fragment at %d: TTL %d, checksum valid %v", ip.FragmentOffset(), ip.TTL(), ip.IsChecksumValid())
			}
		}
	}
	if frags != 3 {
		t.Errorf("%d fragments of a 3028-byte datagram, want 3", frags)
	}
}

// TestWireSourceTTLAllocs: dropping and answering a packet whose TTL ran
// out allocates nothing.
func TestWireSourceTTLAllocs(t *testing.T) {
	p := withTTL(udp4(10, true), 1, 0)
	header.IPv4(p).SetChecksum(^header.IPv4(p).CalculateChecksum())
	recv := &loopReceiver{frames: [][]byte{wireFrame(p), wireFrame(udp6(10, 1)), wireFrame(udp4(10, false))}}
	src, err := pipeline.NewWireSource(pipeline.WireConfig{Receiver: recv, MTU: 1500, Replier: icmp.NewReplier(discardWriter{}, 0,
		netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("2001:2:0:1::2"))})
	if err != nil {
		t.Fatal(err)
	}
	bufs, sizes := [][]byte{make([]byte, 2048), make([]byte, 2048), make([]byte, 2048)}, make([]int, 3)
	src.Read(bufs, sizes, 0)
	if a := testing.AllocsPerRun(100, func() { src.Read(bufs, sizes, 0) }); a != 0 {
		t.Errorf("%v allocations per Read, want 0", a)
	}
}

// discardWriter takes every packet.
type discardWriter struct{}

func (discardWriter) Write(bufs [][]byte, offset int) (int, error) { return len(bufs), nil }

// TestWireSourceKernelHeaders: from a HeaderReceiver (AF_PACKET), a TCP
// super-packet is cut at the gso_size its kernel gave it where that is
// below the egress MTU's room, and a USO super-packet into its datagrams,
// not into IP fragments of one datagram; the same USO packet from a plain
// Receiver is one datagram too big to pass with DF.
func TestWireSourceKernelHeaders(t *testing.T) {
	tcp := tcpSuperPacket(12000)[segment.HeaderSize:]
	uso := udp4(10*1400, true)
	u := header.UDP(uso[header.IPv4MinimumSize:])
	ip := header.IPv4(uso)
	u.SetChecksum(header.PseudoHeaderChecksum(header.UDPProtocolNumber, ip.SourceAddress(), ip.DestinationAddress(), uint16(len(u)))) // partial, as USO leaves it
	frames := [][]byte{wireFrame(tcp), wireFrame(uso)}
	kernel := []segment.Header{{GSOType: segment.GSOTCPv4, GSOSize: 1200}, {GSOType: segment.GSOUDPL4, GSOSize: 1400}}
	for _, c := range []struct {
		name string
		recv frame.Receiver
		want []int // lengths of the packets sent
	}{
		{"header", &headerReceiver{frameReceiver{batches: [][][]byte{frames}}, kernel}, append(repeat(10, 40+1200), repeat(10, 28+1400)...)},
		{"plain", &frameReceiver{batches: [][][]byte{frames}}, append(repeat(8, 40+1460), 40+12000-8*1460)},
	} {
		t.Run(c.name, func(t *testing.T) {
			src, err := pipeline.NewWireSource(pipeline.WireConfig{Receiver: c.recv, MTU: 1500})
			if err != nil {
				t.Fatal(err)
			}
			sink := forwardAll(t, src)
			if fmt.Sprint(sink.sent) != fmt.Sprint(c.want) {
				t.Errorf("sent packets of %v bytes, want %v", sink.sent, c.want)
			}
		})
	}
}

// forwardAll runs a forwarder from src into a memory sink until the
// source's receiver runs out (net.ErrClosed) and returns the sink.
func forwardAll(t *testing.T, src frame.Source) *memSink {
	t.Helper()
	sink := newMemSink(256, 2048)
	f, err := pipeline.NewForwarder(pipeline.ForwarderConfig{Source: src, HeaderSize: segment.HeaderSize, Sink: sink, FrameSize: 2048, Queue: newQueue(t), MTU: 1500})
	if err != nil {
		t.Fatal(err)
	}
	if err := runWithin(t, f); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Run = %v, want the receiver's net.ErrClosed", err)
	}
	return sink
}

// repeat returns n copies of v.
func repeat(n, v int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = v
	}
	return s
}

// TestWireSourceBigTCP: a BIG TCP super-packet, which no egress takes
// whole, is dropped and counted as such, the first one reported through
// OnBigTCP; the packets around it go on.
func TestWireSourceBigTCP(t *testing.T) {
	big, kh := bigTCPFrame(100000)
	small := udp4(10, false)
	frames := [][]byte{wireFrame(small), big, wireFrame(small)}
	recv := &headerReceiver{frameReceiver{batches: [][][]byte{frames, {big}}}, []segment.Header{{}, kh, {}}}
	calls := 0
	src, err := pipeline.NewWireSource(pipeline.WireConfig{Receiver: recv, MTU: 1500, OnBigTCP: func() { calls++ }})
	if err != nil {
		t.Fatal(err)
	}
	sink := forwardAll(t, src)
	if ws := src.Stats(); ws != (pipeline.WireStats{Packets: 4, BigTCP: 2}) || calls != 1 {
		t.Errorf("wire stats %+v, OnBigTCP called %d times; want 4 packets, 2 BIG TCP, one call", ws, calls)
	}
	if fmt.Sprint(sink.sent) != fmt.Sprint([]int{len(small), len(small)}) {
		t.Errorf("sent packets of %v bytes, want the two datagrams", sink.sent)
	}
}
