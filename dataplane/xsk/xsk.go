package xsk

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/internal/prefix"
)

// Mode is how the XDP program is attached to the interface.
type Mode int

// The attach modes.
const (
	// ModeAuto tries native mode and falls back to generic mode when the
	// driver refuses; Port.Mode says which one it got.
	ModeAuto Mode = iota
	// ModeNative runs the program in the driver (XDP_FLAGS_DRV_MODE).
	ModeNative
	// ModeGeneric runs the program on the kernel's skb path
	// (XDP_FLAGS_SKB_MODE): works with every driver, slower.
	ModeGeneric
)

// String returns "auto", "native" or "generic".
func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeNative:
		return "native"
	case ModeGeneric:
		return "generic"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// MultiBuffer says whether a port receives packets longer than one UMEM
// frame, as chains of frames (AF_XDP multi-buffer).
type MultiBuffer int

// The multi-buffer choices.
const (
	// MultiBufferAuto turns multi-buffer receive on where the kernel has
	// it (Linux 6.6 and later) and off where it does not;
	// Port.MultiBuffer says which.
	MultiBufferAuto MultiBuffer = iota
	// MultiBufferOn turns it on; Open fails with ErrNoMultiBuffer where
	// the kernel cannot.
	MultiBufferOn
	// MultiBufferOff receives only packets that fit one UMEM frame: the
	// XDP program passes longer ones to the kernel (Oversize).
	MultiBufferOff
)

// String returns "auto", "on" or "off".
func (m MultiBuffer) String() string {
	switch m {
	case MultiBufferAuto:
		return "auto"
	case MultiBufferOn:
		return "on"
	case MultiBufferOff:
		return "off"
	}
	return fmt.Sprintf("MultiBuffer(%d)", int(m))
}

// Defaults and limits of Config.
const (
	DefaultFrameSize = 4096
	DefaultNumFrames = 4096
	DefaultRingSize  = 2048
	MaxNumFrames     = 1 << 18
	MaxRingSize      = 1 << 16
	MaxChainLimit    = 64 // the largest Config.MaxChain

	// MaxBusyPoll is the longest Config.BusyPoll: a wait polls at most
	// this long before it sleeps (the gateway's sink waits 1ms at a
	// time; longer spins burn a core on every wake-up of an idle port).
	MaxBusyPoll = time.Millisecond
	// DefaultBusyPollBudget is the busy-poll budget (packets per NAPI
	// poll) when Config.BusyPollBudget is 0: a NAPI weight, and the
	// batch xdpsock and DPDK use (the kernel's own default is 8).
	DefaultBusyPollBudget = 64
	// MaxBusyPollBudget is the largest budget the kernel takes (U16_MAX).
	MaxBusyPollBudget = 1<<16 - 1
)

const (
	// maxEtherFrame is the longest untagged Ethernet frame an IP packet
	// makes: Ethernet and IPv6 headers and 65535 bytes of payload. The
	// default Config.MaxChain takes it.
	maxEtherFrame = 14 + 40 + 65535
	// xdpPacketHeadroom is XDP_PACKET_HEADROOM: the kernel puts a
	// received packet this far into its UMEM frame.
	xdpPacketHeadroom = 256
)

// rxFrameLen is how much of a UMEM frame of size frameSize a received
// packet fills at most (in copy mode the kernel cuts a longer one into
// chains of descriptors this long).
func rxFrameLen(frameSize int) int { return frameSize - xdpPacketHeadroom }

// defaultMaxChain is the default of Config.MaxChain: enough frames for
// maxEtherFrame (18 of 4096 bytes, 37 of 2048), but no more than the RX
// ring or the RX frames hold.
func defaultMaxChain(cfg Config) int {
	n := (maxEtherFrame + rxFrameLen(cfg.FrameSize) - 1) / rxFrameLen(cfg.FrameSize)
	return min(n, cfg.RingSize, cfg.NumFrames/2)
}

// maxIfNameLen is the longest interface name (IFNAMSIZ less the NUL).
const maxIfNameLen = 15

// xdpMaxPrefixes is the most redirect prefixes of one family.
const xdpMaxPrefixes = 4096

// Errors callers can act on (see also frame.ErrInvalidConfig).
var (
	// ErrAttached: another XDP program is attached to the interface.
	// Open leaves it in place.
	ErrAttached = errors.New("another XDP program is already attached")
	// ErrZeroCopy: Config.ZeroCopy was asked for but the driver
	// cannot do AF_XDP zero-copy on that queue.
	ErrZeroCopy = errors.New("driver does not support AF_XDP zero-copy")
	// ErrUnsupported: no AF_XDP sockets, on a kernel without
	// CONFIG_XDP_SOCKETS or another operating system. It wraps
	// frame.ErrNotSupported.
	ErrUnsupported = fmt.Errorf("AF_XDP sockets %w", frame.ErrNotSupported)
	// ErrDetached: the XDP program is no longer attached to the interface:
	// someone detached its BPF link from outside (bpftool link detach), or
	// the interface went away.
	ErrDetached = errors.New("XDP program detached from the interface")
	// ErrClosed is returned by Socket methods after Port.Close.
	ErrClosed = fmt.Errorf("xsk: %w", net.ErrClosed)
	// ErrBadFrame: the sink was given a frame that is not one of its
	// allocated TX frames, or a length outside 1..FrameSize.
	ErrBadFrame = errors.New("not an allocated TX frame or bad length")
	// ErrNoMultiBuffer: Config.MultiBuffer was MultiBufferOn but the
	// kernel cannot load an XDP program with BPF_F_XDP_HAS_FRAGS (Linux
	// 5.18) or bind an AF_XDP socket with XDP_USE_SG (Linux 6.6; in
	// zero-copy mode, a driver that supports it).
	ErrNoMultiBuffer = errors.New("kernel or driver without AF_XDP multi-buffer (BPF_F_XDP_HAS_FRAGS, XDP_USE_SG)")
	// ErrNoBusyPoll: Config.BusyPoll was set but the kernel refused a
	// busy-poll socket option: ENOPROTOOPT from a kernel built without
	// CONFIG_NET_RX_BUSY_POLL or older than Linux 5.11
	// (SO_PREFER_BUSY_POLL, SO_BUSY_POLL_BUDGET), EPERM without
	// CAP_NET_ADMIN. Open fails rather than run without what was asked.
	ErrNoBusyPoll = errors.New("kernel refused AF_XDP busy polling (SO_BUSY_POLL, SO_PREFER_BUSY_POLL, SO_BUSY_POLL_BUDGET)")
)

// Config configures Open.
type Config struct {
	// Ifname is the interface, in the calling thread's network namespace.
	Ifname string
	// Queues are the RX queues to bind a socket to; nil means every RX
	// queue of the interface (ETHTOOL_GCHANNELS, else the link's RX queue
	// count), so that all redirected traffic is seen.
	Queues []int
	// Mode is the XDP attach mode.
	Mode Mode
	// ZeroCopy binds with XDP_ZEROCOPY (an error if the driver cannot);
	// the default is copy mode (XDP_COPY), which works everywhere.
	ZeroCopy bool
	// FrameSize is the UMEM frame size: 2048 or 4096 (0 means 4096).
	// The kernel puts received packets 256 bytes (XDP_PACKET_HEADROOM)
	// into the frame; transmitted packets start at the frame.
	FrameSize int
	// NumFrames is the number of UMEM frames per socket (0 means 4096):
	// the first half receive (fill ring), the second half transmit.
	NumFrames int
	// RingSize is the number of entries of each of the four rings, a
	// power of two (0 means 2048).
	RingSize int
	// Redirect are the destinations whose IPv4/IPv6 packets go to the
	// sockets; everything else goes to the kernel.
	Redirect []netip.Prefix
	// MultiBuffer says whether packets longer than one UMEM frame (jumbo
	// frames; in generic mode a veth peer's GSO super-packets) reach the
	// sockets as chains of frames (the XDP program loaded with
	// BPF_F_XDP_HAS_FRAGS, the sockets bound with XDP_USE_SG) or go to
	// the kernel (Oversize). The default, MultiBufferAuto, takes them
	// where the kernel can.
	MultiBuffer MultiBuffer
	// MaxChain is the most UMEM frames one received packet may take
	// with multi-buffer on, 2..MaxChainLimit and at most RingSize and
	// NumFrames/2. 0 means enough for the largest IP packet (65535 bytes
	// of IPv6 payload: 18 frames of 4096 bytes, 37 of 2048), within those
	// bounds. The XDP program passes longer packets to the kernel
	// (Oversize); a longer chain that reaches a socket anyway is dropped
	// and counted (RXChainTooLong).
	MaxChain int
	// BusyPoll turns on preferred busy polling (Linux 5.11) on every
	// socket, 1µs..MaxBusyPoll in whole microseconds; 0, the default,
	// leaves it off. The sockets get SO_PREFER_BUSY_POLL, SO_BUSY_POLL
	// (in µs) and SO_BUSY_POLL_BUDGET, so that every sendto and
	// recvfrom on them runs the queue's NAPI poll in the calling thread;
	// and a wait for received frames or for TX completions first polls,
	// one non-blocking recvfrom (or sendto, while TX frames wait) at a
	// time, for up to BusyPoll, and only then sleeps in the netpoller.
	// See the package documentation for what it needs from the NIC.
	// Where the kernel refuses an option, Open fails with ErrNoBusyPoll.
	BusyPoll time.Duration
	// DisableTXChecksum turns off TX checksum offload (an ablation; the
	// Generator has it off). By default a copy-mode socket on a kernel
	// with AF_XDP TX metadata (Linux 6.11, XDP_UMEM_TX_METADATA_LEN)
	// sends a Sink's TCP and UDP segments with partial checksums, which
	// the kernel or the NIC completes (XDP_TXMD_FLAGS_CHECKSUM: the skb
	// leaves CHECKSUM_PARTIAL), instead of summing each payload here.
	// Every TX frame then starts TXMetadataLen bytes into its UMEM frame.
	// Zero-copy sockets leave it off: a driver without TX metadata
	// support would send the partial checksums as they are; so do
	// sockets on virtio_net, whose copy-mode frames took no TX metadata
	// on Linux 6.12.
	DisableTXChecksum bool
	// BusyPollBudget is the most packets one busy poll takes
	// (SO_BUSY_POLL_BUDGET), 1..MaxBusyPollBudget; 0 means
	// DefaultBusyPollBudget. Only with BusyPoll.
	BusyPollBudget int
}

// withDefaults fills in defaults and checks cfg without system calls.
func (cfg Config) withDefaults() (Config, error) {
	bad := func(format string, a ...any) (Config, error) {
		return cfg, fmt.Errorf("xsk: port: %w: %s", frame.ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	cfg.FrameSize = cmp.Or(cfg.FrameSize, DefaultFrameSize)
	cfg.NumFrames = cmp.Or(cfg.NumFrames, DefaultNumFrames)
	cfg.RingSize = cmp.Or(cfg.RingSize, DefaultRingSize)
	switch {
	case cfg.Ifname == "" || len(cfg.Ifname) > maxIfNameLen:
		return bad("interface name %q", cfg.Ifname)
	case cfg.Mode < ModeAuto || cfg.Mode > ModeGeneric:
		return bad("mode %v", cfg.Mode)
	case cfg.FrameSize != 2048 && cfg.FrameSize != 4096:
		return bad("frame size %d is not 2048 or 4096", cfg.FrameSize)
	case cfg.NumFrames < 2 || cfg.NumFrames > MaxNumFrames || cfg.NumFrames%2 != 0:
		return bad("%d frames: want an even number in 2..%d", cfg.NumFrames, MaxNumFrames)
	case cfg.RingSize < 2 || cfg.RingSize > MaxRingSize || cfg.RingSize&(cfg.RingSize-1) != 0:
		return bad("ring size %d: want a power of two in 2..%d", cfg.RingSize, MaxRingSize)
	case cfg.MultiBuffer < MultiBufferAuto || cfg.MultiBuffer > MultiBufferOff:
		return bad("multi-buffer %v", cfg.MultiBuffer)
	case cfg.MaxChain != 0 && (cfg.MaxChain < 2 || cfg.MaxChain > min(MaxChainLimit, cfg.RingSize, cfg.NumFrames/2)):
		return bad("max chain %d: want 2..%d (MaxChainLimit, RingSize, NumFrames/2)", cfg.MaxChain,
			min(MaxChainLimit, cfg.RingSize, cfg.NumFrames/2))
	}
	switch {
	case cfg.BusyPoll < 0 || cfg.BusyPoll > MaxBusyPoll || cfg.BusyPoll > 0 && cfg.BusyPoll < time.Microsecond:
		return bad("busy poll %v: want 0 (off) or %v to %v", cfg.BusyPoll, time.Microsecond, MaxBusyPoll)
	case cfg.BusyPollBudget < 0 || cfg.BusyPollBudget > MaxBusyPollBudget:
		return bad("busy-poll budget %d: want 1..%d, or 0 for %d", cfg.BusyPollBudget, MaxBusyPollBudget, DefaultBusyPollBudget)
	case cfg.BusyPollBudget != 0 && cfg.BusyPoll == 0:
		return bad("busy-poll budget %d without busy poll", cfg.BusyPollBudget)
	}
	cfg.BusyPoll = cfg.BusyPoll.Truncate(time.Microsecond)
	if cfg.BusyPoll > 0 {
		cfg.BusyPollBudget = cmp.Or(cfg.BusyPollBudget, DefaultBusyPollBudget)
	}
	cfg.MaxChain = cmp.Or(cfg.MaxChain, defaultMaxChain(cfg))
	if cfg.MaxChain < 2 { // NumFrames 2: one RX frame
		if cfg.MultiBuffer == MultiBufferOn {
			return bad("multi-buffer with %d frames: want 4 or more", cfg.NumFrames)
		}
		cfg.MultiBuffer = MultiBufferOff
	}
	for i, q := range cfg.Queues {
		if q < 0 || slices.Contains(cfg.Queues[:i], q) {
			return bad("queue %d negative or repeated", q)
		}
	}
	prefixes, err := prefix.Normalize(cfg.Redirect, xdpMaxPrefixes)
	if err != nil {
		return bad("%v", err)
	}
	cfg.Redirect = prefixes
	return cfg, nil
}

// Stats are a socket's counters.
type Stats struct {
	RX          uint64 // packets returned by Receive, multi-buffer ones included
	TX          uint64 // frames put on the TX ring
	Completed   uint64 // frames returned by the completion ring
	Kicks       uint64 // sendto/recvfrom wakeups
	KickRetries uint64 // wakeups that got EAGAIN, EBUSY, ENOBUFS, EINTR or ENETDOWN (retried later)
	KickErrors  uint64 // wakeups that failed otherwise
	BusyPolls   uint64 // non-blocking recvfrom/sendto made while waiting, to run the NAPI poll (Config.BusyPoll)
	BadFrames   uint64 // frame addresses refused on transmit, recycle or free, and bad ring entries

	// Multi-buffer receive: packets that came as chains of frames
	// (descriptors with XDP_PKT_CONTD), copied into one buffer.
	RXMultiBuffer  uint64 // chains of two frames or more returned by Receive (counted in RX too)
	RXChainTooLong uint64 // chains of more than MaxChain frames, dropped
	RXChainBroken  uint64 // chains with a bad descriptor (counted in BadFrames too) or shorter than an Ethernet header, dropped

	TXCsumOffload uint64 // frames sent with a partial checksum for the kernel or NIC to complete (Config.DisableTXChecksum)

	// From the kernel (XDP_STATISTICS).
	RXDropped   uint64 // dropped for other reasons (e.g. too big for a frame)
	RXInvalid   uint64 // invalid RX descriptors
	RXRingFull  uint64 // dropped because the RX ring was full
	RXFillEmpty uint64 // times the fill ring was empty when a packet came
	TXInvalid   uint64 // invalid TX descriptors
	TXRingEmpty uint64 // times the TX ring was empty on a wakeup

	// From the XDP program, per queue (filled in by Port.Stats and
	// Port.ProgramStats; Socket.Stats leaves them zero): frames for the redirect prefixes it
	// passed to the kernel instead of the socket, by reason, and IP
	// frames with the wrong version.
	Oversize        uint64 // longer than a socket takes: a UMEM frame less 256 bytes, MaxChain of them with multi-buffer
	OtherHost       uint64 // sent to another host's unicast MAC address (the kernel drops them)
	NotUnicast      uint64 // sent to a broadcast or multicast MAC address
	VersionMismatch uint64 // any destination: IP version not that of the EtherType (the kernel drops them)
}

// AppendCounters appends the counters but RX, TX and Completed to dst,
// by name (docs/udpfwd.md: udpfwd_xsk_events_total), and returns it.
func (s Stats) AppendCounters(dst []frame.Counter) []frame.Counter {
	return append(dst,
		frame.Counter{Name: "kicks", Value: s.Kicks},
		frame.Counter{Name: "kick_retry", Value: s.KickRetries},
		frame.Counter{Name: "kick_error", Value: s.KickErrors},
		frame.Counter{Name: "busy_poll", Value: s.BusyPolls},
		frame.Counter{Name: "bad_frame", Value: s.BadFrames},
		frame.Counter{Name: "rx_multi_buffer", Value: s.RXMultiBuffer},
		frame.Counter{Name: "rx_chain_too_long", Value: s.RXChainTooLong},
		frame.Counter{Name: "rx_chain_broken", Value: s.RXChainBroken},
		frame.Counter{Name: "tx_csum_offload", Value: s.TXCsumOffload},
		frame.Counter{Name: "rx_dropped", Value: s.RXDropped},
		frame.Counter{Name: "rx_invalid", Value: s.RXInvalid},
		frame.Counter{Name: "rx_ring_full", Value: s.RXRingFull},
		frame.Counter{Name: "rx_fill_ring_empty", Value: s.RXFillEmpty},
		frame.Counter{Name: "tx_invalid", Value: s.TXInvalid},
		frame.Counter{Name: "tx_ring_empty", Value: s.TXRingEmpty},
		frame.Counter{Name: "pass_oversize", Value: s.Oversize},
		frame.Counter{Name: "pass_other_host", Value: s.OtherHost},
		frame.Counter{Name: "pass_not_unicast", Value: s.NotUnicast},
		frame.Counter{Name: "pass_version_mismatch", Value: s.VersionMismatch},
	)
}
