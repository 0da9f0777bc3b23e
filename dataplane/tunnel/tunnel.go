package tunnel

import (
	"log/slog"
	"net"
	"net/netip"

	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/dataplane/tun"
	"github.com/gsoplane/gsoplane/dataplane/udp"
)

// DefaultHeadroom is Config.Headroom when 0: a WireGuard-sized data
// header. The receive side needs at least MinHeadroom.
const DefaultHeadroom = 16

// MinHeadroom is the smallest Config.Headroom: the return path writes a
// virtio-net header there once a datagram is opened.
const MinHeadroom = 12

// Outer header sizes, for InnerMTU.
const (
	ipv4HeaderLen = 20
	ipv6HeaderLen = 40
	udpHeaderLen  = 8
)

// Config configures a Tunnel. The zero value of every field but the
// peer's address (Peer or Conn) or the peers (Peers) is a fast default.
type Config struct {
	// Device is an open TUN device (with offloads, tun.Config.Offload)
	// whose queues the tunnel uses; the caller keeps it and closes it
	// after the tunnel. Nil: Open opens one named Name with Queues
	// queues and closes it on Close.
	Device *tun.Device
	Name   string
	Queues int
	// Conn is a UDP socket connected to the peer (net.DialUDP), or with
	// Peers a bound one that is not connected (net.ListenUDP); the
	// caller keeps it and closes it after the tunnel. Nil: Open dials
	// Peer from Local (the zero Local: any address, a port the kernel
	// picks), or with Peers binds Local (the zero Local, or an
	// unspecified address: all addresses of the peers' families), and
	// closes that socket on Close.
	Conn        *net.UDPConn
	Local, Peer netip.AddrPort
	// Peers makes a tunnel with several peers instead of one (Peer or a
	// connected Conn: one or the other, not both): their endpoints and
	// the inner prefixes routed to each (see udp.Peers). Seal and Open
	// learn each datagram's peer.
	Peers []udp.Peer
	// MTU is the inner MTU, set on the TUN device; 0 derives it from the
	// path MTU to the peer (InnerMTU), as WireGuard's 1420 is derived
	// from 1500; with Peers, the smallest over the peers' paths.
	MTU int
	// Headroom and Tailroom are the room the VPN's framing needs around
	// each inner packet in a datagram: a header (Headroom, 0 means
	// DefaultHeadroom, at least MinHeadroom) and a trailer such as an
	// AEAD tag (Tailroom).
	Headroom, Tailroom int
	// Seal and Open are the VPN's framing and crypto, run on batches in
	// place (udp.SealFunc, udp.OpenFunc), with each datagram's peer (an
	// index into Peers; 0 for the one peer) to pick its keys by: Seal
	// from each queue's forwarder, concurrently, Open from the one return
	// path, in the order the socket took the datagrams. Nil sends the
	// headroom and tailroom as zeroes and accepts every datagram: a
	// plaintext tunnel. Seal may change a datagram's length within its
	// frame (padding), Open mark one Control.
	Seal udp.SealFunc
	Open udp.OpenFunc
	// OnControl takes the datagrams that are not the data path's: those
	// Open marks udp.Control (a handshake, a cookie reply, a keepalive)
	// and, with Roam, those from an unknown sender Open names no peer
	// for, with their source and peer (-1: unknown), a view valid during
	// the call, on the return path's goroutine (see
	// udp.ReceiverConfig.OnControl). Send sends the replies.
	OnControl func(from netip.AddrPort, peer int, b []byte)
	// Roam, with Peers, hands Open the datagrams from no peer's endpoint
	// (peer -1) and moves a peer's endpoint to where the datagrams Open
	// names it for come from (see udp.ReceiverConfig.Roam).
	Roam bool
	// SocketBuffer is the size asked for the socket's send and receive
	// buffers (SO_SNDBUFFORCE, SO_RCVBUFFORCE; without CAP_NET_ADMIN,
	// SO_SNDBUF and SO_RCVBUF, which net.core.wmem_max and rmem_max
	// cap); 0 sizes them for the batches (socketBuffer).
	SocketBuffer int
	// Inside are the prefixes behind the TUN device: a packet from the
	// peer whose source lies in one of them is dropped
	// (frame.DropSpoofed).
	Inside []netip.Prefix
	// Logger takes the warnings (a buffer smaller than asked for,
	// UDP_SEGMENT or UDP_GRO refused), each once; nil: slog.Default().
	Logger *slog.Logger
}

// InnerMTU is the largest inner packet that fits, with the
// encapsulation's overhead (outer IPv4 or IPv6 header, UDP header,
// headroom and tailroom), in one datagram on a path of pathMTU bytes:
// 1500 − 20 − 8 − 16 − 16 = 1440 for WireGuard's framing over IPv4,
// 1420 over IPv6.
func InnerMTU(pathMTU int, v6 bool, headroom, tailroom int) int {
	outer := ipv4HeaderLen
	if v6 {
		outer = ipv6HeaderLen
	}
	return pathMTU - outer - udpHeaderLen - headroom - tailroom
}

// Stats is a snapshot of a Tunnel's counters, summed over its queues.
type Stats struct {
	Forward pipeline.Stats       // TUN → datagrams: super-packets, segments, drops by reason
	Send    udp.SinkStats        // datagrams sent, per sendmmsg and UDP_SEGMENT message, send errors
	Receive udp.ReceiverStats    // datagrams received, per recvmmsg and UDP_GRO message, Open's drops by verdict
	Return  pipeline.ReturnStats // datagrams → TUN: packets, writes, GRO, drops by reason
	// Fallbacks counts the times the kernel refused UDP_SEGMENT or
	// UDP_GRO, the first time for each reason per queue (a peer's
	// UDP_SEGMENT refusals are tried again a second later: PeerStats):
	// each costs a system call per datagram.
	Fallbacks uint64
	// ControlSent counts the datagrams Send sent, ControlErrors those
	// it could not (Receive.Control counts the ones OnControl took).
	ControlSent, ControlErrors uint64
}

// DatagramsPerSend is the mean number of datagrams per sendmmsg call.
func (s Stats) DatagramsPerSend() float64 { return ratio(s.Send.Datagrams, s.Send.Syscalls) }

// DatagramsPerReceive is the mean number of datagrams per recvmmsg call.
func (s Stats) DatagramsPerReceive() float64 { return ratio(s.Receive.Datagrams, s.Receive.Syscalls) }

func ratio(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
