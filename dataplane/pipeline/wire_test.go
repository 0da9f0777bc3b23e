package pipeline_test

import (
	"errors"
	"net"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/dataplane/pipeline"
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
	if _, err := pipeline.NewWireSource(pipeline.WireConfig{Receiver: recv, MTU: 20}); !errors.Is(err, pipeline.ErrInvalidConfig) {
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
