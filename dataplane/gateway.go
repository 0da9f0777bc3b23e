package dataplane

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/afpacket"
	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/icmp"
	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/dataplane/tun"
	"github.com/gsoplane/gsoplane/dataplane/xsk"
	"github.com/gsoplane/gsoplane/txqueue"
)

// ErrInvalidConfig is wrapped by every error about a configuration the
// gateway, the pipeline or a port refused before any system call.
var ErrInvalidConfig = frame.ErrInvalidConfig

// ErrNotSupported is wrapped by the error OpenGateway returns on a system
// without the gateway (any but Linux); it wraps errors.ErrUnsupported.
var ErrNotSupported = frame.ErrNotSupported

// ErrTUNGone is wrapped by the error Run returns when the gateway's TUN
// device was deleted from outside while it ran.
var ErrTUNGone = tun.ErrDeviceGone

// ErrNoDevice is wrapped by the error OpenGateway returns when the NIC or
// the ingress device does not exist in the caller's network namespace.
var ErrNoDevice = frame.ErrNoDevice

// ErrZeroCopy is wrapped by the error OpenGateway returns when
// XDPOptions.ZeroCopy is XDPZeroCopyOn and the NIC's driver does not take
// AF_XDP zero-copy sockets; the error names the driver.
var ErrZeroCopy = xsk.ErrZeroCopy

// GatewayConfig describes a gateway between a TUN device and a NIC. Its
// zero value, with a NIC and Routes, is the production gateway: a TUN
// device with offloads, the NIC port chosen automatically, backpressure
// and GRO; the Disable fields are ablations.
type GatewayConfig struct {
	// TUN is the TUN device to open. The gateway gives it the noqueue
	// qdisc, so that its drops reach the senders.
	TUN TUNOptions
	// Host, if set, replaces the TUN device with the caller's own source
	// of super-packets and writer for returning packets (one queue).
	Host *Host
	// Ingress, if its Device is set, replaces the TUN device with a
	// network device.
	Ingress IngressOptions
	NIC     string
	// Routes are the prefixes behind the TUN device (or the ingress
	// device): packets arriving on the NIC for them are taken from the
	// kernel and written into the TUN.
	Routes  []netip.Prefix
	NextHop netip.Addr // the NIC-side gateway; zero: each destination's route through the NIC
	// Port is the kind of NIC port: AF_XDP, AF_PACKET, or PortAuto
	// (AF_XDP where the driver takes zero-copy sockets, else AF_PACKET;
	// see PortAuto).
	Port   PortKind
	XDP    XDPOptions    // how an AF_XDP port runs
	Packet PacketOptions // how an AF_PACKET port runs
	// RouterAddrs are the gateway's own addresses on the TUN's link, at
	// most one per IP version, as a router's: the source of the ICMP
	// errors it writes into the TUN (host unreachable for a next hop that
	// does not resolve, fragmentation needed or packet too big for a
	// packet over the NIC's MTU). Not the TUN's own address, which the
	// host would drop as a martian. Without one for a version, those
	// errors are not sent (icmp.Stats.Silent). With an ingress device,
	// the default is its addresses, and the errors go through the host's
	// stack (raw sockets), which routes them.
	RouterAddrs []netip.Addr

	// DisableBackpressure turns off the budget that charges segments and
	// stops reading the TUN while it is full: the queue then drops what
	// does not fit instead (an ablation, to show the failure mode).
	DisableBackpressure bool
	Budget              int   // budget limit in truesize bytes; 0: self-sizing up to what the frames hold
	QueueLen            int   // most segments queued or in flight; 0: every TX frame
	TxRate              int64 // emulated line rate in bit/s; 0: none
	Hook                pipeline.Hook
	// DisableGRO turns off merging the packets the NIC hands back into
	// TCP super-packets (and UDP ones when the TUN device took the USO
	// offloads) before they are written into the TUN: one write per
	// packet instead of one per super-packet (an ablation). GRO needs the
	// inside's writer to be a frame.VectorWriter (a TUN queue is).
	DisableGRO bool
	// OnDetach is what the gateway does when its XDP program is detached
	// from outside: attach it again (the default) or stop.
	OnDetach DetachPolicy
	// Log receives the gateway's rare events, such as the kernel refusing
	// a kind of super-packet (GRO then goes on without it); nil: none.
	Log *slog.Logger
	// DrainTimeout bounds how long Run, once ctx ends, sends what is
	// queued; 0: pipeline.DefaultDrainTime.
	DrainTimeout time.Duration
}

// TUNOptions describe the TUN device a gateway opens.
type TUNOptions struct {
	// Name is the device name (at most 15 bytes). The device is created
	// if missing and attached if it exists; empty lets the kernel pick
	// a name (tunN).
	Name string
	// Queues is the number of queues, 1..MaxTUNQueues, one forwarder
	// each; 0 means 1.
	Queues int
	// MTU is set on the device unless it is 0. The gateway lowers it
	// to the MTU it sends (NICStats.SendMTU) while that is lower.
	MTU int
	// DisableOffload turns off the offloads through which the kernel
	// hands over super-packets (TSO, USO with checksum offload; the
	// gateway falls back without USO and then without ECN when the
	// kernel refuses them): the kernel then segments and checksums every
	// packet before the TUN (an ablation).
	DisableOffload bool
	// TxQueueLen sets the device's txqueuelen, the ring of packets the
	// kernel holds for the reader; 0 keeps the kernel's (500).
	TxQueueLen int
}

// IngressOptions describe the network device a gateway forwards from
// instead of a TUN device: the veth of a container whose side does TSO,
// or a jumbo-frame link. Packets for Routes arriving on it go out of the
// NIC, and packets for GatewayConfig.Routes arriving on the NIC go out of
// it, each cut to the egress MTU as Linux forwards (pipeline.WireSource;
// TCP to the flow's MSS, SYNs clamped to the smaller MTU). Its port is of
// the same kind as the NIC's.
type IngressOptions struct {
	Device string         // the device's name; empty: a TUN device (or the Host)
	Routes []netip.Prefix // the prefixes behind the NIC; required with a Device
}

// XDPOptions describe how an AF_XDP port runs.
type XDPOptions struct {
	Mode xsk.Mode // how the XDP program runs
	// ZeroCopy says whether the sockets bind with XDP_ZEROCOPY, on the
	// driver's own buffers (the program in the driver: xsk.ModeNative, or
	// xsk.ModeAuto taken as native). XDPZeroCopyAuto, the default, tries
	// it where the mode allows: refused, PortXDP binds in copy mode and
	// PortAuto takes AF_PACKET instead, saying why in one log line.
	// XDPZeroCopyOn fails OpenGateway where the driver refuses (an error
	// wrapping ErrZeroCopy, naming the driver); XDPZeroCopyOff binds in
	// copy mode (and PortAuto takes AF_PACKET).
	ZeroCopy XDPZeroCopy
	// BusyPoll turns on preferred busy polling on the AF_XDP sockets for
	// this long per wait, 1µs..MaxBusyPoll; 0 (the default) leaves it off
	// (the NIC needs napi_defer_hard_irqs and gro_flush_timeout set).
	// AF_XDP only: with PortPacket it is an ErrInvalidConfig; PortAuto
	// falling back to AF_PACKET says in the log that it is off. A kernel
	// refusing the socket options fails OpenGateway.
	BusyPoll time.Duration
	// DisableTXChecksum makes the port compute every checksum itself (an
	// ablation). By default, on a kernel with AF_XDP TX metadata (Linux
	// 6.11) and in copy mode, segments leave with partial checksums that
	// the kernel or the NIC completes (SocketStats counter tx_csum_offload).
	DisableTXChecksum bool
}

// XDPZeroCopy says whether an AF_XDP port binds its sockets in
// zero-copy mode.
type XDPZeroCopy int

// The zero-copy choices.
const (
	XDPZeroCopyAuto XDPZeroCopy = iota // zero-copy where the driver takes it, else copy mode
	XDPZeroCopyOn                      // zero-copy, or OpenGateway fails
	XDPZeroCopyOff                     // copy mode
)

var zeroCopyNames = [...]string{XDPZeroCopyAuto: "auto", XDPZeroCopyOn: "on", XDPZeroCopyOff: "off"}

func (z XDPZeroCopy) String() string {
	if z >= 0 && int(z) < len(zeroCopyNames) {
		return zeroCopyNames[z]
	}
	return fmt.Sprintf("XDPZeroCopy(%d)", int(z))
}

// PacketOptions describe how an AF_PACKET port runs.
type PacketOptions struct {
	GSO afpacket.GSOMode // what the port leaves to the NIC
	// HostFilter is how the port attaches the ingress program that keeps
	// the routed prefixes' packets from the host's stack: tcx where the
	// kernel has it (the default), or cls_bpf on a clsact qdisc; with
	// afpacket.HostFilterAuto the gateway logs which and why.
	HostFilter afpacket.HostFilter
}

// PortKind is the kind of NIC port a gateway opens.
type PortKind int

// The port kinds.
const (
	// PortAuto takes the fastest port the NIC allows, by what was
	// measured (docs/udpfwd.md, "Choosing the port"): AF_XDP with
	// zero-copy sockets where the driver takes them (XDPOptions.ZeroCopy
	// not off), else AF_PACKET, which hands whole super-packets to a NIC
	// that segments them (afpacket.GSOModeAuto). AF_XDP in copy mode, one skb
	// per segment, forwards half AF_PACKET offload's TCP throughput on a
	// veth and is ahead of AF_PACKET only forward on a NIC that segments
	// nothing (by about a quarter), where AF_PACKET keeps the kernel's
	// GRO on the way back: only PortXDP opens it. The gateway logs the
	// choice and why.
	PortAuto   PortKind = iota
	PortXDP             // AF_XDP (dataplane/xsk)
	PortPacket          // AF_PACKET (dataplane/afpacket)
)

var portNames = [...]string{PortAuto: "auto", PortXDP: "xdp", PortPacket: "packet"}

func (k PortKind) String() string {
	if k >= 0 && int(k) < len(portNames) {
		return portNames[k]
	}
	return fmt.Sprintf("PortKind(%d)", int(k))
}

// DetachPolicy says what the gateway does when its port's program (XDP,
// or the ingress program for AF_PACKET, through tcx or cls_bpf) is
// detached from outside (bpftool link detach, tc filter del): without
// it, traffic from the NIC no longer reaches the gateway, or (AF_PACKET)
// reaches the host's stack too.
type DetachPolicy int

// The detach policies.
const (
	DetachReattach DetachPolicy = iota // attach it again, log and count it
	DetachStop                         // stop: Run returns an error wrapping the port's ErrDetached
)

// Host is the inside of a gateway when it is not a TUN device opened by
// the gateway: a benchmark's or a VPN's own reader and writer.
type Host struct {
	Source frame.Source // super-packets, virtio-net header first
	// Writer takes the returning packets, virtio-net header first; with
	// GRO (unless GatewayConfig.DisableGRO) it must be a
	// frame.VectorWriter.
	Writer     frame.Writer
	HeaderSize int // virtio-net header size of both
	Batch      int // packets per Source.Read; 0: the pipeline's default
	// Close unblocks a Source.Read in progress; the gateway calls it when
	// it stops, and again from Close.
	Close func() error
}

// GatewayStats is a snapshot of a gateway's counters.
type GatewayStats struct {
	Forward pipeline.Stats       // toward the NIC, summed over the forwarders; Drops[DropUnresolved] and [DropNotRouted] and HostControl from the sinks
	Reverse pipeline.Stats       // toward the ingress device (GatewayConfig.Ingress), the same way
	Wire    pipeline.WireStats   // the packets from the ingress device and from the NIC toward it
	Return  pipeline.ReturnStats // summed over the return paths
	Budget  txqueue.BudgetStats  // summed over the TUN queues' budgets
	Queue   txqueue.Stats        // summed over their queues
	Port    PortStats            // the NIC's port
	Ingress PortStats            // the ingress device's port (GatewayConfig.Ingress)
	Replies icmp.Stats           // ICMP errors written into the TUN
	NIC     NICStats
}

// PortStats are the counters of a port and its sockets, one per queue.
type PortStats struct {
	Kind PortKind // PortXDP or PortPacket
	// Sent counts the frames the port handed to the NIC (a super-packet
	// the NIC segments counts once), Completed those the NIC reported
	// gone; frames a sink dropped (Forward.Drops[DropUnresolved]) are in
	// neither, though the forwarder's Transmitted and Completed count
	// them as taken.
	Sent, Completed uint64
	Sockets         []SocketStats
}

// SocketStats are the counters of one socket of a port, AF_XDP or
// AF_PACKET (PortStats.Kind): the three they share, and the others by
// name as the port names them (xsk.Stats.AppendCounters,
// afpacket.Stats.AppendCounters).
type SocketStats struct {
	RX        uint64 // packets received (an AF_XDP multi-buffer chain counts once)
	TX        uint64 // frames handed to the kernel
	Completed uint64 // frames the kernel reported sent (AF_PACKET: once it has copied them, so TX)
	Counters  []frame.Counter
}

// Counter returns the value of the counter called name, 0 if the port
// keeps none of that name.
func (s SocketStats) Counter(name string) uint64 { return frame.Lookup(s.Counters, name) }

// NICStats is the NIC as the gateway last saw it.
type NICStats struct {
	Up         bool             // up, with a carrier
	MTU        int              // its MTU
	MTUChanges uint64           // times its MTU changed
	SendMTU    int              // the MTU the forwarders hold segments to: the NIC's, or the port's limit if lower (see the package doc)
	TUNMTU     int              // the TUN device's MTU, kept within SendMTU (0 with a Host)
	MAC        net.HardwareAddr // its MAC address, the frames' source
	MACChanges uint64           // times its MAC address changed
	Downs      uint64           // times it went down
	Attached   bool             // the port's program (XDP, or tcx or cls_bpf for AF_PACKET) is attached
	Detaches   uint64           // times it was found detached from outside
	Reattaches uint64           // times it was attached again
}

// UMEMFrameSize is the size of an AF_XDP socket's UMEM frame: each is
// that many bytes of locked memory.
const UMEMFrameSize = xsk.DefaultFrameSize

// UMEMFrames is the number of UMEM frames, half of them for TX, of each
// AF_XDP socket a gateway with a fixed budget of that many truesize bytes
// opens: enough TX frames to hold the budget plus one burst
// (frame.BurstSegments). Without a fixed budget (0) it is
// xsk.DefaultNumFrames.
func UMEMFrames(budget int) int {
	if budget <= 0 {
		return xsk.DefaultNumFrames
	}
	size := txqueue.Truesize(UMEMFrameSize)
	tx := (budget+size-1)/size + frame.BurstSegments
	return min(2*tx, xsk.MaxNumFrames)
}

// BudgetRange returns the range of a fixed GatewayConfig.Budget: from one
// burst (frame.BurstSegments) of default-sized frames to what the most
// AF_XDP TX frames hold besides one.
func BudgetRange() (lo, hi int64) {
	size := int64(txqueue.Truesize(UMEMFrameSize))
	return frame.BurstSegments * size, (xsk.MaxNumFrames/2 - frame.BurstSegments) * size
}
