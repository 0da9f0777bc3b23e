package udp

import (
	"errors"
	"net/netip"
)

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
	// DefaultSinkFrames. A Forwarder needs at least as many as it cuts
	// a super-packet into at a time (frame.BurstSegments), and more
	// to keep the socket busy while it cuts the next: size it from the
	// budget's limit.
	Frames int
	// FrameSize is the size of each frame, Headroom and Tailroom
	// included; 0 means DefaultSinkFrameSize. Give the same value to the
	// Forwarder.
	FrameSize int
	// Headroom is the room before each packet for an encapsulation
	// header, such as a VPN's 16-byte data header; 0 sends bare packets.
	Headroom int
	// Tailroom is the room after each packet for a trailer, such as an
	// AEAD's 16-byte tag: the frames a Forwarder cuts into end Tailroom
	// bytes before FrameSize. Each datagram's payload is the headroom,
	// the packet and the tailroom.
	Tailroom int
	// Seal, if set, frames and seals datagrams in place (see SealFunc).
	// The sink zeroes the headroom and tailroom first: without Seal they
	// are sent as zeroes.
	Seal SealFunc
	// Peers, if set, makes the sink send to several peers on an
	// unconnected (bound) socket: each frame goes to the peer its inner
	// destination routes to (Peers.Route), and a frame whose destination
	// routes to none is dropped (SinkStats.NoPeer). Every endpoint must
	// be of the socket's family, except that an IPv6 socket bound to the
	// unspecified address without IPV6_V6ONLY (net.ListenUDP("udp") on
	// all addresses) also sends to IPv4 ones. Without Peers the socket
	// must be connected to the one peer.
	Peers *Peers
	// OnFallback, if set, is called the first time the kernel refuses a
	// UDP_SEGMENT message for a reason (once per Fallback), on the
	// goroutine that calls Transmit. SinkStats counts every occurrence,
	// and PeerStats each peer's.
	OnFallback func(f Fallback, err error)
}

// A SealFunc seals a batch of datagrams in place. dgrams[i] is a whole
// datagram: Headroom bytes of header room, the inner IP packet, Tailroom
// bytes of trailer room, the rooms zeroed; it may rewrite all of it (a
// header with a counter, the packet encrypted, a tag), and must not keep
// it. Its capacity reaches the end of its frame (FrameSize): the hook may
// set dgrams[i] to another length within it, reslicing it in place
// (WireGuard's padding), and the sink sends the datagram at that length,
// coalescing runs of equal sealed lengths with UDP_SEGMENT; setting it
// empty drops it (SinkStats.Unsealed: no key for the peer yet, say), as
// does pointing it elsewhere than its frame. peers[i] is the peer dgrams[i] goes to, an index into
// SinkConfig.Peers (always 0 on a connected socket), so that the hook
// picks the peer's keys and counter. The sink calls it once per batch, in
// transmit order, on the goroutine that calls Transmit (the forwarder's
// sink loop), just before the datagrams are first handed to the kernel;
// every datagram is sealed once, even one offered again after ENOBUFS.
type SealFunc func(dgrams [][]byte, peers []int)

// An OpenFunc opens a batch of received datagrams in place. dgrams[i] is
// a whole datagram as its peer's SealFunc left it; the inner IP packet
// is to be left at dgrams[i][Headroom:len(dgrams[i])-Tailroom] (an IP
// packet shorter than that room is trimmed to its IP length). peers[i]
// is the peer dgrams[i] came from, an index into ReceiverConfig.Peers
// (always 0 without), so that the hook picks the peer's keys and replay
// window; -1 for a datagram from no peer's endpoint, with
// ReceiverConfig.Roam: the hook may then name its peer by setting
// peers[i] (WireGuard does by the receiver index), and so it may for any
// datagram. It sets verdicts[i], which come in as Accept, to say why a
// datagram is dropped, or that it is the tunnel's own (Control); it
// must not keep dgrams. The receiver calls it
// once per recvmmsg batch, on the goroutine that calls Receive, with only
// the datagrams long enough to hold the headroom and the tailroom.
type OpenFunc func(dgrams [][]byte, peers []int, verdicts []Verdict)

// A Verdict is what an OpenFunc says of a datagram: Accept, or why it is
// dropped. ReceiverStats counts the drops by verdict.
type Verdict uint8

// The verdicts.
const (
	Accept        Verdict = iota // an inner packet, handed on
	DropAuth                     // the authentication (AEAD tag, MAC) failed
	DropReplay                   // a counter seen before or below the replay window
	DropMalformed                // not a data message of the tunnel
	Control                      // a message of the tunnel's own (a handshake, a cookie, a keepalive): handed to ReceiverConfig.OnControl
	numVerdicts
)

// A Fallback is why a Sink sends a peer's datagrams of some size one per
// message for a while (see Sink).
type Fallback int

// The fall-backs.
const (
	// FallbackGSORefused: the kernel refused UDP_SEGMENT (EIO or EINVAL:
	// a socket with SO_NO_CHECK, an IPsec route, or a segment larger than
	// the route's MTU on older kernels).
	FallbackGSORefused Fallback = iota + 1
	// FallbackMsgSize: a UDP_SEGMENT message's datagrams were over the
	// path MTU (EMSGSIZE): the kernel fragments them. The inner MTU is too
	// large for the path to that peer.
	FallbackMsgSize
)

// String names f.
func (f Fallback) String() string {
	switch f {
	case FallbackGSORefused:
		return "UDP_SEGMENT refused"
	case FallbackMsgSize:
		return "UDP_SEGMENT datagrams over the path MTU"
	}
	return "no fall-back"
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
	Dropped     uint64 // frames taken but not sent: NoPeer, Unsealed and the errors below
	NoPeer      uint64 // frames whose inner destination routes to no peer (SinkConfig.Peers), or not an IP packet

	// Errors by kind, counted per failed message (one sendmmsg error).
	Refused     uint64 // ECONNREFUSED: the peer's port was unreachable (an earlier ICMP error); the message is dropped
	Unreachable uint64 // EHOSTUNREACH, ENETUNREACH, EHOSTDOWN, ENETDOWN: the message is dropped
	MsgSize     uint64 // EMSGSIZE: a UDP_SEGMENT message is sent again as single datagrams (FallbackMsgSize); a single datagram is dropped
	NoBufs      uint64 // ENOBUFS: Transmit stopped and the rest is offered again
	GSORefused  uint64 // EIO or EINVAL on a UDP_SEGMENT message: sent again as single datagrams (FallbackGSORefused)
	Other       uint64 // any other non-fatal error: the message is dropped

	Reprobes uint64 // times UDP_SEGMENT was tried again for a peer, a second after MsgSize or GSORefused
	Unsealed uint64 // frames Seal emptied (see SealFunc), counted in Dropped

	GSO bool // whether the kernel knows UDP_SEGMENT (Linux 4.18)
}

// Defaults and limits of a Receiver.
const (
	DefaultReceiverMessages = 32 // ReceiverConfig.Messages when 0
	maxReceiverMessages     = 1024
	// rxBufSize holds the largest message UDP_GRO makes: 64 KiB of
	// datagrams.
	rxBufSize = 1 << 16
	// msgMaxSegments is the most datagrams one message holds as the
	// kernel makes them: a peer's UDP_SEGMENT message reaches the socket
	// whole with up to UDP_MAX_SEGMENTS (128 since Linux 6.10), more than
	// receive-side GRO's 64 (UDP_GRO_CNT_MAX). A Receiver sizes its
	// per-datagram state for it, and grows it if a message ever holds more.
	msgMaxSegments = 128
)

// ReceiverConfig configures a Receiver.
type ReceiverConfig struct {
	// Headroom is the encapsulation header in front of each inner packet,
	// such as a VPN's 16-byte data header: at least as long as a
	// virtio-net header, which the return path writes there once the
	// datagram has been opened.
	Headroom int
	// Tailroom is the trailer after each inner packet, such as an AEAD's
	// 16-byte tag: it is cut off the packet handed on.
	Tailroom int
	// Open, if set, opens each batch of datagrams in place (see
	// OpenFunc); without it every datagram long enough is accepted.
	Open OpenFunc
	// Messages is the most messages one recvmmsg call takes, each with a
	// 64 KiB buffer allocated once; 0 means DefaultReceiverMessages.
	Messages int
	// Peers, if set, makes the receiver take datagrams from several
	// peers on an unconnected socket, WireGuard's way: a datagram from an
	// address that is no peer's endpoint is dropped before Open
	// (ReceiverStats.UnknownPeer; unless Roam), Open learns each datagram's peer, and
	// an inner packet Open accepted whose source does not route back to
	// its peer (Peers.Allows) is dropped (ReceiverStats.NotAllowed).
	// Without Peers every datagram the socket takes is the peer's.
	Peers *Peers
	// Roam, with Peers, hands a datagram from no peer's endpoint to Open
	// with peer -1 instead of dropping it; Open may name its peer (see
	// OpenFunc). An accepted datagram whose peer Open named moves that
	// peer's endpoint to the datagram's source (Peers.SetEndpoint,
	// ReceiverStats.Roamed): WireGuard's roaming, which the hook must
	// allow only for an authenticated datagram. An accepted datagram left
	// at peer -1 goes to OnControl. Without Roam, Open's peers are
	// ignored.
	Roam bool
	// OnControl, if set, takes the datagrams Open marked Control (and
	// those of Roam above): from is the datagram's source, peer its peer
	// (-1: unknown; 0 without Peers), b the whole datagram as Open left
	// it, a view valid only during the call. It runs on the goroutine
	// that calls Receive (a return path's), between batches of the data
	// path, which waits for it: it should copy b and return (a handshake
	// is the VPN's to answer elsewhere). Without it, they are counted and
	// dropped (ReceiverStats.Control either way).
	OnControl func(from netip.AddrPort, peer int, b []byte)
}

// ReceiverStats is a snapshot of a Receiver's counters.
type ReceiverStats struct {
	Datagrams   uint64 // datagrams handed out (each one inner packet)
	Messages    uint64 // messages received: a datagram, or several coalesced by UDP_GRO
	GROMessages uint64 // messages of two datagrams or more
	Syscalls    uint64 // recvmmsg calls that received something
	Short       uint64 // datagrams shorter than Headroom and Tailroom, dropped
	Refused     uint64 // datagrams Open refused, dropped: the sum of the three below
	Auth        uint64 // of which DropAuth
	Replay      uint64 // of which DropReplay
	Malformed   uint64 // of which DropMalformed (and verdicts Open does not name)
	Truncated   uint64 // messages larger than their buffer, dropped
	UnknownPeer uint64 // datagrams from an address that is no peer's endpoint (ReceiverConfig.Peers), dropped before Open and not handed out; with Roam, those Open named a peer for that cannot move there (no such peer, another's endpoint), handed out as empty packets
	NotAllowed  uint64 // datagrams Open accepted whose inner source does not route back to their peer (or that hold no IP header), dropped
	PeerErrors  uint64 // errors an ICMP message left on the socket (ECONNREFUSED, EHOSTUNREACH, ...), counted and passed over
	Control     uint64 // datagrams handed to OnControl (Open's verdict Control, or Roam's unknown sender), not handed out
	Roamed      uint64 // times a peer's endpoint moved to a datagram's source (ReceiverConfig.Roam)
	GRO         bool   // whether the kernel coalesces with UDP_GRO
}

// Add returns the field-by-field sum of s and o (GSO: whether both use
// it), for the sinks of several queues.
func (s SinkStats) Add(o SinkStats) SinkStats {
	s.Datagrams += o.Datagrams
	s.Messages += o.Messages
	s.GSOMessages += o.GSOMessages
	s.Bytes += o.Bytes
	s.Syscalls += o.Syscalls
	s.Dropped += o.Dropped
	s.NoPeer += o.NoPeer
	s.Refused += o.Refused
	s.Unreachable += o.Unreachable
	s.MsgSize += o.MsgSize
	s.NoBufs += o.NoBufs
	s.GSORefused += o.GSORefused
	s.Other += o.Other
	s.Reprobes += o.Reprobes
	s.Unsealed += o.Unsealed
	s.GSO = s.GSO && o.GSO
	return s
}

// Add returns the field-by-field sum of s and o (GRO: whether both use
// it), for the receivers of several queues.
func (s ReceiverStats) Add(o ReceiverStats) ReceiverStats {
	s.Datagrams += o.Datagrams
	s.Messages += o.Messages
	s.GROMessages += o.GROMessages
	s.Syscalls += o.Syscalls
	s.Short += o.Short
	s.Refused += o.Refused
	s.Auth += o.Auth
	s.Replay += o.Replay
	s.Malformed += o.Malformed
	s.Truncated += o.Truncated
	s.UnknownPeer += o.UnknownPeer
	s.NotAllowed += o.NotAllowed
	s.PeerErrors += o.PeerErrors
	s.Control += o.Control
	s.Roamed += o.Roamed
	s.GRO = s.GRO && o.GRO
	return s
}
