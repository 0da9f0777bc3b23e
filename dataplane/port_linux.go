package dataplane

import (
	"errors"
	"fmt"
	"log/slog"
	"net"

	"github.com/gsoplane/gsoplane/dataplane/afpacket"
	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/xsk"
	"github.com/gsoplane/gsoplane/internal/ethernet"
	"github.com/gsoplane/gsoplane/internal/ethtool"
	"github.com/gsoplane/gsoplane/txqueue"
)

// nicPort is the gateway's side of the NIC: an AF_XDP or an AF_PACKET
// port, each with a program in the kernel that steers the routed
// prefixes' packets to it.
type nicPort interface {
	Ifindex() int
	Attached() (bool, error)
	Reattach() error
	StopReceive()
	Close() error
}

// nicSink is what the gateway needs of a port's sink.
type nicSink interface {
	frame.Sink
	SetReplier(r frame.Replier)
	SetLinkUp(up bool)
	SetMAC(mac net.HardwareAddr)
	Drops() frame.Drops
	HostControl() uint64
	Close()
}

// nic is the open port and what the gateway needs of each of its queues.
type nic struct {
	port     nicPort
	kind     PortKind // PortXDP or PortPacket
	program  string   // the kernel program that steers packets, for logs
	detached error    // the port's ErrDetached
	lanes    []lane
	// maxPacket is the longest IP packet the port sends in one frame: a
	// UMEM frame less the Ethernet header (AF_XDP), a small frame less
	// the headroom (AF_PACKET, sized from the MTU at open).
	maxPacket int
}

// lane is one queue of the NIC port.
type lane struct {
	recv      frame.Receiver
	frameSize int // of a TX frame, for truesize
	frames    int // TX frames: the most segments in flight
	newSink   func() (nicSink, error)
}

// openNIC opens the port cfg asks for, or for PortAuto the fastest the
// NIC allows (see PortAuto), and logs one line: which port, in which
// mode, and why.
func openNIC(cfg GatewayConfig, log *slog.Logger) (*nic, error) {
	if err := checkXDPOptions(cfg); err != nil {
		return nil, err
	}
	switch cfg.Port {
	case PortXDP:
		return openXDPAsked(cfg, log)
	case PortPacket:
		return openPacket(cfg, log, "asked for")
	case PortAuto:
		return openAuto(cfg, log)
	}
	return nil, fmt.Errorf("dataplane: %w: port %v", ErrInvalidConfig, cfg.Port)
}

// checkXDPOptions refuses AF_XDP options that cannot apply.
func checkXDPOptions(cfg GatewayConfig) error {
	x := cfg.XDP
	switch {
	case x.ZeroCopy < XDPZeroCopyAuto || x.ZeroCopy > XDPZeroCopyOff:
		return fmt.Errorf("dataplane: %w: zero-copy %v", ErrInvalidConfig, x.ZeroCopy)
	case cfg.Port == PortPacket && x.BusyPoll != 0:
		return fmt.Errorf("dataplane: %w: busy polling (%v) is for AF_XDP sockets, not AF_PACKET", ErrInvalidConfig, x.BusyPoll)
	case cfg.Port == PortPacket && x.ZeroCopy == XDPZeroCopyOn:
		return fmt.Errorf("dataplane: %w: zero-copy is for AF_XDP sockets, not AF_PACKET", ErrInvalidConfig)
	case x.Mode == xsk.ModeGeneric && x.ZeroCopy == XDPZeroCopyOn:
		return fmt.Errorf("dataplane: %w: zero-copy needs the XDP program in the driver, not generic mode", ErrInvalidConfig)
	}
	return nil
}

// copyModeMeasured is why PortAuto leaves AF_XDP copy mode to PortXDP:
// what it was measured at (docs/udpfwd.md, "Choosing the port").
const copyModeMeasured = "AF_XDP copy mode measured at 0.53–0.67× AF_PACKET offload (TCP, veth, two quiet runs)"

// openAuto opens AF_XDP with zero-copy sockets where the driver takes
// them, else AF_PACKET.
func openAuto(cfg GatewayConfig, log *slog.Logger) (*nic, error) {
	n, whyNot, err := openZeroCopy(cfg, log, "the driver takes AF_XDP zero-copy")
	if n != nil || err != nil {
		return n, err
	}
	if cfg.XDP.BusyPoll != 0 {
		log.Warn("busy polling is off: it is for AF_XDP sockets", "nic", cfg.NIC, "busy_poll", cfg.XDP.BusyPoll)
	}
	return openPacket(cfg, log, whyNot+"; "+copyModeMeasured)
}

// openXDPAsked opens the AF_XDP port PortXDP asks for: with zero-copy
// sockets, else in copy mode.
func openXDPAsked(cfg GatewayConfig, log *slog.Logger) (*nic, error) {
	n, whyNot, err := openZeroCopy(cfg, log, "asked for")
	if n != nil || err != nil {
		return n, err
	}
	return openXDP(cfg, log, false, "asked for; "+whyNot)
}

// openZeroCopy opens AF_XDP with zero-copy sockets, logging why (why),
// unless they are off or cannot be (generic mode). Where it opens
// nothing and that is no error (zero-copy was not insisted on, and the
// failure is one another port or mode escapes), it says why not.
func openZeroCopy(cfg GatewayConfig, log *slog.Logger, why string) (n *nic, whyNot string, err error) {
	switch {
	case cfg.XDP.ZeroCopy == XDPZeroCopyOff:
		return nil, "zero-copy off", nil
	case cfg.XDP.Mode == xsk.ModeGeneric:
		return nil, "zero-copy needs the XDP program in the driver, not generic mode", nil
	}
	n, err = openXDP(cfg, log, true, why)
	if err == nil || fatal(err) || cfg.XDP.ZeroCopy == XDPZeroCopyOn {
		return n, "", err
	}
	return nil, noZeroCopy(cfg.NIC, err), nil
}

// fatal reports whether an AF_XDP port failed for a reason no other
// port or mode escapes: the configuration, the device, another XDP
// program, busy polling refused.
func fatal(err error) bool {
	return errors.Is(err, ErrInvalidConfig) || errors.Is(err, ErrNoDevice) ||
		errors.Is(err, xsk.ErrAttached) || errors.Is(err, xsk.ErrNoBusyPoll)
}

// noZeroCopy says why zero-copy sockets did not open on ifname.
func noZeroCopy(ifname string, err error) string {
	driver, derr := ethtool.Driver(ifname)
	if derr != nil {
		driver = "unknown"
	}
	if errors.Is(err, xsk.ErrZeroCopy) {
		return fmt.Sprintf("driver %s has no AF_XDP zero-copy", driver)
	}
	return fmt.Sprintf("no AF_XDP zero-copy on driver %s: %v", driver, err)
}

// openXDP opens an AF_XDP port, with zero-copy sockets (the program in
// the driver) or in copy mode, and logs it and why.
func openXDP(cfg GatewayConfig, log *slog.Logger, zeroCopy bool, why string) (*nic, error) {
	mode, how := cfg.XDP.Mode, "copy mode"
	if zeroCopy {
		mode, how = xsk.ModeNative, "zero-copy"
	}
	x, err := xsk.Open(xsk.Config{
		Ifname: cfg.NIC, Mode: mode, ZeroCopy: zeroCopy, Redirect: cfg.Routes, NumFrames: UMEMFrames(cfg.Budget),
		BusyPoll: cfg.XDP.BusyPoll, DisableTXChecksum: cfg.XDP.DisableTXChecksum,
	})
	if err != nil {
		return nil, err
	}
	log.Info("NIC port: AF_XDP "+how, "nic", cfg.NIC, "why", why, "xdp_mode", x.Mode().String(), "busy_poll", cfg.XDP.BusyPoll,
		"multi_buffer", x.MultiBuffer())
	warnNoMultiBuffer(cfg.NIC, x, log)
	n := &nic{port: x, kind: PortXDP, program: "XDP program", detached: xsk.ErrDetached}
	for _, s := range x.Sockets() {
		n.maxPacket = s.MaxTXFrame() - ethernet.HeaderLen
		n.lanes = append(n.lanes, lane{
			recv: s.Receiver(), frameSize: s.FrameSize(), frames: s.NumFrames() / 2, // every TX frame is free yet
			newSink: func() (nicSink, error) { return xsk.NewSink(s, x.Ifindex(), cfg.NextHop) },
		})
	}
	return n, nil
}

// warnNoMultiBuffer warns when the AF_XDP port has no multi-buffer
// (before Linux 6.6, or a driver without it) and the device's MTU makes
// frames longer than one UMEM frame holds: those go to the host's
// stack, past the gateway. The AF_PACKET port takes them.
func warnNoMultiBuffer(ifname string, x *xsk.Port, log *slog.Logger) {
	socks := x.Sockets()
	if x.MultiBuffer() || len(socks) == 0 {
		return
	}
	mtu, _, err := linkOf(ifname)
	if max := socks[0].MaxRXFrame(); err == nil && mtu+ethernet.HeaderLen > max {
		log.Warn("AF_XDP without multi-buffer (XDP_USE_SG: Linux 6.6 and a driver that has it): frames longer than one UMEM frame go to the host's stack, not through the gateway; the AF_PACKET port takes them (udpfwd -port packet)",
			"nic", ifname, "mtu", mtu, "max_frame", max)
	}
}

// openPacket opens an AF_PACKET port and logs it: what it leaves to
// the NIC, why it is the port (why) and how its ingress program is
// attached, and why that way.
func openPacket(cfg GatewayConfig, log *slog.Logger, why string) (*nic, error) {
	p, err := afpacket.Open(afpacket.Config{
		Ifname: cfg.NIC, Redirect: cfg.Routes, Frames: packetFrames(cfg.Budget), HostFilter: cfg.Packet.HostFilter,
	})
	if err != nil {
		return nil, err
	}
	plan, err := p.GSOPlan(cfg.Packet.GSO)
	if err != nil {
		return nil, errors.Join(err, p.Close())
	}
	filter, filterWhy := p.HostFilter()
	log.Info("NIC port: AF_PACKET "+plan, "nic", cfg.NIC, "why", why, "gso", cfg.Packet.GSO.String(),
		"host_filter", filter.String(), "host_filter_why", filterWhy)
	if n := p.Leftovers(); n > 0 {
		log.Warn("deleted the cls_bpf ingress filter (gsoplane-afpacket) a killed gateway left on the NIC: it dropped the redirected packets meanwhile",
			"nic", cfg.NIC, "filters", n)
	}
	program := "tcx ingress program"
	if filter == afpacket.HostFilterClsact {
		program = "cls_bpf ingress filter"
	}
	n := &nic{port: p, kind: PortPacket, program: program, detached: afpacket.ErrDetached}
	for _, s := range p.Sockets() {
		n.maxPacket = s.FrameSize() - afpacket.Headroom
		n.lanes = append(n.lanes, lane{
			recv: s.Receiver(), frameSize: s.FrameSize(), frames: s.Frames() + s.LargeFrames(),
			newSink: func() (nicSink, error) { return afpacket.NewSink(s, p.Ifindex(), cfg.NextHop, cfg.Packet.GSO) },
		})
	}
	return n, nil
}

// packetFrames is the number of small TX frames of each AF_PACKET socket
// for a fixed budget: as UMEMFrames, with frames of at least
// afpacket.MinFrameSize; 0 (the default) without one.
func packetFrames(budget int) int {
	if budget <= 0 {
		return 0
	}
	size := txqueue.Truesize(afpacket.MinFrameSize)
	return min((budget+size-1)/size+frame.BurstSegments, afpacket.MaxFrames)
}

// stats returns the counters of the port's sockets.
func (n *nic) stats() PortStats {
	s := PortStats{Kind: n.kind}
	switch p := n.port.(type) {
	case *xsk.Port:
		for _, x := range p.Stats() {
			s.Sockets = append(s.Sockets, xskSocketStats(x))
		}
	case *afpacket.Port:
		for _, k := range p.Sockets() {
			s.Sockets = append(s.Sockets, packetSocketStats(k.Stats()))
		}
	}
	for _, k := range s.Sockets {
		s.Sent += k.TX
		s.Completed += k.Completed
	}
	return s
}

// xskSocketStats maps an AF_XDP socket's counters, with its queue's XDP
// program counters.
func xskSocketStats(x xsk.Stats) SocketStats {
	return SocketStats{RX: x.RX, TX: x.TX, Completed: x.Completed, Counters: x.AppendCounters(nil)}
}

// packetSocketStats maps an AF_PACKET socket's counters. A frame is
// complete once the kernel has copied it.
func packetSocketStats(p afpacket.Stats) SocketStats {
	return SocketStats{RX: p.RX, TX: p.TX, Completed: p.TX, Counters: p.AppendCounters(nil)}
}
