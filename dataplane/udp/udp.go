package udp

import "errors"

// Defaults and limits of a Sink.
const (
	DefaultSinkFrames    = 1024 // SinkConfig.Frames when 0
	DefaultSinkFrameSize = 2048 // SinkConfig.FrameSize when 0

	// udpGSOMaxSegments is the most datagrams one UDP_SEGMENT message
	// carries: the kernel's UDP_MAX_SEGMENTS before Linux 6.10 (128 since),
	// so that one message is accepted by every kernel with UDP_SEGMENT.
	udpGSOMaxSegments = 64
	// udpMaxPayload is the most UDP payload one message carries: 65535
	// less the IPv4 and UDP headers (IPv6 could carry 20 bytes more).
	udpMaxPayload = 65535 - 20 - 8
	// udpSinkChunk is the most frames (and so messages) one sendmmsg call
	// carries; Transmit takes longer batches in several calls.
	udpSinkChunk     = 256
	maxUDPSinkFrames = 1 << 20
)

// ErrForeignFrame is wrapped by Transmit's error for a frame that did not
// come from the sink's Alloc or whose Len does not fit its buffer.
var ErrForeignFrame = errors.New("frame not allocated from this sink")

// SinkConfig configures a Sink.
type SinkConfig struct {
	// Frames is the number of frames in the pool, allocated once; 0 means
	// DefaultSinkFrames. A Forwarder needs at least as many as one
	// super-packet has segments (segment.DefaultMaxSegments unless its
	// Segmenter says otherwise), and more to keep the socket busy while
	// it cuts the next one: size it from the budget's limit.
	Frames int
	// FrameSize is the size of each frame, Headroom included; 0 means
	// DefaultSinkFrameSize. Give the same value to the Forwarder.
	FrameSize int
	// Headroom is the room before each packet for an encapsulation
	// header, such as a VPN's 16-byte data header; 0 sends bare packets.
	// Each datagram's payload is the headroom followed by the packet.
	Headroom int
	// Encap, if set, fills in the encapsulation header: hdr is the frame's
	// Headroom bytes and pkt the IP packet behind them. It runs once per
	// frame, in transmit order, on the goroutine that calls Transmit (the
	// forwarder's sink loop), just before the frame is first handed to
	// the kernel. It may rewrite hdr and pkt in place (a counter, a MAC,
	// in-place encryption) but not change their lengths, and must not
	// keep them. Without Encap the headroom is sent as it is (zeros
	// unless the embedder writes it elsewhere).
	Encap func(hdr, pkt []byte)
}

// SinkStats is a snapshot of a Sink's counters. Every frame that
// Transmit takes is either sent (Datagrams) or dropped (Dropped), and
// Complete reports both.
type SinkStats struct {
	Datagrams   uint64 // UDP datagrams the kernel accepted, one per frame
	Messages    uint64 // messages (sendmmsg entries) sent: one datagram, or one UDP_SEGMENT message of several
	GSOMessages uint64 // messages sent with UDP_SEGMENT, each of two datagrams or more
	Bytes       uint64 // UDP payload bytes sent, headroom included
	Syscalls    uint64 // sendmmsg calls
	Dropped     uint64 // frames taken but not sent, because of the errors below

	// Errors by kind, counted per failed message (one sendmmsg error).
	Refused     uint64 // ECONNREFUSED: the peer's port was unreachable (an earlier ICMP error); the message is dropped
	Unreachable uint64 // EHOSTUNREACH, ENETUNREACH, EHOSTDOWN, ENETDOWN: the message is dropped
	MsgSize     uint64 // EMSGSIZE: a UDP_SEGMENT message is sent again as single datagrams; a single datagram is dropped
	NoBufs      uint64 // ENOBUFS: Transmit stopped and the rest is offered again
	GSORefused  uint64 // EIO or EINVAL on a UDP_SEGMENT message: GSO is turned off, the frames sent one by one
	Other       uint64 // any other non-fatal error: the message is dropped

	GSO bool // whether UDP_SEGMENT is (still) used
}

// Defaults and limits of a Receiver.
const (
	DefaultReceiverMessages = 32 // ReceiverConfig.Messages when 0
	maxReceiverMessages     = 1024
	// rxBufSize holds the largest message UDP_GRO makes: 64 KiB of
	// datagrams.
	rxBufSize = 1 << 16
	// udpGROMaxSegments is the most datagrams one UDP_GRO message holds
	// (UDP_GRO_CNT_MAX).
	udpGROMaxSegments = 64
)

// ReceiverConfig configures a Receiver.
type ReceiverConfig struct {
	// Headroom is the encapsulation header in front of each inner packet,
	// such as a VPN's 16-byte data header: at least as long as a
	// virtio-net header, which the return path writes there once the
	// datagram has been decapsulated.
	Headroom int
	// Decap, if set, checks and decodes one datagram in place: hdr is its
	// Headroom bytes and pkt the inner packet (decryption, a counter, a
	// MAC). It returns false to drop the datagram. It runs on the
	// goroutine that calls Receive (the return path's) and must not keep
	// hdr or pkt.
	Decap func(hdr, pkt []byte) bool
	// Messages is the most messages one recvmmsg call takes, each with a
	// 64 KiB buffer allocated once; 0 means DefaultReceiverMessages.
	Messages int
}

// ReceiverStats is a snapshot of a Receiver's counters.
type ReceiverStats struct {
	Datagrams   uint64 // datagrams handed out (each one inner packet)
	Messages    uint64 // messages received: a datagram, or several coalesced by UDP_GRO
	GROMessages uint64 // messages of two datagrams or more
	Syscalls    uint64 // recvmmsg calls that received something
	Short       uint64 // datagrams shorter than Headroom, dropped
	Refused     uint64 // datagrams Decap refused, dropped
	Truncated   uint64 // messages larger than their buffer, dropped
	PeerErrors  uint64 // errors an ICMP message left on the socket (ECONNREFUSED, EHOSTUNREACH, ...), counted and passed over
	GRO         bool   // whether the kernel coalesces with UDP_GRO
}
