package dataplane

import (
	"log/slog"
	"net/netip"
	"time"

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
	NIC  string
	// Routes are the prefixes behind the TUN device: packets arriving on
	// the NIC for them are taken from the kernel and written into the TUN.
	Routes   []netip.Prefix
	NextHop  netip.Addr // the NIC-side gateway; zero: each destination's route through the NIC
	Mode     xsk.Mode
	ZeroCopy bool

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

// DetachPolicy says what the gateway does when its XDP program is
// detached from outside (bpftool link detach): without it, traffic from
// the NIC no longer reaches the gateway.
type DetachPolicy int

// The detach policies.
const (
	DetachReattach DetachPolicy = iota // attach it again, log and count it
	DetachStop                         // stop: Run returns an error wrapping xsk.ErrDetached
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
	Forward pipeline.Stats       // summed over the forwarders; Drops[DropUnresolved] from the sinks
	Return  pipeline.ReturnStats // summed over the return paths
	Budget  txqueue.BudgetStats  // summed over the TUN queues' budgets
	Queue   txqueue.Stats        // summed over their queues
	XSK     []xsk.Stats          // per AF_XDP socket
	NIC     NICStats
}

// NICStats is the NIC as the gateway last saw it.
type NICStats struct {
	Up          bool   // up, with a carrier
	MTU         int    // its MTU
	Downs       uint64 // times it went down
	XDPAttached bool   // the XDP program is attached
	Detaches    uint64 // times the XDP program was found detached from outside
	Reattaches  uint64 // times it was attached again
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
