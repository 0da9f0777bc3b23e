package afpacket

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/internal/ethernet"
	"github.com/gsoplane/gsoplane/internal/prefix"
	"github.com/gsoplane/gsoplane/segment"
)

// Sizes of what the port puts in front of every packet.
const (
	vnetHdrLen = segment.HeaderSize // struct virtio_net_hdr, both directions
	// Headroom is the virtio-net header and the Ethernet header in front
	// of every packet, both directions: a packet is at frame[Headroom:].
	Headroom = vnetHdrLen + ethernet.HeaderLen
)

// Defaults and limits of Config.
const (
	DefaultFrames      = 1024    // small TX frames per socket
	DefaultLargeFrames = 16      // TX frames for whole super-packets per socket
	DefaultRcvBuf      = 8 << 20 // socket receive buffer (the kernel doubles it)
	MinFrameSize       = 2048    // small frames are at least this large
	MaxFrames          = 1 << 16
	MaxLargeFrames     = 1 << 10
	MaxQueues          = 256 // sockets per port (PACKET_FANOUT's default group size)
	maxIfNameLen       = 15  // IFNAMSIZ less the NUL
	maxPrefixes        = 4096
	// LargeFrameSize is the size of a frame for a whole super-packet: the
	// headroom and the largest IPv6 packet without a jumbo payload.
	LargeFrameSize = Headroom + 40 + 65535
)

// Errors callers can act on (see also frame.ErrInvalidConfig).
var (
	// ErrClosed is returned by a socket's methods after Port.Close; it
	// wraps net.ErrClosed, which ends a pipeline.ReturnPath quietly.
	ErrClosed = fmt.Errorf("afpacket: %w", net.ErrClosed)
	// ErrBadFrame: the sink was given a frame that is not one of its
	// allocated frames, or a length that does not fit it.
	ErrBadFrame = errors.New("not an allocated frame or bad length")
	// ErrDetached: the ingress program is no longer attached to the
	// interface (its tcx link or its cls_bpf filter was removed from
	// outside, or the interface went away).
	ErrDetached = errors.New("ingress program detached from the interface")
	// ErrNoOffload: GSOModeOffload was asked for on a NIC that segments
	// no kind of super-packet (tx-tcp-segmentation, tx-tcp6-segmentation
	// and tx-udp-segmentation all off).
	ErrNoOffload = errors.New("the NIC segments no kind of super-packet")
)

// Config configures Open.
type Config struct {
	// Ifname is the Ethernet interface, in the calling thread's network
	// namespace.
	Ifname string
	// Queues is the number of sockets, all in one PACKET_FANOUT_HASH
	// group (a flow always reaches the same socket); 0 means the NIC's
	// RX queue count (ETHTOOL_GCHANNELS, else the link's RX queues).
	Queues int
	// Redirect are the destinations whose IPv4/IPv6 packets the sockets
	// take from the NIC and the host's stack does not see; everything
	// else (ARP, ND, traffic for the host) goes on to the kernel.
	Redirect []netip.Prefix
	// Frames is the number of small TX frames of each socket's Sink
	// (0 means DefaultFrames), FrameSize bytes each, headroom included:
	// one per segment in flight.
	Frames int
	// LargeFrames is the number of LargeFrameSize frames of each Sink
	// for whole super-packets the NIC segments itself (0 means
	// DefaultLargeFrames; -1 means none, and so no segmentation offload).
	LargeFrames int
	// FrameSize is the size of a small TX frame; 0 means the headroom
	// plus the interface's MTU, rounded up to 64 bytes, and at least
	// MinFrameSize.
	FrameSize int
	// SndBuf is each socket's send buffer (SO_SNDBUFFORCE; the kernel
	// doubles it): the truesize of the packets the socket may have in
	// the kernel at once before a send would block. 0 means Frames times
	// the truesize of a frame, which makes the socket hold the sink back
	// before the device's queue overflows.
	SndBuf int
	// RcvBuf is each socket's receive buffer (SO_RCVBUFFORCE; the
	// kernel doubles it); 0 means DefaultRcvBuf. A GRO super-packet costs
	// some 64 KiB of it.
	RcvBuf int
	// HostFilter says how the ingress program that keeps the redirected
	// packets from the host's stack is attached; the zero value,
	// HostFilterAuto, uses tcx where the kernel has it.
	HostFilter HostFilter
}

// HostFilter says how the port attaches its ingress program, the one
// that drops the redirected packets for the host's stack once the
// sockets have their copy.
type HostFilter int

// The ways to attach the ingress program.
const (
	// HostFilterAuto, the default, attaches through tcx and, on a
	// kernel without tcx (before Linux 6.6), as a cls_bpf filter on a
	// clsact qdisc (HostFilterClsact).
	HostFilterAuto HostFilter = iota
	// HostFilterTCX attaches through a tcx BPF link ahead of every other
	// tcx program (Linux 6.6 or later). The kernel detaches it when the
	// link's last file descriptor closes, so a process that dies leaves
	// nothing behind.
	HostFilterTCX
	// HostFilterClsact attaches as a direct-action cls_bpf filter on the
	// ingress hook of the interface's clsact qdisc, ahead of the filters
	// there (Linux 4.5 or later). The port adds the qdisc when the
	// interface has none and, on Close, removes its own filter and the
	// qdisc it added if no other filter is on it; it never touches
	// another qdisc or filter. A filter holds no file descriptor: a
	// process killed with SIGKILL leaves its filter (named
	// "gsoplane-afpacket") and the qdisc it added behind, until they are
	// deleted (tc filter del, tc qdisc del).
	HostFilterClsact
)

// String returns "auto", "tcx" or "clsact".
func (h HostFilter) String() string {
	switch h {
	case HostFilterAuto:
		return "auto"
	case HostFilterTCX:
		return "tcx"
	case HostFilterClsact:
		return "clsact"
	}
	return fmt.Sprintf("HostFilter(%d)", int(h))
}

// withDefaults fills in defaults that need no system call and checks cfg.
func (cfg Config) withDefaults() (Config, error) {
	bad := func(format string, a ...any) (Config, error) {
		return cfg, fmt.Errorf("afpacket: %w: %s", frame.ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	cfg.Frames = cmp.Or(cfg.Frames, DefaultFrames)
	cfg.LargeFrames = cmp.Or(cfg.LargeFrames, DefaultLargeFrames)
	cfg.RcvBuf = cmp.Or(cfg.RcvBuf, DefaultRcvBuf)
	switch {
	case cfg.Ifname == "" || len(cfg.Ifname) > maxIfNameLen:
		return bad("interface name %q", cfg.Ifname)
	case cfg.Queues < 0 || cfg.Queues > MaxQueues:
		return bad("%d queues: want 0 (one per RX queue) to %d", cfg.Queues, MaxQueues)
	case cfg.Frames < 1 || cfg.Frames > MaxFrames:
		return bad("%d frames: want 1 to %d", cfg.Frames, MaxFrames)
	case cfg.LargeFrames < -1 || cfg.LargeFrames > MaxLargeFrames:
		return bad("%d large frames: want -1 (none) to %d", cfg.LargeFrames, MaxLargeFrames)
	case cfg.FrameSize != 0 && (cfg.FrameSize < MinFrameSize || cfg.FrameSize > LargeFrameSize):
		return bad("frame size %d: want 0 (from the MTU) or %d to %d", cfg.FrameSize, MinFrameSize, LargeFrameSize)
	case cfg.SndBuf < 0 || cfg.RcvBuf < 0 || cfg.SndBuf > 1<<30 || cfg.RcvBuf > 1<<30:
		return bad("socket buffers %d/%d: want 0 (default) to 1 GiB", cfg.SndBuf, cfg.RcvBuf)
	case cfg.HostFilter < HostFilterAuto || cfg.HostFilter > HostFilterClsact:
		return bad("host filter %v: want auto, tcx or clsact", cfg.HostFilter)
	}
	if cfg.LargeFrames < 0 {
		cfg.LargeFrames = 0
	}
	prefixes, err := prefix.Normalize(cfg.Redirect, maxPrefixes)
	if err != nil {
		return bad("%v", err)
	}
	cfg.Redirect = prefixes
	return cfg, nil
}

// frameSizeFor is the small frame size for an interface MTU.
func frameSizeFor(mtu int) int {
	return max(MinFrameSize, (Headroom+mtu+63)&^63)
}

// GSOMode says which offloads a Sink uses; Sink.Offload applies it per
// super-packet to what the NIC advertises.
type GSOMode int

// The GSO modes.
const (
	// GSOModeAuto, the default, lets the NIC do as much as it can, per
	// packet: a super-packet goes whole (frame.OffloadGSO) when the
	// NIC segments its kind in hardware (tx-tcp-segmentation for TCP
	// over IPv4, tx-tcp6-segmentation over IPv6, and also
	// tx-tcp-ecn-segmentation with the ECN flag; tx-udp-segmentation for
	// USO) and it is within the device's gso_max_size and gso_max_segs;
	// otherwise it is cut here with partial checksums
	// (frame.OffloadCsum) when the NIC checksums TCP/UDP of that IP
	// version (tx-checksum-ip-generic, or tx-checksum-ipv4 /
	// tx-checksum-ipv6), and with complete checksums otherwise. A
	// whole super-packet the NIC cannot take is never sent: a packet
	// socket that bypasses the qdisc has no software GSO behind it (the
	// kernel drops the packet, see the package comment).
	GSOModeAuto GSOMode = iota
	// GSOModeOffload decides per packet as GSOModeAuto does, falling back
	// to partial or complete checksums for the kinds the NIC cannot
	// segment, but insists on segmentation offload: NewSink fails with
	// ErrNoOffload when the NIC segments no kind at all. Use it where
	// TSO is expected and its absence is a configuration error.
	GSOModeOffload
	// GSOModePartial never hands whole super-packets to the NIC: they are
	// cut here, with partial checksums the NIC completes where it
	// checksums that IP version, with complete checksums elsewhere.
	GSOModePartial
	// GSOModeFull uses no offload: every segment leaves complete, as
	// from the AF_XDP port. It works with every device.
	GSOModeFull
)

// String returns "auto", "offload", "partial" or "full".
func (m GSOMode) String() string {
	switch m {
	case GSOModeAuto:
		return "auto"
	case GSOModeOffload:
		return "offload"
	case GSOModePartial:
		return "partial"
	case GSOModeFull:
		return "full"
	}
	return fmt.Sprintf("GSOMode(%d)", int(m))
}

// Drops counts what a socket dropped, by reason.
type Drops struct {
	// Invalid: received frames that are not IPv4/IPv6, whose EtherType
	// disagrees with the IP version, or that are shorter than their
	// headers (returned with an empty packet).
	Invalid uint64
	// Truncated: received frames larger than a receive buffer (returned
	// with an empty packet).
	Truncated uint64
	// Header: received packets the kernel could not describe with a
	// virtio-net header (recvmsg EINVAL); the kernel drops them.
	Header uint64
	// Unresolved: frames to transmit whose next hop did not resolve.
	Unresolved uint64
	// NotRouted: frames to transmit to a multicast, link-local or
	// loopback address, which a router does not forward.
	NotRouted uint64
	// Refused: frames the kernel refused to transmit (EINVAL, EMSGSIZE,
	// a super-packet the NIC no longer segments).
	Refused uint64
	// Kernel: packets the kernel dropped before the socket saw them, its
	// receive buffer being full (PACKET_STATISTICS tp_drops).
	Kernel uint64
}

// Total returns the sum of all drops.
func (d Drops) Total() uint64 {
	return d.Invalid + d.Truncated + d.Header + d.Unresolved + d.NotRouted + d.Refused + d.Kernel
}

// Stats are a socket's counters.
type Stats struct {
	RX, RXBytes uint64 // frames Receive returned and their Ethernet bytes
	RXCalls     uint64 // recvmmsg calls
	RXSuper     uint64 // received frames with a GSO type: the kernel's GRO merged them
	TX, TXBytes uint64 // frames the kernel took and their Ethernet bytes
	TXCalls     uint64 // sendmmsg calls
	TXSuper     uint64 // transmitted frames with a GSO type: the NIC segments them
	TXPartial   uint64 // transmitted frames with a partial checksum
	TXBusy      uint64 // sends cut short by a full socket send buffer (EAGAIN), device queue (ENOBUFS) or a link down (ENETDOWN), retried
	Drops       Drops
	// From the kernel (PACKET_STATISTICS, accumulated: the kernel clears
	// its counters on every read).
	KernelPackets uint64 // packets the kernel had for the socket, the dropped ones included
}

// AppendCounters appends the counters but RX and TX to dst, by name
// (docs/udpfwd.md: udpfwd_packet_events_total), and returns it.
func (s Stats) AppendCounters(dst []frame.Counter) []frame.Counter {
	return append(dst,
		frame.Counter{Name: "rx_bytes", Value: s.RXBytes},
		frame.Counter{Name: "rx_calls", Value: s.RXCalls},
		frame.Counter{Name: "rx_super", Value: s.RXSuper},
		frame.Counter{Name: "tx_bytes", Value: s.TXBytes},
		frame.Counter{Name: "tx_calls", Value: s.TXCalls},
		frame.Counter{Name: "tx_super", Value: s.TXSuper},
		frame.Counter{Name: "tx_partial", Value: s.TXPartial},
		frame.Counter{Name: "tx_busy", Value: s.TXBusy},
		frame.Counter{Name: "rx_invalid", Value: s.Drops.Invalid},
		frame.Counter{Name: "rx_truncated", Value: s.Drops.Truncated},
		frame.Counter{Name: "rx_header", Value: s.Drops.Header},
		frame.Counter{Name: "rx_kernel_drop", Value: s.Drops.Kernel},
		frame.Counter{Name: "tx_unresolved", Value: s.Drops.Unresolved},
		frame.Counter{Name: "tx_not_routed", Value: s.Drops.NotRouted},
		frame.Counter{Name: "tx_refused", Value: s.Drops.Refused},
		frame.Counter{Name: "kernel_packets", Value: s.KernelPackets},
	)
}
