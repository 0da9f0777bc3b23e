package dataplane

import (
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/afpacket"
	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/dataplane/tun"
	"github.com/gsoplane/gsoplane/dataplane/xsk"
	"github.com/gsoplane/gsoplane/segment"
	"github.com/gsoplane/gsoplane/txqueue"
)

// ErrInvalidConfig is wrapped by every error about a configuration the
// gateway, the pipeline or a port refused before any system call.
var ErrInvalidConfig = pipeline.ErrInvalidConfig

// GatewayConfig describes a gateway between a TUN device and a NIC.
type GatewayConfig struct {
	// TUN is the TUN device to open (TUN.Offload on: the kernel hands
	// over super-packets, GSO on). The gateway gives it the noqueue
	// qdisc (tun.Config.NoQueue), so that its drops reach the senders.
	TUN tun.Config
	// Host, if set, replaces the TUN device with the caller's own source
	// of super-packets and writer for returning packets (one queue).
	Host *Host
	// Ingress, if set, replaces the TUN device with a network device,
	// such as the veth of a container whose side does TSO, or a
	// jumbo-frame link: packets for IngressRoutes arriving on it go out
	// of the NIC, and packets for Routes arriving on the NIC go out of
	// it, each cut to the egress MTU as Linux forwards
	// (pipeline.WireSource; TCP to the flow's MSS, SYNs clamped to the
	// smaller MTU). Its port is of the same kind as the NIC's.
	Ingress       string
	IngressRoutes []netip.Prefix
	NIC           string
	// Routes are the prefixes behind the TUN device (or the ingress
	// device): packets arriving on the NIC for them are taken from the
	// kernel and written into the TUN.
	Routes  []netip.Prefix
	NextHop netip.Addr // the NIC-side gateway; zero: each destination's route through the NIC
	// Port is the kind of NIC port: AF_XDP, AF_PACKET, or PortAuto
	// (AF_XDP where the driver runs XDP natively, else AF_PACKET).
	Port     PortKind
	Mode     xsk.Mode // AF_XDP: how the XDP program runs
	ZeroCopy bool     // AF_XDP: zero-copy sockets
	// BusyPoll turns on preferred busy polling on the AF_XDP sockets for
	// this long per wait, 1µs..xsk.MaxBusyPoll; 0 (the default) leaves
	// it off (see xsk.Config.BusyPoll, and the xsk package documentation
	// for the NIC's napi_defer_hard_irqs and gro_flush_timeout it
	// needs). AF_XDP only: with PortPacket it is an ErrInvalidConfig;
	// PortAuto falling back to AF_PACKET says in the log that it is off.
	// A kernel refusing the socket options fails OpenGateway with
	// xsk.ErrNoBusyPoll.
	BusyPoll time.Duration
	// PacketGSO says what an AF_PACKET port leaves to the NIC: whole
	// super-packets, checksums, or nothing (see afpacket.GSOMode).
	PacketGSO afpacket.GSOMode
	// RouterAddrs are the gateway's own addresses on the TUN's link, at
	// most one per IP version, as a router's: the source of the ICMP
	// errors it writes into the TUN (host unreachable for a next hop that
	// does not resolve, fragmentation needed or packet too big for a
	// packet over the NIC's MTU). Not the TUN's own address, which the
	// host would drop as a martian. Without one for a version, those
	// errors are not sent (ReplyStats.Silent). With an ingress device,
	// the default is its addresses, and the errors go through the host's
	// stack (raw sockets), which routes them.
	RouterAddrs []netip.Addr

	// Backpressure charges segments to a budget and stops reading the TUN
	// while it is full (the production mode). Off, the queue drops what
	// does not fit instead (an ablation, to show the failure mode).
	Backpressure bool
	Budget       int   // budget limit in truesize bytes; 0: self-sizing up to what the frames hold
	QueueLen     int   // most segments queued or in flight; 0: every TX frame
	TxRate       int64 // emulated line rate in bit/s; 0: none
	Hook         pipeline.Hook
	// GRO merges the packets the NIC hands back into TCP super-packets
	// (and UDP ones when the TUN device took the USO offloads) before
	// they are written into the TUN: one write per super-packet instead
	// of one per packet. It needs the inside's writer to be a
	// pipeline.VectorWriter (a tun.Queue is).
	GRO bool
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

// PortKind is the kind of NIC port a gateway opens.
type PortKind int

// The port kinds.
const (
	PortAuto   PortKind = iota // AF_XDP where the driver runs XDP natively, else AF_PACKET
	PortXDP                    // AF_XDP (dataplane/xsk)
	PortPacket                 // AF_PACKET (dataplane/afpacket)
)

var portNames = [...]string{PortAuto: "auto", PortXDP: "xdp", PortPacket: "packet"}

func (k PortKind) String() string {
	if k >= 0 && int(k) < len(portNames) {
		return portNames[k]
	}
	return fmt.Sprintf("PortKind(%d)", int(k))
}

// DetachPolicy says what the gateway does when its port's program (XDP,
// or tcx ingress for AF_PACKET) is detached from outside (bpftool link
// detach): without it, traffic from the NIC no longer reaches the
// gateway, or (AF_PACKET) reaches the host's stack too.
type DetachPolicy int

// The detach policies.
const (
	DetachReattach DetachPolicy = iota // attach it again, log and count it
	DetachStop                         // stop: Run returns an error wrapping the port's ErrDetached
)

// Host is the inside of a gateway when it is not a TUN device opened by
// the gateway: a benchmark's or a VPN's own reader and writer.
type Host struct {
	Source     pipeline.Source // super-packets, virtio-net header first
	Writer     pipeline.Writer // returning packets, virtio-net header first
	HeaderSize int             // virtio-net header size of both
	Batch      int             // packets per Source.Read; 0: the pipeline's default
	// Close unblocks a Source.Read in progress; the gateway calls it when
	// it stops, and again from Close.
	Close func() error
}

// GatewayStats is a snapshot of a gateway's counters.
type GatewayStats struct {
	Forward pipeline.Stats       // toward the NIC, summed over the forwarders; Drops[DropUnresolved] and [DropNotRouted] from the sinks
	Reverse pipeline.Stats       // toward the ingress device (GatewayConfig.Ingress), the same way
	Wire    pipeline.WireStats   // the packets from the ingress device and from the NIC toward it
	Return  pipeline.ReturnStats // summed over the return paths
	Budget  txqueue.BudgetStats  // summed over the TUN queues' budgets
	Queue   txqueue.Stats        // summed over their queues
	// Sent counts the frames the port handed to the NIC (a super-packet
	// the NIC segments counts once), Completed those the NIC reported
	// gone; frames a sink dropped (Forward.Drops[DropUnresolved]) are in
	// neither, though the forwarder's Transmitted and Completed count
	// them as taken.
	Sent, Completed uint64
	XSK             []xsk.Stats         // per AF_XDP socket, with its queue's XDP program counters
	Packet          []afpacket.Stats    // per AF_PACKET socket
	Ingress         PortStats           // the ingress device's port (GatewayConfig.Ingress)
	Replies         pipeline.ReplyStats // ICMP errors written into the TUN
	NIC             NICStats
}

// PortStats are the counters of a port's sockets: Sent and Completed as
// in GatewayStats, and the sockets' own.
type PortStats struct {
	Sent, Completed uint64
	XSK             []xsk.Stats
	Packet          []afpacket.Stats
}

// NICStats is the NIC as the gateway last saw it.
type NICStats struct {
	Up         bool   // up, with a carrier
	MTU        int    // its MTU, which the forwarders hold segments to
	MTUChanges uint64 // times its MTU changed
	TUNMTU     int    // the TUN device's MTU, kept within the NIC's (0 with a Host)
	Downs      uint64 // times it went down
	Attached   bool   // the port's program (XDP, or tcx for AF_PACKET) is attached
	Detaches   uint64 // times it was found detached from outside
	Reattaches uint64 // times it was attached again
}

// UMEMFrames is the number of UMEM frames, half of them for TX, of each
// AF_XDP socket a gateway with a fixed budget of that many truesize bytes
// opens: enough TX frames to hold the budget plus one worst-case
// super-packet. Without a fixed budget (0) it is xsk.DefaultNumFrames.
// Each frame is xsk.DefaultFrameSize bytes of locked memory.
func UMEMFrames(budget int) int {
	if budget <= 0 {
		return xsk.DefaultNumFrames
	}
	size := txqueue.Truesize(xsk.DefaultFrameSize)
	tx := (budget+size-1)/size + segment.DefaultMaxSegments
	return min(2*tx, xsk.MaxNumFrames)
}
