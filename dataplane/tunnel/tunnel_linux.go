package tunnel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/dataplane/tun"
	"github.com/gsoplane/gsoplane/dataplane/udp"
	"github.com/gsoplane/gsoplane/segment"
	"github.com/gsoplane/gsoplane/txqueue"
)

// Per queue: the sink's frames, and the budget and queue in front of it
// (as many frames as the queue holds, so that the producer never waits
// for one while the budget has room).
const (
	laneFrames = 2048
	laneBurst  = 64   // frames' truesize a flow may charge at once
	laneLimit  = 1024 // frames' truesize charged at most
	// drainTime bounds how long a stopping forwarder sends what is
	// queued: at most laneLimit frames, a few milliseconds.
	drainTime = 10 * time.Millisecond
)

// Tunnel is a running tunnel, to one peer or several: see the package
// comment.
type Tunnel struct {
	cfg       Config
	log       *slog.Logger
	dev       *tun.Device
	conn      *net.UDPConn
	peers     *udp.Peers // nil: one peer, on a connected socket
	ownDev    bool
	ownConn   bool
	mtu       int
	lanes     []*lane
	recv      *udp.Receiver
	ret       *pipeline.ReturnPath // the one reader of the socket
	fallbacks atomic.Uint64
	control   struct{ sent, errors atomic.Uint64 }
	warned    sync.Map // what was warned about once

	mu      sync.Mutex
	stop    context.CancelFunc // ends Run; nil when not running
	running sync.WaitGroup     // Run's loops
	closed  bool
}

// lane is one TUN queue's forwarder.
type lane struct {
	sink  *udp.Sink
	queue *txqueue.Queue[frame.Frame]
	fwd   *pipeline.Forwarder
}

// Open opens the tunnel (the TUN device and the socket unless cfg gives
// them), in the network namespace of the calling thread, and sets it up;
// Run moves the packets. On error, what Open opened is closed again.
func Open(cfg Config) (_ *Tunnel, err error) {
	if cfg.Headroom == 0 {
		cfg.Headroom = DefaultHeadroom
	}
	if err := check(cfg); err != nil {
		return nil, err
	}
	t := &Tunnel{cfg: cfg, log: cfg.Logger, dev: cfg.Device, conn: cfg.Conn}
	if len(cfg.Peers) > 0 {
		if t.peers, err = udp.NewPeers(cfg.Peers); err != nil {
			return nil, fmt.Errorf("tunnel: %w", err)
		}
	}
	if t.log == nil {
		t.log = slog.Default()
	}
	defer func() {
		if err != nil {
			t.closeOwn()
		}
	}()
	if err := t.openConn(); err != nil {
		return nil, err
	}
	if err := t.setMTU(); err != nil {
		return nil, err
	}
	if err := t.openDevice(); err != nil {
		return nil, err
	}
	t.sizeBuffers()
	for _, q := range t.dev.Queues() {
		l, err := t.newLane(q)
		if err != nil {
			return nil, err
		}
		t.lanes = append(t.lanes, l)
	}
	if err := t.newReturnPath(); err != nil {
		return nil, err
	}
	t.checkOffloads()
	return t, nil
}

// check refuses what Open cannot use, before anything is opened.
func check(cfg Config) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("tunnel: %w: %s", frame.ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case len(cfg.Peers) > 0 && cfg.Peer.IsValid():
		return bad("Peer and Peers: one peer or several, not both")
	case len(cfg.Peers) == 0 && cfg.Conn == nil && !cfg.Peer.IsValid():
		return bad("no peer: set Conn or Peer, or Peers")
	case cfg.Headroom < MinHeadroom || cfg.Headroom > 1024:
		return bad("headroom %d, want %d to 1024", cfg.Headroom, MinHeadroom)
	case cfg.Tailroom < 0 || cfg.Tailroom > 1024:
		return bad("tailroom %d, want 0 to 1024", cfg.Tailroom)
	case cfg.MTU != 0 && (cfg.MTU < 576 || cfg.MTU > 65535-cfg.Headroom-cfg.Tailroom):
		return bad("MTU %d", cfg.MTU)
	case cfg.SocketBuffer < 0:
		return bad("socket buffer %d", cfg.SocketBuffer)
	}
	return nil
}

// openConn dials the peer, or binds the socket for several, unless
// Config.Conn is given.
func (t *Tunnel) openConn() error {
	if t.conn != nil {
		return nil
	}
	if t.peers != nil {
		conn, err := net.ListenUDP(listenNetwork(t.cfg.Local.Addr(), t.peers), net.UDPAddrFromAddrPort(t.cfg.Local))
		if err != nil {
			return fmt.Errorf("tunnel: %w", err)
		}
		t.conn, t.ownConn = conn, true
		return nil
	}
	var laddr *net.UDPAddr
	if t.cfg.Local.IsValid() {
		laddr = net.UDPAddrFromAddrPort(t.cfg.Local)
	}
	conn, err := net.DialUDP("udp", laddr, net.UDPAddrFromAddrPort(t.cfg.Peer))
	if err != nil {
		return fmt.Errorf("tunnel: %w", err)
	}
	t.conn, t.ownConn = conn, true
	return nil
}

// setMTU takes Config.MTU, or derives the inner MTU from the path MTU.
func (t *Tunnel) setMTU() error {
	if t.mtu = t.cfg.MTU; t.mtu != 0 {
		return nil
	}
	if t.peers != nil {
		return t.setPeersMTU()
	}
	path, v6, err := pathMTU(t.conn)
	if err != nil {
		return fmt.Errorf("tunnel: path MTU to the peer: %w", err)
	}
	t.mtu = InnerMTU(path, v6, t.cfg.Headroom, t.cfg.Tailroom)
	if t.mtu < 576 {
		return fmt.Errorf("tunnel: path MTU %d leaves an inner MTU of %d, less than 576", path, t.mtu)
	}
	return nil
}

// openDevice opens the TUN device with the inner MTU unless Config.Device
// is given; a given device gets the inner MTU too.
func (t *Tunnel) openDevice() error {
	if t.dev != nil {
		if err := setDeviceMTU(t.dev, t.mtu); err != nil {
			return fmt.Errorf("tunnel: %w", err)
		}
		return nil
	}
	dev, err := tun.Open(tun.Config{Name: t.cfg.Name, Queues: t.cfg.Queues, MTU: t.mtu, Offload: true})
	if err != nil {
		return fmt.Errorf("tunnel: %w", err)
	}
	t.dev, t.ownDev = dev, true
	return nil
}

// setDeviceMTU sets the MTU of a device opened by the caller.
func setDeviceMTU(dev *tun.Device, mtu int) error {
	link, err := netlink.LinkByIndex(dev.Index())
	if err != nil {
		return fmt.Errorf("TUN device %s: %w", dev.Name(), err)
	}
	if link.Attrs().MTU == mtu {
		return nil
	}
	if err := netlink.LinkSetMTU(link, mtu); err != nil {
		return fmt.Errorf("TUN device %s: MTU %d: %w", dev.Name(), mtu, err)
	}
	return nil
}

// newLane wires a forwarder to queue q.
func (t *Tunnel) newLane(q *tun.Queue) (*lane, error) {
	frameSize := t.cfg.Headroom + t.mtu + t.cfg.Tailroom
	sink, err := udp.NewSink(t.conn, udp.SinkConfig{
		Frames: laneFrames, FrameSize: frameSize, Headroom: t.cfg.Headroom, Tailroom: t.cfg.Tailroom,
		Seal: t.cfg.Seal, OnFallback: t.fellBack, Peers: t.peers,
	})
	if err != nil {
		return nil, fmt.Errorf("tunnel: %w", err)
	}
	size := txqueue.Truesize(frameSize)
	budget, err := txqueue.NewBudget(txqueue.BudgetConfig{Burst: laneBurst * size, Limit: laneLimit * size})
	if err != nil {
		return nil, fmt.Errorf("tunnel: %w", err)
	}
	queue, err := txqueue.NewQueue[frame.Frame](txqueue.QueueConfig{Policy: txqueue.Block, Packets: laneFrames, Bytes: laneFrames * size})
	if err != nil {
		return nil, fmt.Errorf("tunnel: %w", err)
	}
	l := &lane{sink: sink, queue: queue}
	if l.fwd, err = pipeline.NewForwarder(pipeline.ForwarderConfig{
		Source: q, HeaderSize: t.dev.HeaderSize(), Sink: sink, FrameSize: frameSize, Budget: budget, Queue: queue,
		MTU: t.mtu, DrainTime: drainTime,
	}); err != nil {
		return nil, fmt.Errorf("tunnel: %w", err)
	}
	return l, nil
}

// newReturnPath wires the socket's one receiver and return path to the
// TUN device: on several queues, each flow's packets go into the queue
// it hashes to (flowWriter).
func (t *Tunnel) newReturnPath() (err error) {
	t.recv, err = udp.NewReceiver(t.conn, udp.ReceiverConfig{
		Headroom: t.cfg.Headroom, Tailroom: t.cfg.Tailroom, Open: t.cfg.Open, Peers: t.peers,
		Roam: t.cfg.Roam, OnControl: t.cfg.OnControl,
	})
	if err != nil {
		return fmt.Errorf("tunnel: %w", err)
	}
	hdr := t.dev.HeaderSize()
	var w frame.VectorWriter
	if qs := t.dev.Queues(); len(qs) == 1 {
		w = qs[0]
	} else {
		fw := &flowWriter{hdr: hdr}
		for _, q := range qs {
			fw.queues = append(fw.queues, q)
		}
		w = fw
	}
	if t.ret, err = pipeline.NewReturnPath(pipeline.ReturnConfig{
		Receiver: t.recv, Writer: w, HeaderSize: hdr, TCP: true, UDP: t.dev.Offloads().Has(tun.OffloadUSO4),
		Inside: t.cfg.Inside, OnRefused: t.groRefused,
	}); err != nil {
		return fmt.Errorf("tunnel: %w", err)
	}
	return nil
}

// warnOnce logs a warning the first time key comes up.
func (t *Tunnel) warnOnce(key, msg string, args ...any) {
	if _, seen := t.warned.LoadOrStore(key, true); !seen {
		t.log.Warn(msg, args...)
	}
}

// fellBack is the sinks' OnFallback: counted, and warned about once.
func (t *Tunnel) fellBack(f udp.Fallback, err error) {
	t.fallbacks.Add(1)
	t.warnOnce(f.String(), "tunnel: UDP_SEGMENT refused: one datagram per message", "reason", f.String(), "err", err, "inner_mtu", t.mtu)
}

// groRefused is the return paths' OnRefused: the TUN device refused a
// super-packet, and that kind is written one packet at a time.
func (t *Tunnel) groRefused(kind segment.GSOType, err error) {
	t.fallbacks.Add(1)
	t.warnOnce("gro "+kind.String(), "tunnel: the TUN device refused a super-packet: packets go one per write", "kind", kind.String(), "err", err)
}

// checkOffloads warns about (and counts) a kernel without UDP_SEGMENT or
// UDP_GRO, or a TUN device without TSO.
func (t *Tunnel) checkOffloads() {
	if !t.lanes[0].sink.Stats().GSO {
		t.fellBack(udp.FallbackGSORefused, errors.New("the kernel has no UDP_SEGMENT (Linux 4.18)"))
	}
	if !t.recv.Stats().GRO {
		t.fallbacks.Add(1)
		t.warnOnce("udp_gro", "tunnel: the kernel has no UDP_GRO (Linux 5.0): datagrams come one per message")
	}
	if !t.dev.Offloads().Has(tun.OffloadTSO4) {
		t.fallbacks.Add(1)
		t.warnOnce("tso", "tunnel: the TUN device has no offloads: the kernel segments before it", "device", t.dev.Name())
	}
}

// Run moves packets until ctx ends, Close is called or a queue fails; it
// returns within 100 ms of either, nil unless a queue failed (at once
// after Close). Run once at a time.
func (t *Tunnel) Run(ctx context.Context) error {
	t.mu.Lock()
	switch {
	case t.closed:
		t.mu.Unlock()
		return nil
	case t.stop != nil:
		t.mu.Unlock()
		return errRunning
	}
	ctx, stop := context.WithCancel(ctx)
	t.stop = stop
	loops := len(t.lanes) + 1
	t.running.Add(loops)
	t.mu.Unlock()
	defer stop()

	errs := make(chan error, loops)
	loop := func(run func(context.Context) error) {
		defer t.running.Done()
		err := run(ctx)
		if err != nil {
			stop() // one queue failed: stop them all
		}
		errs <- err
	}
	for _, l := range t.lanes {
		go loop(l.fwd.Run)
	}
	go loop(t.ret.Run)
	var all []error
	for range loops {
		all = append(all, <-errs)
	}
	t.mu.Lock()
	t.stop = nil
	t.mu.Unlock()
	return errors.Join(all...)
}

var errRunning = errors.New("tunnel: Run: running already")

// Close stops Run, waits for its loops (within 100 ms) and closes what
// Open opened: the TUN device and the socket unless Config gave them.
// The kernel deletes a device Open created before Close returns, which
// may take it hundreds of milliseconds more (see the package comment).
// Close is idempotent.
func (t *Tunnel) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	if t.stop != nil {
		t.stop()
	}
	t.mu.Unlock()
	t.running.Wait()
	for _, l := range t.lanes {
		l.queue.Close() // releases what is still charged
	}
	return t.closeOwn()
}

// closeOwn closes the device and socket Open opened.
func (t *Tunnel) closeOwn() error {
	var errs []error
	if t.ownDev && t.dev != nil {
		errs = append(errs, t.dev.Close())
	}
	if t.ownConn && t.conn != nil {
		errs = append(errs, t.conn.Close())
	}
	return errors.Join(errs...)
}

// MTU is the inner MTU, the TUN device's.
func (t *Tunnel) MTU() int { return t.mtu }

// Device is the TUN device.
func (t *Tunnel) Device() *tun.Device { return t.dev }

// LocalAddr is the socket's local address.
func (t *Tunnel) LocalAddr() netip.AddrPort { return t.conn.LocalAddr().(*net.UDPAddr).AddrPort() }

// Send sends b, a datagram of the VPN's own (a handshake message, a
// cookie reply, a keepalive), to dst through the tunnel's socket, from
// any goroutine: the kernel sends it between the forwarders' batches,
// which it does not disturb (it waits for at most one sendmmsg call). On
// a tunnel to one peer dst is its address or the zero AddrPort; with
// Peers, any address of the socket's families (a peer's endpoint:
// Peer(i).Endpoint). Stats counts the datagrams sent and the errors.
func (t *Tunnel) Send(dst netip.AddrPort, b []byte) error {
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	var err error
	switch {
	case t.peers != nil:
		_, err = t.conn.WriteToUDPAddrPort(b, dst)
	case !dst.IsValid() || dst == t.remote():
		_, err = t.conn.Write(b)
	default:
		err = fmt.Errorf("%w: %v is not the peer, %v", frame.ErrInvalidConfig, dst, t.remote())
	}
	if err != nil {
		t.control.errors.Add(1)
		return fmt.Errorf("tunnel: send: %w", err)
	}
	t.control.sent.Add(1)
	return nil
}

// remote is the one peer's address, unmapped.
func (t *Tunnel) remote() netip.AddrPort {
	a, _ := t.conn.RemoteAddr().(*net.UDPAddr)
	ap := a.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

var errOnePeer = fmt.Errorf("tunnel: %w: a tunnel to one peer has no Peers", frame.ErrInvalidConfig)

// SetPeers replaces the peers of a tunnel with Peers while it runs (see
// udp.Peers.Set): from their next batch, the forwarders route to the new
// peers and the return path takes datagrams from them. Peer indices then
// refer to peers; a peer of equal Key (or Endpoint) keeps its counters.
// The inner MTU stays: the new peers' paths must carry it.
func (t *Tunnel) SetPeers(peers []udp.Peer) error {
	if t.peers == nil {
		return errOnePeer
	}
	if err := t.peers.Set(peers); err != nil {
		return fmt.Errorf("tunnel: %w", err)
	}
	return nil
}

// SetEndpoint moves peer i's endpoint to ep while the tunnel runs (see
// udp.Peers.SetEndpoint), as a VPN does when its handshake says the peer
// moved.
func (t *Tunnel) SetEndpoint(i int, ep netip.AddrPort) error {
	if t.peers == nil {
		return errOnePeer
	}
	if err := t.peers.SetEndpoint(i, ep); err != nil {
		return fmt.Errorf("tunnel: %w", err)
	}
	return nil
}

// Peer returns peer i as the tunnel routes it now (its endpoint may
// have moved); the zero Peer for a tunnel to one peer.
func (t *Tunnel) Peer(i int) udp.Peer {
	if t.peers == nil {
		return udp.Peer{}
	}
	return t.peers.Peer(i)
}

// PeerStats returns a snapshot of each peer's counters, in Config.Peers's
// order (SetPeers's after it); nil for a tunnel to one peer (Stats has
// its totals).
func (t *Tunnel) PeerStats() []udp.PeerStats {
	if t.peers == nil {
		return nil
	}
	return t.peers.Stats()
}

// Stats returns a snapshot of the counters, summed over the queues.
func (t *Tunnel) Stats() Stats {
	s := Stats{
		Fallbacks: t.fallbacks.Load(), Receive: t.recv.Stats(), Return: t.ret.Stats(),
		ControlSent: t.control.sent.Load(), ControlErrors: t.control.errors.Load(),
	}
	for i, l := range t.lanes {
		if i == 0 {
			s.Send = l.sink.Stats()
		} else {
			s.Send = s.Send.Add(l.sink.Stats())
		}
		s.Forward = s.Forward.Add(l.fwd.Stats())
	}
	return s
}
