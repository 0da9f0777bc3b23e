package tun

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/segment"
)

// ErrDeviceGone is wrapped by the error of a Read or Write on a queue
// whose TUN device was deleted from outside (ip link del): the queue is
// of no more use, and the device must be opened again.
var ErrDeviceGone = errors.New("TUN device deleted")

// ErrInUse is wrapped by Open's error for an existing device that
// another file has a queue of: attaching to it would take part of its
// flows (multi-queue) or be refused (single queue).
var ErrInUse = errors.New("TUN device in use")

// DefaultSndBuf is the TUNSETSNDBUF value used when Config.SndBuf is
// 0: 4 MiB of truesize, instead of the kernel's unbounded INT_MAX.
const DefaultSndBuf = 4 << 20

// MaxQueues is the largest Config.Queues (the kernel's MAX_TAP_QUEUES).
const MaxQueues = 256

// maxIfNameLen is the longest interface name (IFNAMSIZ less the NUL).
const maxIfNameLen = 15

// Offloads is a set of TUNSETOFFLOAD flags: what the kernel may hand to a
// TUN reader without segmenting or checksumming it first.
type Offloads uint32

// The TUNSETOFFLOAD flags (include/uapi/linux/if_tun.h).
const (
	OffloadCsum   Offloads = 0x01 // partial checksums (NEEDS_CSUM)
	OffloadTSO4   Offloads = 0x02 // TCP super-packets over IPv4
	OffloadTSO6   Offloads = 0x04 // TCP super-packets over IPv6
	OffloadTSOECN Offloads = 0x08 // TSO with CWR set (GSO ECN flag)
	OffloadUFO    Offloads = 0x10 // legacy UFO (accepted, ignored by the kernel)
	OffloadUSO4   Offloads = 0x20 // UDP_SEGMENT super-packets over IPv4 (Linux 6.2+)
	OffloadUSO6   Offloads = 0x40 // UDP_SEGMENT super-packets over IPv6 (Linux 6.2+)

	// UDP-tunnel (VXLAN, Geneve) super-packets, whose outer UDP checksum
	// is computed or absent, in a 24-byte virtio-net header
	// (segment.HeaderSizeTunnel; Linux 6.17+).
	OffloadUDPTunnel     Offloads = 0x80
	OffloadUDPTunnelCsum Offloads = 0x100
)

// DefaultOffloads is what Open asks for when Config.Offload is set; the
// tunnel offloads only with the 24-byte header (Config.HeaderSize).
const DefaultOffloads = OffloadCsum | OffloadTSO4 | OffloadTSO6 | OffloadTSOECN | OffloadUSO4 | OffloadUSO6 | tunnelOffloads

const tunnelOffloads = OffloadUDPTunnel | OffloadUDPTunnelCsum

// offloadFallbacks are the sets Open tries in turn when the kernel
// refuses one with EINVAL: without the tunnel offloads (before Linux
// 6.17), then without USO (before Linux 6.2), then without ECN.
var offloadFallbacks = [...]Offloads{
	DefaultOffloads,
	DefaultOffloads &^ tunnelOffloads,
	DefaultOffloads &^ (tunnelOffloads | OffloadUSO4 | OffloadUSO6),
	DefaultOffloads &^ (tunnelOffloads | OffloadUSO4 | OffloadUSO6 | OffloadTSOECN),
}

var offloadNames = [...]struct {
	bit  Offloads
	name string
}{
	{OffloadCsum, "csum"},
	{OffloadTSO4, "tso4"},
	{OffloadTSO6, "tso6"},
	{OffloadTSOECN, "tso_ecn"},
	{OffloadUFO, "ufo"},
	{OffloadUSO4, "uso4"},
	{OffloadUSO6, "uso6"},
	{OffloadUDPTunnel, "udp_tunnel"},
	{OffloadUDPTunnelCsum, "udp_tunnel_csum"},
}

// Has reports whether every flag of x is in o.
func (o Offloads) Has(x Offloads) bool { return o&x == x }

// String lists the flags, comma-separated ("csum,tso4,tso6,tso_ecn,uso4,uso6"),
// or "none".
func (o Offloads) String() string {
	if o == 0 {
		return "none"
	}
	var parts []string
	for _, f := range offloadNames {
		if o.Has(f.bit) {
			parts = append(parts, f.name)
			o &^= f.bit
		}
	}
	if o != 0 {
		parts = append(parts, fmt.Sprintf("%#x", uint32(o)))
	}
	return strings.Join(parts, ",")
}

// Config says which TUN device to open and how to set it up. Open
// works in the network namespace of the calling thread.
type Config struct {
	// Name is the device name (at most 15 bytes). The device is created
	// if missing and attached if it exists; empty lets the kernel pick
	// a name (tunN).
	Name string
	// Queues is the number of queues, one file descriptor each; 0 means
	// 1. More than one creates or attaches the device with
	// IFF_MULTI_QUEUE.
	Queues int
	// MTU is set on the device unless it is 0.
	MTU int
	// Offload enables DefaultOffloads, falling back without the tunnel
	// offloads, then without USO and then without ECN when the kernel
	// refuses them (Device.Offloads says what was accepted). Without it
	// the device has no offloads and the kernel segments and checksums
	// every packet before the TUN.
	Offload bool
	// HeaderSize is the virtio-net header size: segment.HeaderSize (10,
	// the default when 0), segment.HeaderSizeMrg (12) or
	// segment.HeaderSizeTunnel (24). Only with 24 does Offload ask for the
	// UDP-tunnel offloads, which need that header; a kernel without them
	// (before Linux 6.17) leaves its last 14 bytes zero.
	HeaderSize int
	// SndBuf bounds the truesize of written packets still charged to
	// the TUN (TUNSETSNDBUF); Write blocks while it is reached. 0 means
	// DefaultSndBuf. The charge ends early: the kernel's IP input
	// (ip_rcv) orphans the packet inside write() for routed and local
	// traffic alike, so this is a safety bound, not backpressure from a
	// slow egress (measured on Linux 6.18: a tbf on the egress device did
	// not make a 32 KiB SndBuf block).
	SndBuf int
	// TxQueueLen sets the device's txqueuelen, the ring of packets the
	// kernel holds for the reader; with offloads each entry can be a
	// 64 KiB super-packet. A short ring reaches UDP senders sooner when
	// the reader stops reading, but TCP, which fills any buffer, then
	// meets local drops and slows down. 0 keeps the kernel's (500).
	TxQueueLen int
	// NoQueue gives the device the noqueue qdisc. The TUN driver releases
	// each packet's charge to its sending socket when it rings it, and
	// drops packets when its reader falls behind, so a stalled reader
	// cannot block a sender. Without a qdisc in front, the drop is
	// reported to the sending socket at once (ENOBUFS for UDP with
	// IP_RECVERR, local congestion for TCP) instead of vanishing silently:
	// that is how backpressure reaches senders through a TUN.
	NoQueue bool
}

// withDefaults fills in defaults and checks cfg without any system call.
func (cfg Config) withDefaults() (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return cfg, fmt.Errorf("tun: open %q: %w: %s", cfg.Name, frame.ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	if err := checkIfName(cfg.Name); err != "" {
		return bad("%s", err)
	}
	if cfg.Queues == 0 {
		cfg.Queues = 1
	}
	if cfg.HeaderSize == 0 {
		cfg.HeaderSize = segment.HeaderSize
	}
	if cfg.SndBuf == 0 {
		cfg.SndBuf = DefaultSndBuf
	}
	switch {
	case cfg.Queues < 0 || cfg.Queues > MaxQueues:
		return bad("%d queues, want 1 to %d", cfg.Queues, MaxQueues)
	case cfg.HeaderSize != segment.HeaderSize && cfg.HeaderSize != segment.HeaderSizeMrg && cfg.HeaderSize != segment.HeaderSizeTunnel:
		return bad("header size %d, want %d, %d or %d", cfg.HeaderSize, segment.HeaderSize, segment.HeaderSizeMrg, segment.HeaderSizeTunnel)
	case cfg.MTU < 0:
		return bad("MTU %d", cfg.MTU)
	case cfg.SndBuf < 0 || cfg.SndBuf > 1<<31-1:
		return bad("send buffer %d bytes, want 1 to 2^31-1", cfg.SndBuf)
	case cfg.TxQueueLen < 0:
		return bad("txqueuelen %d", cfg.TxQueueLen)
	}
	return cfg, nil
}

// checkIfName applies the kernel's dev_valid_name rules and says what is
// wrong with name, or returns "". An empty name is valid (the kernel picks).
func checkIfName(name string) string {
	switch {
	case len(name) > maxIfNameLen:
		return fmt.Sprintf("name is %d bytes, at most %d", len(name), maxIfNameLen)
	case name == "." || name == "..":
		return "name cannot be . or .."
	case strings.ContainsAny(name, "/: \t\n\v\f\r\x00"):
		return "name contains '/', ':', a NUL or white space"
	}
	return ""
}
