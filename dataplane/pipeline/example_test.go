package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/segment"
	"github.com/gsoplane/gsoplane/txqueue"
)

// A VPN embeds the pipeline with its own Source (here a slice of
// super-packets instead of a TUN device) and its own Sink (here frames
// in memory instead of udp.Sink's tunnel socket). The forwarder validates
// and cuts each super-packet, charges every segment to the send budget
// until the sink reports it gone, and stops when the source fails.
func Example() {
	const frameSize = 2048
	src := &sliceSource{pkts: [][]byte{tcpSuperPacket(10 << 10)}}
	sink := newMemSink(256, frameSize)
	size := txqueue.Truesize(frameSize)
	budget, err := txqueue.NewBudget(txqueue.BudgetConfig{Burst: 64 * size, Limit: 512 * size})
	if err != nil {
		panic(err)
	}
	queue, err := txqueue.NewQueue[frame.Frame](txqueue.QueueConfig{
		Policy: txqueue.Block, Packets: 256, Bytes: 256 * size,
	})
	if err != nil {
		panic(err)
	}
	fwd, err := pipeline.NewForwarder(pipeline.ForwarderConfig{
		Source: src, HeaderSize: segment.HeaderSize,
		Sink: sink, FrameSize: frameSize,
		Budget: budget, Queue: queue,
	})
	if err != nil {
		panic(err)
	}

	// Run returns once the source fails and what it queued is sent. (A
	// Source that blocks, like a TUN queue, must be closed to stop it.)
	err = fwd.Run(context.Background())
	fmt.Println("source closed:", errors.Is(err, pipeline.ErrSourceClosed), errors.Is(err, io.EOF))

	st := fwd.Stats()
	fmt.Println("super-packets:", st.SuperPackets, "segments:", st.Segments, "dropped:", st.Drops.Total())
	fmt.Println("lengths:", sink.sent)
	fmt.Println("still charged:", budget.Stats().InFlight)
	// Output:
	// source closed: true true
	// super-packets: 1 segments: 8 dropped: 0
	// lengths: [1488 1488 1488 1488 1488 1488 1488 144]
	// still charged: 0
}

// tcpSuperPacket returns a TCP/IPv4 super-packet with payload bytes
// behind its virtio-net header, as a TUN device with TSO hands it over:
// gso_size 1448 and a partial checksum (the pseudo-header sum) for the
// segmenter to complete.
func tcpSuperPacket(payload int) []byte {
	const hdrs = header.IPv4MinimumSize + header.TCPMinimumSize
	b := make([]byte, segment.HeaderSize+hdrs+payload)
	vnet := segment.Header{
		Flags: segment.FlagNeedsCsum, GSOType: segment.GSOTCPv4,
		HdrLen: hdrs, GSOSize: 1448,
		CsumStart: header.IPv4MinimumSize, CsumOffset: header.TCPChecksumOffset,
	}
	if err := vnet.Encode(b, segment.HeaderSize); err != nil {
		panic(err)
	}
	pkt := b[segment.HeaderSize:]
	src, dst := tcpip.AddrFrom4([4]byte{198, 18, 0, 1}), tcpip.AddrFrom4([4]byte{198, 19, 0, 2})
	ip := header.IPv4(pkt)
	ip.Encode(&header.IPv4Fields{
		TotalLength: uint16(len(pkt)), TTL: 64, Protocol: uint8(header.TCPProtocolNumber),
		SrcAddr: src, DstAddr: dst,
	})
	ip.SetChecksum(^ip.CalculateChecksum())
	tcp := header.TCP(pkt[header.IPv4MinimumSize:])
	tcp.Encode(&header.TCPFields{
		SrcPort: 40000, DstPort: 5201, SeqNum: 1, AckNum: 1,
		DataOffset: header.TCPMinimumSize, Flags: header.TCPFlagAck | header.TCPFlagPsh, WindowSize: 512,
	})
	tcp.SetChecksum(header.PseudoHeaderChecksum(header.TCPProtocolNumber, src, dst, uint16(len(tcp))))
	for i := range tcp.Payload() {
		tcp.Payload()[i] = byte(i)
	}
	return b
}

// sliceSource is a Source that yields its packets, one per Read, and then
// io.EOF.
type sliceSource struct{ pkts [][]byte }

func (s *sliceSource) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if len(s.pkts) == 0 {
		return 0, io.EOF
	}
	sizes[0] = copy(bufs[0][offset:], s.pkts[0])
	s.pkts = s.pkts[1:]
	return 1, nil
}

// memSink is a Sink whose frames live in memory: Transmit records each
// segment's length and Complete reports at once what was transmitted.
// The forwarder calls Alloc and Free from another goroutine than the
// rest, hence the mutex.
type memSink struct {
	mu     sync.Mutex
	frames [][]byte // by ID
	free   []uint64
	done   []uint64 // transmitted since the last Complete
	sent   []int    // lengths of the transmitted segments, if record
	record bool
}

func newMemSink(n, size int) *memSink {
	s := &memSink{record: true}
	for i := range n {
		s.frames = append(s.frames, make([]byte, size))
		s.free = append(s.free, uint64(i))
	}
	return s
}

func (s *memSink) Headroom() int { return 0 }

func (s *memSink) Alloc(frames []frame.Frame) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := min(len(frames), len(s.free))
	for i, id := range s.free[len(s.free)-n:] {
		frames[i] = frame.Frame{Buf: s.frames[id], ID: id}
	}
	s.free = s.free[:len(s.free)-n]
	return n
}

func (s *memSink) Free(frames []frame.Frame) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range frames {
		s.free = append(s.free, f.ID)
	}
}

func (s *memSink) Transmit(frames []frame.Frame) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range frames {
		// A real sink sends s.frames[f.ID][:f.Len] here.
		if s.record {
			s.sent = append(s.sent, f.Len)
		}
		s.done = append(s.done, f.ID)
	}
	return len(frames), nil
}

func (s *memSink) Complete() (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.done)
	s.free = append(s.free, s.done...)
	s.done = s.done[:0]
	return n, nil
}

func (s *memSink) Wait(time.Duration) error { return nil }
