package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/gsoplane/gsoplane/segment"
	"github.com/gsoplane/gsoplane/txqueue"
	"github.com/vishvananda/netlink"
)

// GatewayConfig describes a gateway between a TUN device and a NIC.
type GatewayConfig struct {
	TUN TUNConfig // TUN.Offload on: the kernel hands over super-packets (GSO on)
	NIC string
	// Routes are the prefixes behind the TUN device: packets arriving on
	// the NIC for them are taken from the kernel and written into the TUN.
	Routes   []netip.Prefix
	NextHop  netip.Addr // the NIC-side gateway; zero: each destination's route through the NIC
	Mode     XDPMode
	ZeroCopy bool

	// Backpressure charges segments to a budget and stops reading the TUN
	// while it is full (the production mode). Off, the queue drops what
	// does not fit instead (an ablation, to show the failure mode).
	Backpressure bool
	// TUNQueueLen sets the TUN device's txqueuelen, the ring of packets
	// the kernel holds for the reader; with offloads each entry can be a
	// 64 KiB super-packet. A short ring reaches UDP senders sooner when
	// the budget stops the reader, but TCP, which fills any buffer, then
	// meets local drops and slows down. 0 keeps the kernel's (500).
	TUNQueueLen int
	Budget      int   // budget limit in truesize bytes; 0: self-sizing up to what the frames hold
	QueueLen    int   // most segments queued or in flight; 0: every TX frame
	TxRate      int64 // emulated line rate in bit/s; 0: none
	Hook        Hook
	// DrainTimeout bounds how long Run, once ctx ends, sends what is
	// queued; 0: DefaultDrainTime.
	DrainTimeout time.Duration
}

// Gateway forwards between a TUN device and a NIC: super-packets read from
// the TUN are segmented into AF_XDP frames (one forwarder per TUN queue),
// and packets for Routes arriving on the NIC are written into the TUN.
type Gateway struct {
	tun     *TUN
	xdp     *XDPPort
	sinks   []*XSKSink
	fwds    []*Forwarder
	rets    []*ReturnPath
	budgets []*txqueue.Budget
	queues  []*txqueue.Queue[Frame]
}

// GatewayStats is a snapshot of a gateway's counters.
type GatewayStats struct {
	Forward    Stats // summed over the forwarders
	Return     ReturnStats
	Unresolved uint64              // segments dropped for want of a next hop
	Budget     txqueue.BudgetStats // summed over the TUN queues' budgets
	Queue      txqueue.Stats       // summed over their queues
	XSK        []XSKStats
}

// OpenGateway opens the TUN device and the AF_XDP port and wires them
// together. Call it in the network namespace of the devices.
func OpenGateway(cfg GatewayConfig) (*Gateway, error) {
	tun, err := OpenTUN(cfg.TUN)
	if err != nil {
		return nil, err
	}
	g := &Gateway{tun: tun}
	if err := g.open(cfg); err != nil {
		return nil, errors.Join(err, g.Close())
	}
	return g, nil
}

func (g *Gateway) open(cfg GatewayConfig) error {
	if len(g.tun.Queues()) > 1 && cfg.QueueLen > 0 {
		return fmt.Errorf("dataplane: %w: QueueLen is per TUN queue", ErrInvalidConfig)
	}
	if err := SetTUNQueue(g.tun.Index(), cfg.TUNQueueLen); err != nil {
		return err
	}
	xdp, err := OpenXDP(XDPConfig{Ifname: cfg.NIC, Mode: cfg.Mode, ZeroCopy: cfg.ZeroCopy, Redirect: cfg.Routes, NumFrames: umemFrames(cfg.Budget)})
	if err != nil {
		return err
	}
	g.xdp = xdp
	socks := xdp.Sockets()
	if len(g.tun.Queues()) > len(socks) {
		return fmt.Errorf("dataplane: %w: %d TUN queues, %d NIC queues", ErrInvalidConfig, len(g.tun.Queues()), len(socks))
	}
	for i, q := range g.tun.Queues() {
		if err := g.addForwarder(cfg, q, socks[i]); err != nil {
			return err
		}
	}
	for i, x := range socks {
		g.rets = append(g.rets, NewReturnPath(x, g.tun.Queues()[i%len(g.tun.Queues())], g.tun.HeaderSize()))
	}
	return nil
}

// SetTUNQueue sets a TUN device's ring length (if qlen > 0) and gives it
// the noqueue qdisc, as OpenGateway does.
// The TUN driver releases each packet's charge to its sending socket when
// it rings it, and drops packets when its reader falls behind, so a
// stalled reader cannot block a sender. Without a qdisc in front, the drop
// is reported to the sending socket at once (ENOBUFS for UDP with
// IP_RECVERR, local congestion for TCP) instead of vanishing silently.
func SetTUNQueue(ifindex, qlen int) error {
	if qlen > 0 {
		link, err := netlink.LinkByIndex(ifindex)
		if err == nil {
			err = netlink.LinkSetTxQLen(link, qlen)
		}
		if err != nil {
			return fmt.Errorf("dataplane: TUN txqueuelen %d: %w", qlen, err)
		}
	}
	q := &netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ifindex, Parent: netlink.HANDLE_ROOT}, QdiscType: "noqueue"}
	if err := netlink.QdiscReplace(q); err != nil {
		return fmt.Errorf("dataplane: noqueue qdisc on the TUN device: %w", err)
	}
	return nil
}

// addForwarder wires one TUN queue to one AF_XDP socket.
func (g *Gateway) addForwarder(cfg GatewayConfig, src *TUNQueue, x *XSK) error {
	sink, err := NewXSKSink(x, g.xdp.Ifindex(), cfg.NextHop)
	if err != nil {
		return err
	}
	g.sinks = append(g.sinks, sink)
	budget, queue, err := NewAccounting(cfg, x)
	if err != nil {
		return err
	}
	g.budgets, g.queues = append(g.budgets, budget), append(g.queues, queue)
	f, err := NewForwarder(ForwarderConfig{
		Source: src, HeaderSize: g.tun.HeaderSize(), Sink: sink, FrameSize: x.FrameSize(),
		Budget: budget, Queue: queue, Hook: cfg.Hook, TxRate: cfg.TxRate, DrainTime: cfg.DrainTimeout,
	})
	if err != nil {
		return err
	}
	g.fwds = append(g.fwds, f)
	return nil
}

// umemFrames sizes each socket's UMEM from a fixed budget: enough TX
// frames to hold the budget plus one worst-case super-packet, and as many
// RX frames. 0 (no fixed budget) keeps the AF_XDP port's default.
func umemFrames(budget int) int {
	if budget <= 0 {
		return 0
	}
	tx := (budget+txqueue.Truesize(DefaultXDPFrameSize)-1)/txqueue.Truesize(DefaultXDPFrameSize) + segment.DefaultMaxSegments
	return min(2*tx, MaxXDPNumFrames)
}

// NewAccounting returns the budget and the queue OpenGateway puts in front
// of x, sized from its TX frames and cfg's Backpressure, Budget and
// QueueLen: without backpressure no budget and a DropTail queue.
func NewAccounting(cfg GatewayConfig, x *XSK) (*txqueue.Budget, *txqueue.Queue[Frame], error) {
	frames := x.TXFree()
	size := txqueue.Truesize(x.FrameSize())
	qlen := frames
	if cfg.QueueLen > frames {
		return nil, nil, fmt.Errorf("dataplane: %w: QueueLen %d is more than the %d TX frames", ErrInvalidConfig, cfg.QueueLen, frames)
	}
	if cfg.QueueLen > 0 {
		qlen = cfg.QueueLen
	}
	if !cfg.Backpressure {
		q, err := txqueue.NewQueue[Frame](txqueue.QueueConfig{Policy: txqueue.DropTail, Packets: qlen, Bytes: qlen * size})
		return nil, q, err
	}
	burst := segment.DefaultMaxSegments * size
	limit := cfg.Budget
	if limit <= 0 {
		limit = max(qlen*size, burst)
	}
	b, err := txqueue.NewBudget(txqueue.BudgetConfig{Burst: burst, Limit: limit, Fixed: cfg.Budget > 0})
	if err != nil {
		return nil, nil, fmt.Errorf("dataplane: %w: budget: %w", ErrInvalidConfig, err)
	}
	q, err := txqueue.NewQueue[Frame](txqueue.QueueConfig{Policy: txqueue.Block, Packets: qlen, Bytes: limit + burst})
	return b, q, err
}

// Run forwards in both directions until ctx ends or a part fails, then
// stops reading, drains the queues and returns the failure, if any.
func (g *Gateway) Run(parent context.Context) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(g.fwds)+len(g.rets))
	start := func(i int, run func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = run(ctx); errs[i] != nil {
				cancel()
			}
		}()
	}
	for i, f := range g.fwds {
		start(i, f.Run)
	}
	for i, r := range g.rets {
		start(len(g.fwds)+i, r.Run)
	}
	<-ctx.Done()
	g.tun.Close() // wakes the producers blocked in Read
	wg.Wait()
	for i := range errs {
		if parent.Err() != nil && errors.Is(errs[i], ErrSourceClosed) {
			errs[i] = nil // the TUN was closed to stop
		}
	}
	return errors.Join(errs...)
}

// Close detaches the XDP program, closes the sockets and the TUN device
// (removing it if it was created) and releases what is still queued.
func (g *Gateway) Close() error {
	var errs []error
	for _, q := range g.queues {
		q.Close()
	}
	for _, s := range g.sinks {
		s.Close()
	}
	if g.xdp != nil {
		errs = append(errs, g.xdp.Close())
	}
	errs = append(errs, g.tun.Close())
	return errors.Join(errs...)
}

// TUN returns the gateway's TUN device.
func (g *Gateway) TUN() *TUN { return g.tun }

// XDP returns the gateway's AF_XDP port.
func (g *Gateway) XDP() *XDPPort { return g.xdp }

// Stats returns a snapshot of the gateway's counters.
func (g *Gateway) Stats() GatewayStats {
	var s GatewayStats
	for _, f := range g.fwds {
		s.Forward = s.Forward.add(f.Stats())
	}
	for _, r := range g.rets {
		rs := r.Stats()
		s.Return.Packets += rs.Packets
		s.Return.Bytes += rs.Bytes
		s.Return.Invalid += rs.Invalid
		s.Return.WriteErr += rs.WriteErr
	}
	for _, k := range g.sinks {
		s.Unresolved += k.Unresolved()
	}
	for i, q := range g.queues {
		s.Queue = s.Queue.Add(q.Stats())
		if b := g.budgets[i]; b != nil {
			s.Budget = s.Budget.Add(b.Stats())
		}
	}
	if g.xdp != nil {
		for _, x := range g.xdp.Sockets() {
			s.XSK = append(s.XSK, x.Stats())
		}
	}
	return s
}
