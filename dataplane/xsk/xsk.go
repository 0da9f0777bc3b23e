package xsk

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/gsoplane/gsoplane/dataplane/pipeline"
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

// Defaults and limits of Config.
const (
	DefaultFrameSize = 4096
	DefaultNumFrames = 4096
	DefaultRingSize  = 2048
	MaxNumFrames     = 1 << 18
	MaxRingSize      = 1 << 16
)

// maxIfNameLen is the longest interface name (IFNAMSIZ less the NUL).
const maxIfNameLen = 15

// xdpMaxPrefixes is the most redirect prefixes of one family.
const xdpMaxPrefixes = 4096

// Errors callers can act on (see also pipeline.ErrInvalidConfig).
var (
	// ErrAttached: another XDP program is attached to the interface.
	// Open leaves it in place.
	ErrAttached = errors.New("another XDP program is already attached")
	// ErrZeroCopy: Config.ZeroCopy was asked for but the driver
	// cannot do AF_XDP zero-copy on that queue.
	ErrZeroCopy = errors.New("driver does not support AF_XDP zero-copy")
	// ErrUnsupported: the kernel has no AF_XDP (CONFIG_XDP_SOCKETS).
	ErrUnsupported = errors.New("kernel without AF_XDP sockets (CONFIG_XDP_SOCKETS)")
	// ErrClosed is returned by Socket methods after Port.Close.
	ErrClosed = fmt.Errorf("xsk: %w", net.ErrClosed)
	// ErrBadFrame: the sink was given a frame that is not one of its
	// allocated TX frames, or a length outside 1..FrameSize.
	ErrBadFrame = errors.New("not an allocated TX frame or bad length")
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
}

// withDefaults fills in defaults and checks cfg without system calls.
func (cfg Config) withDefaults() (Config, error) {
	bad := func(format string, a ...any) (Config, error) {
		return cfg, fmt.Errorf("xsk: port: %w: %s", pipeline.ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	cfg.FrameSize = xdpOr(cfg.FrameSize, DefaultFrameSize)
	cfg.NumFrames = xdpOr(cfg.NumFrames, DefaultNumFrames)
	cfg.RingSize = xdpOr(cfg.RingSize, DefaultRingSize)
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
	}
	for i, q := range cfg.Queues {
		if q < 0 || slices.Contains(cfg.Queues[:i], q) {
			return bad("queue %d negative or repeated", q)
		}
	}
	prefixes, err := xdpPrefixes(cfg.Redirect)
	if err != nil {
		return bad("%v", err)
	}
	cfg.Redirect = prefixes
	return cfg, nil
}

func xdpOr(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// xdpPrefixes checks and masks redirect prefixes (IPv4-mapped IPv6 ones
// become IPv4).
func xdpPrefixes(in []netip.Prefix) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(in))
	var n4, n6 int
	for _, p := range in {
		if !p.IsValid() {
			return nil, fmt.Errorf("redirect prefix %q is not valid", p)
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		if p.Addr().Is4() {
			n4++
		} else {
			n6++
		}
		out = append(out, p.Masked())
	}
	if n4 > xdpMaxPrefixes || n6 > xdpMaxPrefixes {
		return nil, fmt.Errorf("more than %d redirect prefixes of one family", xdpMaxPrefixes)
	}
	return out, nil
}

// Stats are a socket's counters.
type Stats struct {
	RX          uint64 // frames returned by Receive
	TX          uint64 // frames put on the TX ring
	Completed   uint64 // frames returned by the completion ring
	Kicks       uint64 // sendto/recvfrom wakeups
	KickRetries uint64 // wakeups that got EAGAIN, EBUSY, ENOBUFS, EINTR or ENETDOWN (retried later)
	KickErrors  uint64 // wakeups that failed otherwise
	BadFrames   uint64 // frame addresses refused on transmit, recycle or free, and bad ring entries

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
	Oversize        uint64 // longer than a UMEM frame takes (FrameSize - 256 bytes)
	OtherHost       uint64 // sent to another host's unicast MAC address (the kernel drops them)
	NotUnicast      uint64 // sent to a broadcast or multicast MAC address
	VersionMismatch uint64 // any destination: IP version not that of the EtherType (the kernel drops them)
}
