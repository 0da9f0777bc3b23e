package dataplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"

	"github.com/gsoplane/gsoplane/dataplane/afpacket"
	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/icmp"
	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/dataplane/tun"
	"github.com/gsoplane/gsoplane/dataplane/xsk"
	"github.com/gsoplane/gsoplane/segment"
	"github.com/gsoplane/gsoplane/txqueue"
)

// Gateway forwards between a TUN device (or a Host, or an ingress
// device) and a NIC: super-packets read from the TUN are segmented into
// the NIC port's frames (one forwarder per TUN queue), and packets for
// Routes arriving on the NIC are written into the TUN.
type Gateway struct {
	tun     *tun.Device // nil with a Host or an ingress device
	host    *Host
	inside  []inside
	ingress *nic // GatewayConfig.Ingress's port
	raw     *rawWriter
	nic     *nic
	out     path              // toward the NIC
	back    path              // toward the ingress device
	fanIns  []*pipeline.FanIn // the ingress mode's receive queues read by one forwarder
	rets    []*pipeline.ReturnPath
	budgets []*txqueue.Budget
	queues  []*txqueue.Queue[frame.Frame]
	reply   *icmp.Replier
	mtu     mtuFollower
	mon     *monitor
}

// path is the forwarders toward one port.
type path struct {
	fwds  []*pipeline.Forwarder
	sinks []nicSink
	wires []*pipeline.WireSource // their sources, when packets come from a wire
}

// add runs a forwarder from src, whose virtio-net headers are hdrSize
// bytes, to a sink on l (see newForwarder).
func (p *path) add(g *Gateway, cfg GatewayConfig, src frame.Source, hdrSize int, l lane) error {
	sink, err := l.newSink()
	if err != nil {
		return err
	}
	sink.SetReplier(g.reply)
	p.sinks = append(p.sinks, sink)
	f, err := g.newForwarder(cfg, src, hdrSize, sink, l)
	if err != nil {
		return err
	}
	p.fwds = append(p.fwds, f)
	return nil
}

// stats sums the forwarders' counters and the sinks' drops and host
// control frames.
func (p *path) stats() (pipeline.Stats, pipeline.WireStats) {
	var s pipeline.Stats
	var w pipeline.WireStats
	for _, f := range p.fwds {
		s = s.Add(f.Stats())
	}
	for _, k := range p.sinks {
		d := k.Drops()
		s.Drops[frame.DropUnresolved] += d[frame.DropUnresolved]
		s.Drops[frame.DropNotRouted] += d[frame.DropNotRouted]
		s.HostControl += k.HostControl()
	}
	for _, x := range p.wires {
		w.Add(x.Stats())
	}
	return s, w
}

// close stops the sinks' next-hop resolvers.
func (p *path) close() {
	for _, s := range p.sinks {
		s.Close()
	}
}

// inside is one queue of the TUN device or the Host.
type inside struct {
	src frame.Source
	w   frame.Writer
}

// OpenGateway opens the TUN device (unless cfg.Host or cfg.Ingress is
// set) and the NIC port and wires them together. Call it in the network
// namespace of the devices.
func OpenGateway(cfg GatewayConfig) (*Gateway, error) {
	g := &Gateway{host: cfg.Host}
	if cfg.Ingress.Device == "" {
		if err := g.openInside(cfg); err != nil {
			return nil, err
		}
	}
	if err := g.open(cfg); err != nil {
		return nil, errors.Join(err, g.Close())
	}
	g.logTUN(cfg)
	return g, nil
}

// openInside opens the TUN device, or takes the Host.
func (g *Gateway) openInside(cfg GatewayConfig) error {
	if h := cfg.Host; h != nil {
		if h.Source == nil || h.Writer == nil || h.Close == nil {
			return fmt.Errorf("dataplane: %w: a Host needs a Source, a Writer and Close", ErrInvalidConfig)
		}
		g.inside = []inside{{h.Source, h.Writer}}
		return nil
	}
	t, err := tun.Open(tunConfig(cfg.TUN))
	if err != nil {
		return err
	}
	g.tun = t
	for _, q := range t.Queues() {
		g.inside = append(g.inside, inside{q, q})
	}
	return nil
}

// logTUN says, once the gateway is open, that its TUN device takes no
// UDP-tunnel super-packets, on a kernel before Linux 6.17 (a gateway
// that fails to open logs nothing).
func (g *Gateway) logTUN(cfg GatewayConfig) {
	if t := g.tun; t != nil && !cfg.TUN.DisableOffload && !t.Offloads().Has(tun.OffloadUDPTunnel) {
		logger(cfg).Info("the TUN device takes no UDP-tunnel super-packets (TUN_F_UDP_TUNNEL_GSO needs Linux 6.17): the kernel cuts VXLAN and Geneve traffic before it",
			"tun", t.Name(), "offloads", t.Offloads().String())
	}
}

// tunConfig is the configuration of the TUN device o describes: with the
// noqueue qdisc, so that its drops reach the senders, and the 24-byte
// virtio-net header, with which the kernel hands over UDP-tunnel
// super-packets where it can (Linux 6.17); every port's received frames
// have room for it in front of the IP packet.
func tunConfig(o TUNOptions) tun.Config {
	return tun.Config{Name: o.Name, Queues: o.Queues, MTU: o.MTU, Offload: !o.DisableOffload, TxQueueLen: o.TxQueueLen, NoQueue: true,
		HeaderSize: segment.HeaderSizeTunnel}
}

// OpenTUNHost opens the TUN device o describes, as OpenGateway would, and
// returns its first queue as a Host: for a caller that reads or writes
// the device through its own code before handing it to a gateway. Its
// packets come behind the 24-byte virtio-net header
// (segment.HeaderSizeTunnel, Host.HeaderSize), whose last 14 bytes a
// kernel before Linux 6.17 leaves as they were in the caller's buffer.
func OpenTUNHost(o TUNOptions) (*Host, error) {
	t, err := tun.Open(tunConfig(o))
	if err != nil {
		return nil, err
	}
	q := t.Queues()[0]
	return &Host{Source: q, Writer: q, HeaderSize: t.HeaderSize(), Close: t.Close}, nil
}

// batch is how many packets the forwarders read at once.
func (g *Gateway) batch() int {
	if g.host != nil {
		return g.host.Batch
	}
	return 0
}

// headerSize is the virtio-net header size of the inside.
func (g *Gateway) headerSize() int {
	if g.host != nil {
		return g.host.HeaderSize
	}
	return g.tun.HeaderSize()
}

func (g *Gateway) open(cfg GatewayConfig) error {
	if len(g.inside) > 1 && cfg.QueueLen > 0 {
		return fmt.Errorf("dataplane: %w: QueueLen is per TUN queue", ErrInvalidConfig)
	}
	log := logger(cfg)
	n, err := openNIC(cfg, log)
	if err != nil {
		return err
	}
	g.nic = n
	g.mtu = mtuFollower{g: g, log: log}
	if g.mon, err = newMonitor(n, cfg, log, g.linkUp, g.mtu.follow, g.followMAC); err != nil {
		return err
	}
	if cfg.Ingress.Device != "" {
		err = g.openIngress(cfg, log)
	} else {
		err = g.wireInside(cfg)
	}
	if err != nil {
		return err
	}
	g.linkUp(g.mon.stats().Up)
	return g.mtu.start(g.mon.stats().MTU)
}

// wireInside runs a forwarder from each TUN queue (or the Host) to a NIC
// queue, and a return path from each NIC queue into the inside.
func (g *Gateway) wireInside(cfg GatewayConfig) error {
	n := g.nic
	g.reply = icmp.NewReplier(g.inside[0].w, g.headerSize(), routerAddr(cfg, true), routerAddr(cfg, false))
	if len(g.inside) > len(n.lanes) {
		return fmt.Errorf("dataplane: %w: %d TUN queues, %d NIC queues", ErrInvalidConfig, len(g.inside), len(n.lanes))
	}
	for i, in := range g.inside {
		if err := g.out.add(g, cfg, in.src, g.headerSize(), n.lanes[i]); err != nil {
			return err
		}
	}
	for i, l := range n.lanes {
		r, err := pipeline.NewReturnPath(g.returnConfig(cfg, l, g.inside[i%len(g.inside)].w))
		if err != nil {
			return err
		}
		g.rets = append(g.rets, r)
	}
	return nil
}

// logger is cfg.Log, or a logger that discards.
func logger(cfg GatewayConfig) *slog.Logger {
	if cfg.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return cfg.Log
}

// linkUp tells the NIC's sinks whether it is up.
func (g *Gateway) linkUp(up bool) {
	for _, s := range g.out.sinks {
		s.SetLinkUp(up)
	}
}

// followMAC makes the NIC's sinks send from mac, the NIC's new MAC
// address, and has an AF_XDP port's XDP program, which takes only frames
// sent to the address it was loaded with, loaded for it and swapped in.
// (The AF_PACKET port's tcx program takes the frames the kernel marks
// PACKET_HOST, which it tells from the device's address of the moment:
// it follows by itself.)
func (g *Gateway) followMAC(mac net.HardwareAddr) error {
	for _, s := range g.out.sinks {
		s.SetMAC(mac)
	}
	if x := g.XDP(); x != nil {
		return x.FollowMAC(mac)
	}
	return nil
}

// routerAddr returns the first of cfg.RouterAddrs of the IP version.
func routerAddr(cfg GatewayConfig, v4 bool) netip.Addr { return firstOf(cfg.RouterAddrs, v4) }

// firstOf returns the first of addrs of the IP version.
func firstOf(addrs []netip.Addr, v4 bool) netip.Addr {
	for _, a := range addrs {
		if a = a.Unmap(); a.Is4() == v4 {
			return a
		}
	}
	return netip.Addr{}
}

// returnConfig configures the return path from l into w: GRO merges TCP,
// and UDP too when the TUN device takes USO super-packets.
func (g *Gateway) returnConfig(cfg GatewayConfig, l lane, w frame.Writer) pipeline.ReturnConfig {
	log := logger(cfg)
	uso := g.tun != nil && g.tun.Offloads().Has(tun.OffloadUSO4|tun.OffloadUSO6)
	return pipeline.ReturnConfig{
		Receiver: l.recv, Writer: w, HeaderSize: g.headerSize(),
		TCP: !cfg.DisableGRO, UDP: !cfg.DisableGRO && uso, Inside: cfg.Routes,
		OnRefused: func(kind segment.GSOType, err error) {
			log.Warn("the TUN device refused a GRO super-packet: this kind of merge is off, its packets go one by one",
				"kind", kind.String(), "err", err)
		},
	}
}

// newForwarder returns a forwarder from src to sink, a sink on l, with
// its own budget and queue.
func (g *Gateway) newForwarder(cfg GatewayConfig, src frame.Source, hdrSize int, sink nicSink, l lane) (*pipeline.Forwarder, error) {
	budget, queue, err := newAccounting(cfg, l)
	if err != nil {
		return nil, err
	}
	g.budgets, g.queues = append(g.budgets, budget), append(g.queues, queue)
	return pipeline.NewForwarder(pipeline.ForwarderConfig{
		Source: src, HeaderSize: hdrSize, Sink: sink, FrameSize: l.frameSize,
		Budget: budget, Queue: queue, Hook: cfg.Hook, TxRate: cfg.TxRate, DrainTime: cfg.DrainTimeout,
		Batch: g.batch(), Replier: g.reply,
	})
}

// newAccounting returns the budget and the queue in front of l, sized
// from its TX frames and cfg's DisableBackpressure, Budget and QueueLen:
// without backpressure no budget and a DropTail queue.
func newAccounting(cfg GatewayConfig, l lane) (*txqueue.Budget, *txqueue.Queue[frame.Frame], error) {
	frames := l.frames
	size := txqueue.Truesize(l.frameSize)
	qlen := frames
	if cfg.QueueLen > frames {
		return nil, nil, fmt.Errorf("dataplane: %w: QueueLen %d is more than the %d TX frames", ErrInvalidConfig, cfg.QueueLen, frames)
	}
	if cfg.QueueLen > 0 {
		qlen = cfg.QueueLen
	}
	if cfg.DisableBackpressure {
		q, err := txqueue.NewQueue[frame.Frame](txqueue.QueueConfig{Policy: txqueue.DropTail, Packets: qlen, Bytes: qlen * size})
		return nil, q, err
	}
	burst := frame.BurstSegments * size
	limit := cfg.Budget
	if limit <= 0 {
		limit = max(qlen*size, burst)
	}
	b, err := txqueue.NewBudget(txqueue.BudgetConfig{Burst: burst, Limit: limit, Fixed: cfg.Budget > 0})
	if err != nil {
		return nil, nil, fmt.Errorf("dataplane: %w: %w", ErrInvalidConfig, err)
	}
	q, err := txqueue.NewQueue[frame.Frame](txqueue.QueueConfig{Policy: txqueue.Block, Packets: qlen, Bytes: limit + burst})
	return b, q, err
}

// Run forwards in both directions until ctx ends or a part fails, then
// stops reading, drains the queues and returns the failure, if any.
func (g *Gateway) Run(parent context.Context) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	var wg sync.WaitGroup
	runs := append(append([]*pipeline.Forwarder(nil), g.out.fwds...), g.back.fwds...)
	errs := make([]error, len(runs)+len(g.rets)+1)
	start := func(i int, run func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = run(ctx); errs[i] != nil {
				cancel()
			}
		}()
	}
	for i, f := range runs {
		start(i, f.Run)
	}
	for i, r := range g.rets {
		start(len(runs)+i, r.Run)
	}
	start(len(errs)-1, g.mon.run)
	<-ctx.Done()
	g.closeInside()          // wakes the producers blocked in Read
	g.nic.port.StopReceive() // and the return paths waiting for frames
	wg.Wait()
	for i := range errs {
		if parent.Err() != nil && errors.Is(errs[i], pipeline.ErrSourceClosed) {
			errs[i] = nil // the TUN was closed to stop
		}
	}
	return errors.Join(errs...)
}

// closeInside closes the TUN device or the Host, or stops receiving on
// the ingress device.
func (g *Gateway) closeInside() error {
	switch {
	case g.host != nil:
		return g.host.Close()
	case g.tun != nil:
		return g.tun.Close()
	case g.ingress != nil:
		g.ingress.port.StopReceive()
	}
	return nil
}

// Close detaches the port's program, closes the sockets and the TUN
// device (removing it if it was created) and releases what is still
// queued.
func (g *Gateway) Close() error {
	var errs []error
	for _, q := range g.queues {
		q.Close()
	}
	g.out.close()
	g.back.close()
	if g.mon != nil {
		g.mon.close()
	}
	g.mtu.close()
	errs = append(errs, g.ClosePorts())
	for _, f := range g.fanIns {
		f.Close()
	}
	if g.raw != nil {
		g.raw.close()
	}
	errs = append(errs, g.closeInside())
	return errors.Join(errs...)
}

// ClosePorts closes the NIC port and the ingress device's at once, their
// programs taken off the interfaces and their sockets closed, without
// stopping the dataplane first: for a process about to exit without
// Close, such as udpfwd on a second signal. The kernel removes a program
// the process holds by a BPF link (XDP, tcx) when it exits, but keeps a
// cls_bpf filter (the AF_PACKET port's before Linux 6.6), which would
// go on taking the redirected prefixes' packets from the host. Close
// closes the ports too.
func (g *Gateway) ClosePorts() error {
	var errs []error
	for _, n := range []*nic{g.nic, g.ingress} {
		if n != nil {
			errs = append(errs, n.port.Close())
		}
	}
	return errors.Join(errs...)
}

// TUN returns the gateway's TUN device (nil with a Host).
func (g *Gateway) TUN() *tun.Device { return g.tun }

// Port returns the kind of the gateway's NIC port: PortXDP or
// PortPacket.
func (g *Gateway) Port() PortKind { return g.nic.kind }

// XDP returns the gateway's AF_XDP port, nil if it has another.
func (g *Gateway) XDP() *xsk.Port {
	p, _ := g.nic.port.(*xsk.Port)
	return p
}

// Packet returns the gateway's AF_PACKET port, nil if it has another.
func (g *Gateway) Packet() *afpacket.Port {
	p, _ := g.nic.port.(*afpacket.Port)
	return p
}

// Ifindex returns the NIC's interface index.
func (g *Gateway) Ifindex() int { return g.nic.port.Ifindex() }

// Queues returns the number of queues of the NIC port.
func (g *Gateway) Queues() int { return len(g.nic.lanes) }

// Pulses returns the pulses of the gateway's forwarding loops, in the
// same order at each call: each forwarder's producer and sink loop, then
// each return path's. pipeline.Alive, given two calls' pulses, tells
// whether all of them came round, or waited for work, in between: a
// watchdog that wants to know that the gateway forwards, not only that
// it answers.
func (g *Gateway) Pulses() []pipeline.Pulse {
	var ps []pipeline.Pulse
	for _, fwds := range [][]*pipeline.Forwarder{g.out.fwds, g.back.fwds} {
		for _, f := range fwds {
			p := f.Pulses()
			ps = append(ps, p[:]...)
		}
	}
	for _, r := range g.rets {
		ps = append(ps, r.Pulse())
	}
	return ps
}

// Stats returns a snapshot of the gateway's counters.
func (g *Gateway) Stats() GatewayStats {
	var s GatewayStats
	var in, back pipeline.WireStats
	s.Forward, in = g.out.stats()
	s.Reverse, back = g.back.stats()
	s.Wire = in
	s.Wire.Add(back)
	for _, r := range g.rets {
		s.Return = s.Return.Add(r.Stats())
	}
	for i, q := range g.queues {
		s.Queue = s.Queue.Add(q.Stats())
		if b := g.budgets[i]; b != nil {
			s.Budget = s.Budget.Add(b.Stats())
		}
	}
	if g.nic != nil {
		s.Port = g.nic.stats()
	}
	if g.ingress != nil {
		s.Ingress = g.ingress.stats()
	}
	if g.reply != nil {
		s.Replies = g.reply.Stats()
	}
	if g.mon != nil {
		s.NIC = g.mon.stats()
		s.NIC.TUNMTU = int(g.mtu.tun.Load())
		s.NIC.SendMTU = int(g.mtu.send.Load())
	}
	return s
}
