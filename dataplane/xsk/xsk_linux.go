package xsk

// The AF_XDP port: one AF_XDP socket per RX queue of a NIC, each with its
// own UMEM, fed by our XDP program (prog_linux.go).
//
// The sockets are our own rather than asavie/xdp's xdp.Socket, whose
// Transmit panics on an unexpected sendto errno, whose ring indices are
// plain loads and stores, and whose GetDescs scans the free list linearly:
// here ring indices go through sync/atomic (xsk_unsafe_linux.go), the TX
// free list is a stack (O(1) per frame), every frame's owner is tracked so
// that a bad address is counted and refused instead of corrupting a ring,
// and every sendto errno is either a counted retry or a returned error.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/internal/port"
	"github.com/gsoplane/gsoplane/internal/ethtool"
)

// xskBindBusyWait is how long bind retries EBUSY (see Socket.bind).
const xskBindBusyWait = 2 * time.Second

// Port is an XDP program on an interface with one AF_XDP socket per
// bound RX queue. Create it with Open; Close it when done.
type Port struct {
	base     *port.Port[*Socket] // the interface, namespace, sockets and lock
	mode     Mode
	prog     *xdpProgram
	multi    bool // multi-buffer receive is on
	zeroCopy bool // the sockets are bound with XDP_ZEROCOPY
}

// Open loads the XDP program, opens and registers one socket per queue,
// and attaches the program to cfg.Ifname in the calling thread's network
// namespace (call it from a goroutine locked to a thread in that
// namespace). It refuses, and leaves alone, an XDP program someone else
// attached (ErrAttached). It needs CAP_NET_ADMIN, CAP_BPF and
// CAP_NET_RAW (root has them).
func Open(cfg Config) (*Port, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	link, err := port.Interface("xsk", cfg.Ifname)
	if err != nil {
		return nil, err
	}
	if attached, id := attachedXDP(link); attached {
		return nil, fmt.Errorf("xsk: port on %s: %w (program ID %d): if a BPF link holds it (another gateway or tool), stop that process or detach the link (bpftool link show; bpftool link detach id N), else ip link set dev %s xdp off",
			cfg.Ifname, ErrAttached, id, cfg.Ifname)
	}
	queues, err := xdpQueues(link, cfg.Queues)
	if err != nil {
		return nil, err
	}
	p := &Port{zeroCopy: cfg.ZeroCopy}
	p.base, err = port.New(port.Config[*Socket]{
		Pkg: "xsk", Ifname: cfg.Ifname, Ifindex: link.Attrs().Index, MaxPrefixes: xdpMaxPrefixes,
		ErrClosed: ErrClosed, ErrDetached: ErrDetached,
		StopReceive: (*Socket).stopRX, CloseSocket: p.closeSocket,
	})
	if err != nil {
		return nil, err
	}
	if err := p.open(link, cfg, queues); err != nil {
		return nil, errors.Join(err, p.Close())
	}
	return p, nil
}

// open does Open's work; the caller closes p on error.
func (p *Port) open(link netlink.Link, cfg Config, queues []int) error {
	var err error
	if p.prog, err = newXDPProgram(slices.Max(queues)); err != nil {
		return fmt.Errorf("xsk: port on %s: %w", cfg.Ifname, err)
	}
	p.base.SetProgram(xdpAttachment{p})
	if err := p.prog.setPrefixes(cfg.Redirect); err != nil {
		return fmt.Errorf("xsk: port on %s: %w", cfg.Ifname, err)
	}
	err = p.load(link, cfg, cfg.MultiBuffer != MultiBufferOff)
	if p.fallBack(err, cfg) {
		err = p.load(link, cfg, false)
	}
	if err != nil {
		return fmt.Errorf("xsk: port on %s: %w", cfg.Ifname, err)
	}
	for _, q := range queues {
		x, err := newXSK(cfg.Ifname, p.Ifindex(), q, cfg, p.multi)
		if err != nil {
			return err
		}
		p.base.AddSocket(x)
		if err := p.checkSG(link, cfg, x); err != nil {
			return err
		}
		if err := p.prog.register(q, x.fd); err != nil {
			return err
		}
	}
	p.mode, err = p.prog.attach(link, cfg.Mode)
	return err
}

// load loads the XDP program for the link's MAC address (attach then
// keeps it), taking multi-buffer frames up to cfg.MaxChain UMEM frames
// if multi, else frames that fit one.
func (p *Port) load(link netlink.Link, cfg Config, multi bool) error {
	maxLen := rxFrameLen(cfg.FrameSize)
	if multi {
		maxLen *= cfg.MaxChain
	}
	p.multi = multi
	p.prog.setReceive(maxLen, multi)
	return p.prog.load(link.Attrs().HardwareAddr)
}

// fallBack reports whether err is the kernel refusing multi-buffer and
// the port should go on without it.
func (p *Port) fallBack(err error, cfg Config) bool {
	return errors.Is(err, ErrNoMultiBuffer) && cfg.MultiBuffer == MultiBufferAuto
}

// checkSG handles a socket the kernel bound without the XDP_USE_SG that
// the port asked for: with MultiBufferAuto the first socket turns
// multi-buffer off for the port (the program is loaded again without
// frags); otherwise it is an error.
func (p *Port) checkSG(link netlink.Link, cfg Config, x *Socket) error {
	if x.multiBuffer() == p.multi {
		return nil
	}
	err := fmt.Errorf("xsk: socket on %s queue %d: bind with XDP_USE_SG: %w: %w", cfg.Ifname, x.queueID, ErrNoMultiBuffer, x.sgErr)
	if len(p.base.Sockets()) > 1 || !p.fallBack(err, cfg) {
		return err
	}
	if err := p.load(link, cfg, false); err != nil {
		return fmt.Errorf("xsk: port on %s: %w", cfg.Ifname, err)
	}
	return nil
}

// xdpQueues returns the queues to bind: want, checked against the
// interface's RX queues, or all of them.
func xdpQueues(link netlink.Link, want []int) ([]int, error) {
	n := port.RXQueues(link)
	if want == nil {
		want = make([]int, n)
		for i := range want {
			want[i] = i
		}
	}
	for _, q := range want {
		if q >= n {
			return nil, fmt.Errorf("xsk: port: %w: %s has %d RX queues, no queue %d",
				frame.ErrInvalidConfig, link.Attrs().Name, n, q)
		}
	}
	if len(want) == 0 {
		return nil, fmt.Errorf("xsk: port: %w: no queues", frame.ErrInvalidConfig)
	}
	return slices.Clone(want), nil
}

// Sockets returns the sockets, one per bound queue, in Config.Queues
// order (a new slice: keep it rather than calling Sockets per packet).
func (p *Port) Sockets() []*Socket { return p.base.Sockets() }

// Mode returns the effective attach mode (native or generic).
func (p *Port) Mode() Mode { return p.mode }

// ZeroCopy reports whether the sockets are bound in zero-copy mode
// (Config.ZeroCopy: Open fails where the driver refuses it).
func (p *Port) ZeroCopy() bool { return p.zeroCopy }

// MultiBuffer reports whether the port receives packets longer than one
// UMEM frame (as chains of up to Config.MaxChain frames): Config asked
// for it and the kernel has it.
func (p *Port) MultiBuffer() bool { return p.multi }

// Ifindex returns the interface index.
func (p *Port) Ifindex() int { return p.base.Ifindex() }

// SetRedirect replaces the redirect prefixes: afterwards exactly these
// destinations go to the sockets.
func (p *Port) SetRedirect(prefixes []netip.Prefix) error { return p.base.SetRedirect(prefixes) }

// StopReceive makes every Receive of the port's sockets' receivers return
// at once, with no frames, from now on: a return path blocked waiting for
// frames notices that its context ended. Transmitting goes on until Close.
func (p *Port) StopReceive() { p.base.StopReceive() }

// Close detaches the XDP program if it is still ours, unregisters and
// closes the sockets, and closes the program. It may be called from any
// goroutine and more than once; the sockets' methods then return
// ErrClosed. It must not run while another goroutine is inside a
// socket's method holding a frame slice it still writes to.
func (p *Port) Close() error { return p.base.Close() }

// closeSocket unregisters x from the program and closes it.
func (p *Port) closeSocket(x *Socket) error {
	var err error
	if p.prog != nil {
		err = p.prog.unregister(x.queueID)
	}
	return errors.Join(err, x.close())
}

// Frame owners, per UMEM frame.
const (
	xskFrameKernel uint8 = iota // in the fill, RX, TX or completion ring
	xskFrameFree                // TX: on the free list
	xskFrameUser                // handed out by alloc or receive
	xskFrameSpare               // RX: waiting for room in the fill ring
	xskFrameKept                // TX: in the TX or completion ring, sent by transmit for a frame the caller reported complete already
)

// Socket is one AF_XDP socket bound to one RX queue, with its own UMEM and
// four rings. Its TX side is used through a Sink (NewSink) and its RX
// side through its Receiver; Stats may be called from anywhere. Inside
// the package, the TX methods (alloc, frame, transmit, complete, free,
// txFreeCount) run on one goroutine at a time, the RX methods (receive,
// recycle) on one goroutine at a time; the two sides may run concurrently.
type Socket struct {
	mu         sync.RWMutex // write-locked only by close: guards the mappings
	closed     bool
	fd         int
	queueID    int
	frameSize  int
	frameShift uint
	rxFrames   uint32 // frames [0, rxFrames) receive, the rest transmit
	umem       []byte
	state      []uint8 // owner of each frame
	fill, comp xskAddrRing
	rx, tx     xskDescRing
	txFree     []uint64 // TX frames on the free list (a stack)
	rxSpare    []uint64 // RX frames not in the fill ring (a stack)
	txErr      error    // a kick error seen by Complete, for the next Transmit
	txBudget   int      // frames the kernel sends per kick (XDP_MAX_TX_SKB_BUDGET)
	maxChain   int      // the most frames of a received packet (1: multi-buffer off)
	arena      []byte   // received chains, copied (reused by every receive)
	arenaPos   int      // the arena's bytes in use
	chainRoom  int      // the arena bytes a chain may take
	chain      rxChain  // the chain being received
	sgErr      error    // why bind refused XDP_USE_SG, if it did
	txOff      uint64   // where a TX frame's packet starts in its UMEM frame: after the TX metadata, if registered
	txCsum     bool     // TX frames may ask for checksum offload (Config.DisableTXChecksum)
	poll       poller   // waits through the Go runtime's netpoller
	st         xskCounters
	final      Stats // kernel counters read at close

	rxStopped atomic.Bool // stopRX was called (busy polling checks it)
}

type xskCounters struct {
	rx, tx, completed, kicks, kickRetries, kickErrors, badFrames atomic.Uint64
	busyPolls, txCsum                                            atomic.Uint64
	multiBuffer, chainTooLong, chainBroken                       atomic.Uint64
}

// newXSK opens, sets up and binds the socket of one queue, with
// XDP_USE_SG if multi (see bind).
func newXSK(ifname string, ifindex, queue int, cfg Config, multi bool) (*Socket, error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		switch {
		case errors.Is(err, unix.EAFNOSUPPORT):
			return nil, fmt.Errorf("xsk: socket: %w (CONFIG_XDP_SOCKETS): %w", ErrUnsupported, os.NewSyscallError("socket", err))
		case errors.Is(err, unix.EPERM):
			return nil, fmt.Errorf("xsk: socket: needs CAP_NET_RAW: %w", os.NewSyscallError("socket", err))
		}
		return nil, fmt.Errorf("xsk: socket: %w", os.NewSyscallError("socket", err))
	}
	x := newSocket(fd, queue, cfg)
	if err := x.setup(ifindex, cfg, multi); err != nil {
		return nil, errors.Join(fmt.Errorf("xsk: socket on %s queue %d: %w", ifname, queue, withDriver(ifname, err)), x.close())
	}
	if d, _ := ethtool.Driver(ifname); d == fragsOnlyDriver {
		x.txCsum = false
	}
	return x, nil
}

// fragsOnlyDriver is the driver whose copy-mode AF_XDP frames the kernel
// builds as page fragments (IFF_TX_SKB_NO_LINEAR), a path that took no
// TX metadata before the linear one did: Linux 6.12 sends the partial
// checksums as they are (the Debian 13 guest's TestEndToEndNIC). The
// socket computes the checksums itself there.
const fragsOnlyDriver = "virtio_net"

// withDriver names the interface's driver in a zero-copy refusal: the
// driver is what decides, and what to look up.
func withDriver(ifname string, err error) error {
	if !errors.Is(err, ErrZeroCopy) {
		return err
	}
	d, derr := ethtool.Driver(ifname)
	if derr != nil {
		d = fmt.Sprintf("unknown (%v)", derr)
	}
	return fmt.Errorf("driver %s: %w", d, err)
}

// newSocket returns the socket on fd of queue, its frame layout set.
func newSocket(fd, queue int, cfg Config) *Socket {
	x := &Socket{fd: fd, queueID: queue, frameSize: cfg.FrameSize, rxFrames: uint32(cfg.NumFrames / 2)}
	for 1<<x.frameShift < x.frameSize {
		x.frameShift++
	}
	return x
}

// setup registers the UMEM, creates and maps the rings, binds, and fills
// the fill ring.
func (x *Socket) setup(ifindex int, cfg Config, multi bool) error {
	umem, err := unix.Mmap(-1, 0, cfg.NumFrames*cfg.FrameSize, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("UMEM: %w", os.NewSyscallError("mmap", err))
	}
	x.umem = umem
	if err := x.registerUMEM(cfg); err != nil {
		return fmt.Errorf("register UMEM (%d bytes; RLIMIT_MEMLOCK without CAP_IPC_LOCK?): %w", len(umem), err)
	}
	if err := x.mapRings(uint32(cfg.RingSize)); err != nil {
		return err
	}
	sg, err := x.bind(ifindex, cfg.ZeroCopy, multi)
	if err != nil {
		return err
	}
	x.txCsum = x.txOff > 0 && !x.zeroCopy()
	x.initFrames(cfg.NumFrames)
	if sg {
		x.initChains(cfg.MaxChain)
	} else {
		x.initChains(1)
	}
	x.txBudget = setTxBudget(x.fd, min(cfg.RingSize, sinkFrames))
	if cfg.BusyPoll > 0 {
		if err := setBusyPoll(x.fd, cfg.BusyPoll, cfg.BusyPollBudget); err != nil {
			return err
		}
		x.poll.busy = cfg.BusyPoll
	}
	return x.poll.init(x)
}

// txMetadataLen is the TX metadata in front of every TX frame's packet
// (struct xsk_tx_metadata: 8 bytes of flags, 16 of request or completion).
const txMetadataLen = 24

// registerUMEM registers the UMEM, with room for TX metadata unless
// cfg.DisableTXChecksum; a kernel without TX metadata (before Linux 6.11)
// refuses the flag (EINVAL), and the UMEM is registered without it.
func (x *Socket) registerUMEM(cfg Config) error {
	if !cfg.DisableTXChecksum {
		err := xskRegisterUMEM(x.fd, x.umem, cfg.FrameSize, txMetadataLen)
		if err == nil {
			x.txOff = txMetadataLen
			return nil
		}
		if !errors.Is(err, unix.EINVAL) {
			return err
		}
	}
	return xskRegisterUMEM(x.fd, x.umem, cfg.FrameSize, 0)
}

// zeroCopy reports whether the bound socket is in zero-copy mode
// (XDP_OPTIONS).
func (x *Socket) zeroCopy() bool {
	opts, err := unix.GetsockoptInt(x.fd, unix.SOL_XDP, unix.XDP_OPTIONS)
	return err == nil && opts&unix.XDP_OPTIONS_ZEROCOPY != 0
}

// mapRings sizes and maps the four rings.
func (x *Socket) mapRings(n uint32) error {
	for _, opt := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING, unix.XDP_TX_RING} {
		if err := xskSetRingSize(x.fd, opt, n); err != nil {
			return fmt.Errorf("ring size %d: %w", n, err)
		}
	}
	off, err := xskMmapOffsets(x.fd)
	if err != nil {
		return fmt.Errorf("XDP_MMAP_OFFSETS: %w", err)
	}
	if x.fill, err = mapXskAddrRing(x.fd, unix.XDP_UMEM_PGOFF_FILL_RING, off.Fr, n); err != nil {
		return fmt.Errorf("fill ring: %w", err)
	}
	if x.comp, err = mapXskAddrRing(x.fd, unix.XDP_UMEM_PGOFF_COMPLETION_RING, off.Cr, n); err != nil {
		return fmt.Errorf("completion ring: %w", err)
	}
	if x.rx, err = mapXskDescRing(x.fd, unix.XDP_PGOFF_RX_RING, off.Rx, n); err != nil {
		return fmt.Errorf("RX ring: %w", err)
	}
	if x.tx, err = mapXskDescRing(x.fd, unix.XDP_PGOFF_TX_RING, off.Tx, n); err != nil {
		return fmt.Errorf("TX ring: %w", err)
	}
	return nil
}

// xskSGFlag is the bind flag of multi-buffer sockets (a variable so that
// a test can make the kernel refuse it).
var xskSGFlag uint16 = unix.XDP_USE_SG

// bind binds the socket to the queue in copy or zero-copy mode, with
// XDP_USE_SG if sg; it reports whether it got XDP_USE_SG. Where the
// kernel (before Linux 6.6) or, in zero-copy mode, the driver refuses
// it, it binds without, and keeps the refusal in sgErr.
func (x *Socket) bind(ifindex int, zeroCopy, sg bool) (bool, error) {
	flags := uint16(unix.XDP_USE_NEED_WAKEUP | unix.XDP_COPY)
	if zeroCopy {
		flags = unix.XDP_USE_NEED_WAKEUP | unix.XDP_ZEROCOPY
	}
	sa := &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(ifindex), QueueID: uint32(x.queueID)}
	if sg {
		sa.Flags |= xskSGFlag
		err := x.bindWait(sa)
		if err == nil || !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EINVAL) {
			return err == nil, bindError(err, zeroCopy)
		}
		x.sgErr = os.NewSyscallError("bind", err)
		sa.Flags &^= xskSGFlag
	}
	return false, bindError(x.bindWait(sa), zeroCopy)
}

// bindWait binds. A socket closed a moment ago holds its queue until the
// kernel has released it (after an RCU grace period, from a workqueue):
// EBUSY right after a Close is retried for a while.
func (x *Socket) bindWait(sa *unix.SockaddrXDP) error {
	err := unix.Bind(x.fd, sa)
	for start := time.Now(); errors.Is(err, unix.EBUSY) && time.Since(start) < xskBindBusyWait; {
		time.Sleep(5 * time.Millisecond)
		err = unix.Bind(x.fd, sa)
	}
	return err
}

// bindError explains a bind error.
func bindError(err error, zeroCopy bool) error {
	switch {
	case err == nil:
		return nil
	case zeroCopy && (errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL)):
		return fmt.Errorf("bind: %w (use copy mode): %w", ErrZeroCopy, os.NewSyscallError("bind", err))
	case errors.Is(err, unix.EBUSY):
		return fmt.Errorf("bind: the queue already has an AF_XDP socket (waited %v): %w", xskBindBusyWait, os.NewSyscallError("bind", err))
	}
	return fmt.Errorf("bind: %w", os.NewSyscallError("bind", err))
}

// initFrames puts the TX frames on the free list and the RX frames into
// the fill ring (those that do not fit wait as spares).
func (x *Socket) initFrames(n int) {
	x.state = make([]uint8, n)
	x.txFree = make([]uint64, 0, n-int(x.rxFrames))
	for i := n - 1; i >= int(x.rxFrames); i-- {
		x.state[i] = xskFrameFree
		x.txFree = append(x.txFree, uint64(i)<<x.frameShift)
	}
	x.rxSpare = make([]uint64, 0, x.rxFrames)
	for i := int(x.rxFrames) - 1; i >= 0; i-- {
		x.state[i] = xskFrameSpare
		x.rxSpare = append(x.rxSpare, uint64(i)<<x.frameShift)
	}
	x.fillFromSpare()
}

// close closes the socket and unmaps everything; idempotent.
func (x *Socket) close() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return nil
	}
	x.closed = true
	x.final = x.kernelStats()
	err := x.poll.close(x.fd)
	x.fd = -1
	for _, r := range []*xskRing{&x.fill.xskRing, &x.comp.xskRing, &x.rx.xskRing, &x.tx.xskRing} {
		err = errors.Join(err, r.unmap())
	}
	x.fill.descs, x.comp.descs, x.rx.descs, x.tx.descs = nil, nil, nil, nil
	if x.umem != nil {
		err = errors.Join(err, os.NewSyscallError("munmap", unix.Munmap(x.umem)))
		x.umem = nil
	}
	return err
}

// enter read-locks the socket; false (and not locked) once it is closed.
func (x *Socket) enter() bool {
	x.mu.RLock()
	if x.closed {
		x.mu.RUnlock()
		return false
	}
	return true
}

// FrameSize returns the UMEM frame size.
func (x *Socket) FrameSize() int { return x.frameSize }

// MaxRXFrame returns the longest frame the socket receives in one UMEM
// frame, its Ethernet header included: FrameSize less the headroom the
// kernel leaves (XDP_PACKET_HEADROOM). Without multi-buffer
// (Port.MultiBuffer) the XDP program passes longer ones to the kernel.
func (x *Socket) MaxRXFrame() int { return rxFrameLen(x.frameSize) }

// MaxTXFrame returns the longest frame the socket transmits, its Ethernet
// header included: FrameSize, less the TX metadata in front of it
// (Config.DisableTXChecksum).
func (x *Socket) MaxTXFrame() int { return x.frameSize - int(x.txOff) }

// TXChecksum reports whether the socket sends partial checksums for the
// kernel or the NIC to complete (Config.DisableTXChecksum).
func (x *Socket) TXChecksum() bool { return x.txCsum }

// NumFrames returns the number of UMEM frames, half of them for TX.
func (x *Socket) NumFrames() int { return 2 * int(x.rxFrames) }

// frameIndex returns the index of the frame starting at addr.
func (x *Socket) frameIndex(addr uint64) (uint32, bool) {
	i := addr >> x.frameShift
	if addr&uint64(x.frameSize-1) != 0 || i >= uint64(len(x.state)) {
		return 0, false
	}
	return uint32(i), true
}

// alloc fills addrs with up to len(addrs) free TX frame addresses, O(1)
// each, and returns how many; 0 when none is free (call complete).
func (x *Socket) alloc(addrs []uint64) int {
	if !x.enter() {
		return 0
	}
	defer x.mu.RUnlock()
	n := min(len(addrs), len(x.txFree))
	top := len(x.txFree) - n
	copy(addrs, x.txFree[top:])
	x.txFree = x.txFree[:top]
	for _, a := range addrs[:n] {
		x.state[a>>x.frameShift] = xskFrameUser
	}
	return n
}

// free returns allocated TX frames that will not be transmitted to the
// free list. Addresses that are not allocated TX frames are counted
// (BadFrames) and ignored.
func (x *Socket) free(addrs []uint64) {
	if !x.enter() {
		return
	}
	defer x.mu.RUnlock()
	for _, a := range addrs {
		i, ok := x.frameIndex(a)
		if !ok || i < x.rxFrames || x.state[i] != xskFrameUser {
			x.st.badFrames.Add(1)
			continue
		}
		x.state[i] = xskFrameFree
		x.txFree = append(x.txFree, a)
	}
}

// txFreeCount returns how many TX frames are on the free list.
func (x *Socket) txFreeCount() int {
	if !x.enter() {
		return 0
	}
	defer x.mu.RUnlock()
	return len(x.txFree)
}

// frame returns the memory of the TX frame at addr (from alloc),
// MaxTXFrame bytes; nil for an address that is not a frame or once the
// socket is closed. The slice must not be used after Close.
func (x *Socket) frame(addr uint64) []byte {
	if !x.enter() {
		return nil
	}
	defer x.mu.RUnlock()
	if _, ok := x.frameIndex(addr); !ok {
		return nil
	}
	end := addr + uint64(x.frameSize)
	return x.umem[addr+x.txOff : end : end]
}

// transmit puts frames from alloc, with the packet lengths lens, on the TX
// ring, as many as fit, and returns how many it took (the caller keeps the
// rest). csum, if not nil, asks for checksum offload per frame: where
// csum[i] is not zero, its high 16 bits are where the checksummed bytes
// start in the frame and its low 16 bits where the checksum goes after
// that (the frame carries the pseudo-header sum there); only where
// TXChecksum. It wakes the kernel with sendto(MSG_DONTWAIT) when the ring asks
// for it; EAGAIN, EBUSY, ENOBUFS, EINTR and ENETDOWN only mean "try again" and are
// counted (KickRetries) and retried by the next transmit or complete.
// Other errors are returned, wrapped. A frame that is not an allocated TX
// frame or a length outside 1..FrameSize stops the batch there with
// ErrBadFrame. After Close it returns ErrClosed. Kept frames are frames
// the caller reported complete already (see Sink): complete frees them
// without counting them.
func (x *Socket) transmit(addrs []uint64, lens []int, csum []uint32, kept bool) (int, error) {
	if !x.enter() {
		return 0, ErrClosed
	}
	defer x.mu.RUnlock()
	room := x.tx.size - (x.tx.local - x.tx.loadConsumer())
	n := min(len(addrs), len(lens), int(room))
	var err error
	i := 0
	for ; i < n; i++ {
		f, ok := x.frameIndex(addrs[i])
		if !ok || f < x.rxFrames || x.state[f] != xskFrameUser || lens[i] <= 0 || lens[i] > x.MaxTXFrame() {
			x.st.badFrames.Add(1)
			err = fmt.Errorf("xsk: transmit: frame %#x length %d: %w", addrs[i], lens[i], ErrBadFrame)
			break
		}
		x.state[f] = xskFrameKernel
		if kept {
			x.state[f] = xskFrameKept
		}
		d := &x.tx.descs[(x.tx.local+uint32(i))&x.tx.mask]
		d.Addr, d.Len, d.Options = addrs[i]+x.txOff, uint32(lens[i]), 0
		if csum != nil && csum[i] != 0 && x.txCsum {
			x.txMetadata(addrs[i], csum[i])
			d.Options = unix.XDP_TX_METADATA
			x.st.txCsum.Add(1)
		}
	}
	if i > 0 {
		x.tx.local += uint32(i)
		x.tx.publishProducer()
		x.st.tx.Add(uint64(i))
	}
	if kerr := x.kickTX(); kerr != nil {
		err = errors.Join(err, kerr)
	}
	if x.txErr != nil {
		err, x.txErr = errors.Join(err, x.txErr), nil
	}
	return i, err
}

// txMetadata writes the TX metadata of the frame at addr, in front of its
// packet: checksum offload, from csum as transmit takes it, and zeroes
// for the rest (the launch time, which the flags do not ask for).
func (x *Socket) txMetadata(addr uint64, csum uint32) {
	m := x.umem[addr : addr+txMetadataLen]
	binary.NativeEndian.PutUint64(m, unix.XDP_TXMD_FLAGS_CHECKSUM)
	binary.NativeEndian.PutUint16(m[8:], uint16(csum>>16))
	binary.NativeEndian.PutUint16(m[10:], uint16(csum))
	clear(m[12:])
}

// kickTX wakes the kernel up if the TX ring has entries it has not taken
// yet and it asked to be woken up.
func (x *Socket) kickTX() error {
	if x.tx.local == x.tx.loadConsumer() || !x.tx.needWakeup() {
		return nil
	}
	x.st.kicks.Add(1)
	_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(x.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return x.kickResult("sendto", e)
}

// kickFill wakes the kernel up if it asked for fill ring entries.
func (x *Socket) kickFill() {
	if !x.fill.needWakeup() {
		return
	}
	x.st.kicks.Add(1)
	_, _, e := unix.Syscall6(unix.SYS_RECVFROM, uintptr(x.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	_ = x.kickResult("recvfrom", e) // counted; RX has no error to report it with
}

// kickResult counts a wakeup's outcome and returns the errors callers
// must see.
func (x *Socket) kickResult(op string, e unix.Errno) error {
	switch e {
	case 0:
		return nil
	case unix.EAGAIN, unix.EBUSY, unix.ENOBUFS, unix.EINTR, unix.ENETDOWN:
		// ENETDOWN: the link is down; the frames wait on the TX ring
		// until it is up again (the budget holds the senders back).
		x.st.kickRetries.Add(1)
		return nil
	}
	x.st.kickErrors.Add(1)
	return fmt.Errorf("xsk: queue %d: %w", x.queueID, os.NewSyscallError(op, e))
}

// complete drains the completion ring: the transmitted frames go back to
// the free list. It returns how many, kept ones left out; completions
// come in submission order, so callers release their budget FIFO. It also wakes the kernel
// up for TX entries still waiting on the ring (copy mode sends a bounded
// batch per wakeup).
func (x *Socket) complete() int {
	if !x.enter() {
		return 0
	}
	defer x.mu.RUnlock()
	prod := x.comp.loadProducer()
	n, kept := prod-x.comp.local, uint32(0)
	for i := range n {
		a := x.comp.descs[(x.comp.local+i)&x.comp.mask] - x.txOff
		f, ok := x.frameIndex(a)
		if !ok || f < x.rxFrames || x.state[f] != xskFrameKernel && x.state[f] != xskFrameKept {
			x.st.badFrames.Add(1)
			continue
		}
		if x.state[f] == xskFrameKept {
			kept++
		}
		x.state[f] = xskFrameFree
		x.txFree = append(x.txFree, a)
	}
	x.comp.local = prod
	x.comp.publishConsumer()
	x.st.completed.Add(uint64(n))
	if err := x.kickTX(); err != nil && x.txErr == nil {
		x.txErr = err
	}
	return int(n - kept)
}

// Stats returns the socket's counters, the kernel's included (as of
// Close, once closed).
func (x *Socket) Stats() Stats {
	x.mu.RLock()
	s := x.final
	if !x.closed {
		s = x.kernelStats()
	}
	x.mu.RUnlock()
	s.RX, s.TX, s.Completed = x.st.rx.Load(), x.st.tx.Load(), x.st.completed.Load()
	s.Kicks, s.KickRetries, s.KickErrors = x.st.kicks.Load(), x.st.kickRetries.Load(), x.st.kickErrors.Load()
	s.BadFrames, s.BusyPolls = x.st.badFrames.Load(), x.st.busyPolls.Load()
	s.RXMultiBuffer, s.RXChainTooLong = x.st.multiBuffer.Load(), x.st.chainTooLong.Load()
	s.RXChainBroken, s.TXCsumOffload = x.st.chainBroken.Load(), x.st.txCsum.Load()
	return s
}

// kernelStats reads XDP_STATISTICS (zero if it fails).
func (x *Socket) kernelStats() Stats {
	k, err := xskStatistics(x.fd)
	if err != nil {
		return Stats{}
	}
	return Stats{
		RXDropped: k.Rx_dropped, RXInvalid: k.Rx_invalid_descs, RXRingFull: k.Rx_ring_full,
		RXFillEmpty: k.Rx_fill_ring_empty_descs, TXInvalid: k.Tx_invalid_descs, TXRingEmpty: k.Tx_ring_empty_descs,
	}
}
