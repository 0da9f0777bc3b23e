package dataplane

// The AF_XDP port: one AF_XDP socket per RX queue of a NIC, each with its
// own UMEM, fed by our XDP program (xdpprog_linux.go).
//
// The sockets are our own rather than asavie/xdp's xdp.Socket, whose
// Transmit panics on an unexpected sendto errno, whose ring indices are
// plain loads and stores, and whose GetDescs scans the free list linearly:
// here ring indices go through sync/atomic (xsk_unsafe_linux.go), the TX
// free list is a stack (O(1) per frame), every frame's owner is tracked so
// that a bad address is counted and refused instead of corrupting a ring,
// and every sendto errno is either a counted retry or a returned error.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// XDPMode is how the XDP program is attached to the interface.
type XDPMode int

// The attach modes.
const (
	// XDPModeAuto tries native mode and falls back to generic mode when the
	// driver refuses; XDPPort.Mode says which one it got.
	XDPModeAuto XDPMode = iota
	// XDPModeNative runs the program in the driver (XDP_FLAGS_DRV_MODE).
	XDPModeNative
	// XDPModeGeneric runs the program on the kernel's skb path
	// (XDP_FLAGS_SKB_MODE): works with every driver, slower.
	XDPModeGeneric
)

// String returns "auto", "native" or "generic".
func (m XDPMode) String() string {
	switch m {
	case XDPModeAuto:
		return "auto"
	case XDPModeNative:
		return "native"
	case XDPModeGeneric:
		return "generic"
	}
	return fmt.Sprintf("XDPMode(%d)", int(m))
}

// Defaults and limits of XDPConfig.
const (
	DefaultXDPFrameSize = 4096
	DefaultXDPNumFrames = 4096
	DefaultXDPRingSize  = 2048
	MaxXDPNumFrames     = 1 << 18
	MaxXDPRingSize      = 1 << 16
)

// xskBindBusyWait is how long bind retries EBUSY (see XSK.bind).
const xskBindBusyWait = 2 * time.Second

// Errors callers can act on (see also ErrInvalidConfig).
var (
	// ErrXDPAttached: another XDP program is attached to the interface.
	// OpenXDP leaves it in place.
	ErrXDPAttached = errors.New("another XDP program is already attached")
	// ErrXDPZeroCopy: XDPConfig.ZeroCopy was asked for but the driver
	// cannot do AF_XDP zero-copy on that queue.
	ErrXDPZeroCopy = errors.New("driver does not support AF_XDP zero-copy")
	// ErrXDPUnsupported: the kernel has no AF_XDP (CONFIG_XDP_SOCKETS).
	ErrXDPUnsupported = errors.New("kernel without AF_XDP sockets (CONFIG_XDP_SOCKETS)")
	// ErrXDPClosed is returned by XSK methods after XDPPort.Close.
	ErrXDPClosed = fmt.Errorf("AF_XDP socket: %w", net.ErrClosed)
	// ErrXDPBadFrame: Transmit was given an address that is not a TX frame
	// from Alloc, or a length outside 1..FrameSize.
	ErrXDPBadFrame = errors.New("not an allocated TX frame or bad length")
)

// XDPConfig configures OpenXDP.
type XDPConfig struct {
	// Ifname is the interface, in the calling thread's network namespace.
	Ifname string
	// Queues are the RX queues to bind a socket to; nil means every RX
	// queue of the interface (ETHTOOL_GCHANNELS, else the link's RX queue
	// count), so that all redirected traffic is seen.
	Queues []int
	// Mode is the XDP attach mode.
	Mode XDPMode
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
func (cfg XDPConfig) withDefaults() (XDPConfig, error) {
	bad := func(format string, a ...any) (XDPConfig, error) {
		return cfg, fmt.Errorf("AF_XDP port: %w: %s", ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	cfg.FrameSize = xdpOr(cfg.FrameSize, DefaultXDPFrameSize)
	cfg.NumFrames = xdpOr(cfg.NumFrames, DefaultXDPNumFrames)
	cfg.RingSize = xdpOr(cfg.RingSize, DefaultXDPRingSize)
	switch {
	case cfg.Ifname == "" || len(cfg.Ifname) >= unix.IFNAMSIZ:
		return bad("interface name %q", cfg.Ifname)
	case cfg.Mode < XDPModeAuto || cfg.Mode > XDPModeGeneric:
		return bad("mode %v", cfg.Mode)
	case cfg.FrameSize != 2048 && cfg.FrameSize != 4096:
		return bad("frame size %d is not 2048 or 4096", cfg.FrameSize)
	case cfg.NumFrames < 2 || cfg.NumFrames > MaxXDPNumFrames || cfg.NumFrames%2 != 0:
		return bad("%d frames: want an even number in 2..%d", cfg.NumFrames, MaxXDPNumFrames)
	case cfg.RingSize < 2 || cfg.RingSize > MaxXDPRingSize || cfg.RingSize&(cfg.RingSize-1) != 0:
		return bad("ring size %d: want a power of two in 2..%d", cfg.RingSize, MaxXDPRingSize)
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

// XDPPort is an XDP program on an interface with one AF_XDP socket per
// bound RX queue. Create it with OpenXDP; Close it when done.
type XDPPort struct {
	mu      sync.Mutex
	ifname  string
	ifindex int
	mode    XDPMode
	prog    *xdpProgram
	socks   []*XSK
	closed  bool
}

// OpenXDP loads the XDP program, opens and registers one socket per queue,
// and attaches the program to cfg.Ifname in the calling thread's network
// namespace (call it from a goroutine locked to a thread in that
// namespace). It refuses, and leaves alone, an XDP program someone else
// attached (ErrXDPAttached). It needs CAP_NET_ADMIN, CAP_BPF and
// CAP_NET_RAW (root has them).
func OpenXDP(cfg XDPConfig) (*XDPPort, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := xdpCheckCaps(); err != nil {
		return nil, err
	}
	link, err := netlink.LinkByName(cfg.Ifname)
	if err != nil {
		return nil, fmt.Errorf("AF_XDP port: interface %q: %w", cfg.Ifname, err)
	}
	if attached, id := attachedXDP(link); attached {
		return nil, fmt.Errorf("AF_XDP port on %s: %w (program ID %d); remove it first (ip link set dev %s xdp off)",
			cfg.Ifname, ErrXDPAttached, id, cfg.Ifname)
	}
	queues, err := xdpQueues(link, cfg.Queues)
	if err != nil {
		return nil, err
	}
	p := &XDPPort{ifname: cfg.Ifname, ifindex: link.Attrs().Index}
	if err := p.open(link, cfg, queues); err != nil {
		return nil, errors.Join(err, p.Close())
	}
	return p, nil
}

// open does OpenXDP's work; the caller closes p on error.
func (p *XDPPort) open(link netlink.Link, cfg XDPConfig, queues []int) error {
	var err error
	if p.prog, err = newXDPProgram(slices.Max(queues)); err != nil {
		return fmt.Errorf("AF_XDP port on %s: %w", p.ifname, err)
	}
	if err := p.prog.setPrefixes(cfg.Redirect); err != nil {
		return fmt.Errorf("AF_XDP port on %s: %w", p.ifname, err)
	}
	for _, q := range queues {
		x, err := newXSK(p.ifname, p.ifindex, q, cfg)
		if err != nil {
			return err
		}
		p.socks = append(p.socks, x)
		if err := p.prog.register(q, x.fd); err != nil {
			return err
		}
	}
	p.mode, err = p.prog.attach(link, cfg.Mode)
	return err
}

// xdpCheckCaps names the missing capabilities before anything is created.
func xdpCheckCaps() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return nil // cannot tell: the system calls will say
	}
	has := func(c uint) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
	var missing []string
	if !has(unix.CAP_NET_ADMIN) {
		missing = append(missing, "CAP_NET_ADMIN")
	}
	if !has(unix.CAP_BPF) && !has(unix.CAP_SYS_ADMIN) {
		missing = append(missing, "CAP_BPF")
	}
	if !has(unix.CAP_NET_RAW) {
		missing = append(missing, "CAP_NET_RAW")
	}
	if len(missing) > 0 {
		return fmt.Errorf("AF_XDP port: needs CAP_NET_ADMIN and CAP_BPF (and CAP_NET_RAW for the sockets); missing %v: %w",
			missing, os.ErrPermission)
	}
	return nil
}

// xdpQueues returns the queues to bind: want, checked against the
// interface, or all of its RX queues. (Not /sys/class/net/<if>/queues:
// sysfs shows the namespace it was mounted in, not the caller's.)
func xdpQueues(link netlink.Link, want []int) ([]int, error) {
	n := link.Attrs().NumRxQueues
	if rx, combined, err := xskChannels(link.Attrs().Name); err == nil && rx+combined > 0 {
		n = min(xdpOr(n, rx+combined), rx+combined)
	}
	n = max(n, 1)
	if want == nil {
		want = make([]int, n)
		for i := range want {
			want[i] = i
		}
	}
	for _, q := range want {
		if q >= n {
			return nil, fmt.Errorf("AF_XDP port: %w: %s has %d RX queues, no queue %d",
				ErrInvalidConfig, link.Attrs().Name, n, q)
		}
	}
	if len(want) == 0 {
		return nil, fmt.Errorf("AF_XDP port: %w: no queues", ErrInvalidConfig)
	}
	return slices.Clone(want), nil
}

// Sockets returns the sockets, one per bound queue, in XDPConfig.Queues
// order (a new slice: keep it rather than calling Sockets per packet).
func (p *XDPPort) Sockets() []*XSK { return slices.Clone(p.socks) }

// Mode returns the effective attach mode (native or generic).
func (p *XDPPort) Mode() XDPMode { return p.mode }

// Ifindex returns the interface index.
func (p *XDPPort) Ifindex() int { return p.ifindex }

// SetRedirect replaces the redirect prefixes: afterwards exactly these
// destinations go to the sockets.
func (p *XDPPort) SetRedirect(prefixes []netip.Prefix) error {
	checked, err := xdpPrefixes(prefixes)
	if err != nil {
		return fmt.Errorf("AF_XDP port: %w: %v", ErrInvalidConfig, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrXDPClosed
	}
	return p.prog.setPrefixes(checked)
}

// Close unregisters the sockets, detaches the XDP program if it is still
// ours, and closes the sockets and the program. It may be called from any
// goroutine and more than once; the sockets' methods then return
// ErrXDPClosed. It must not run while another goroutine is inside a
// socket's method holding a frame slice it still writes to.
func (p *XDPPort) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	var err error
	if p.prog != nil {
		for _, x := range p.socks {
			err = errors.Join(err, p.prog.unregister(x.queueID))
		}
		err = errors.Join(err, p.prog.detach())
	}
	for _, x := range p.socks {
		err = errors.Join(err, x.close())
	}
	if p.prog != nil {
		err = errors.Join(err, p.prog.close())
	}
	if err != nil {
		return fmt.Errorf("close AF_XDP port on %s: %w", p.ifname, err)
	}
	return nil
}

// Frame owners, per UMEM frame.
const (
	xskFrameKernel uint8 = iota // in the fill, RX, TX or completion ring
	xskFrameFree                // TX: on the free list
	xskFrameUser                // handed out by Alloc or Receive
	xskFrameSpare               // RX: waiting for room in the fill ring
)

// XSK is one AF_XDP socket bound to one RX queue, with its own UMEM and
// four rings. The TX methods (Alloc, Frame, Transmit, Complete, Free,
// TXFree) must be called from one goroutine at a time, the RX methods
// (Receive, Recycle) from one goroutine at a time; the two sides may run
// concurrently. Stats and Wait may be called from anywhere.
type XSK struct {
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
	st         xskCounters
	final      XSKStats // kernel counters read at close
}

type xskCounters struct {
	rx, tx, completed, kicks, kickRetries, kickErrors, badFrames atomic.Uint64
}

// XSKStats are a socket's counters.
type XSKStats struct {
	RX          uint64 // frames returned by Receive
	TX          uint64 // frames put on the TX ring
	Completed   uint64 // frames returned by the completion ring
	Kicks       uint64 // sendto/recvfrom wakeups
	KickRetries uint64 // wakeups that got EAGAIN, EBUSY, ENOBUFS or EINTR (retried later)
	KickErrors  uint64 // wakeups that failed otherwise
	BadFrames   uint64 // addresses refused by Transmit/Recycle/Free, bad ring entries

	// From the kernel (XDP_STATISTICS).
	RXDropped   uint64 // dropped for other reasons (e.g. too big for a frame)
	RXInvalid   uint64 // invalid RX descriptors
	RXRingFull  uint64 // dropped because the RX ring was full
	RXFillEmpty uint64 // times the fill ring was empty when a packet came
	TXInvalid   uint64 // invalid TX descriptors
	TXRingEmpty uint64 // times the TX ring was empty on a wakeup
}

// newXSK opens, sets up and binds the socket of one queue.
func newXSK(ifname string, ifindex, queue int, cfg XDPConfig) (*XSK, error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		switch {
		case errors.Is(err, unix.EAFNOSUPPORT):
			return nil, fmt.Errorf("AF_XDP socket: %w: %w", ErrXDPUnsupported, os.NewSyscallError("socket", err))
		case errors.Is(err, unix.EPERM):
			return nil, fmt.Errorf("AF_XDP socket: needs CAP_NET_RAW: %w", os.NewSyscallError("socket", err))
		}
		return nil, fmt.Errorf("AF_XDP socket: %w", os.NewSyscallError("socket", err))
	}
	x := &XSK{fd: fd, queueID: queue, frameSize: cfg.FrameSize, rxFrames: uint32(cfg.NumFrames / 2)}
	for 1<<x.frameShift < x.frameSize {
		x.frameShift++
	}
	if err := x.setup(ifindex, cfg); err != nil {
		return nil, errors.Join(fmt.Errorf("AF_XDP socket on %s queue %d: %w", ifname, queue, err), x.close())
	}
	return x, nil
}

// setup registers the UMEM, creates and maps the rings, binds, and fills
// the fill ring.
func (x *XSK) setup(ifindex int, cfg XDPConfig) error {
	umem, err := unix.Mmap(-1, 0, cfg.NumFrames*cfg.FrameSize, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("UMEM: %w", os.NewSyscallError("mmap", err))
	}
	x.umem = umem
	if err := xskRegisterUMEM(x.fd, umem, cfg.FrameSize); err != nil {
		return fmt.Errorf("register UMEM (%d bytes; RLIMIT_MEMLOCK without CAP_IPC_LOCK?): %w", len(umem), err)
	}
	if err := x.mapRings(uint32(cfg.RingSize)); err != nil {
		return err
	}
	if err := x.bind(ifindex, cfg.ZeroCopy); err != nil {
		return err
	}
	x.initFrames(cfg.NumFrames)
	return nil
}

// mapRings sizes and maps the four rings.
func (x *XSK) mapRings(n uint32) error {
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

// bind binds the socket to the queue in copy or zero-copy mode.
func (x *XSK) bind(ifindex int, zeroCopy bool) error {
	flags := uint16(unix.XDP_USE_NEED_WAKEUP | unix.XDP_COPY)
	if zeroCopy {
		flags = unix.XDP_USE_NEED_WAKEUP | unix.XDP_ZEROCOPY
	}
	sa := &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(ifindex), QueueID: uint32(x.queueID)}
	err := unix.Bind(x.fd, sa)
	// A socket closed a moment ago holds its queue until the kernel has
	// released it (after an RCU grace period, from a workqueue): EBUSY
	// right after a Close is retried for a while.
	for start := time.Now(); errors.Is(err, unix.EBUSY) && time.Since(start) < xskBindBusyWait; {
		time.Sleep(5 * time.Millisecond)
		err = unix.Bind(x.fd, sa)
	}
	switch {
	case err == nil:
		return nil
	case zeroCopy && (errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL)):
		return fmt.Errorf("bind: %w (use copy mode): %w", ErrXDPZeroCopy, os.NewSyscallError("bind", err))
	case errors.Is(err, unix.EBUSY):
		return fmt.Errorf("bind: the queue already has an AF_XDP socket (waited %v): %w", xskBindBusyWait, os.NewSyscallError("bind", err))
	}
	return fmt.Errorf("bind: %w", os.NewSyscallError("bind", err))
}

// initFrames puts the TX frames on the free list and the RX frames into
// the fill ring (those that do not fit wait as spares).
func (x *XSK) initFrames(n int) {
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
func (x *XSK) close() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return nil
	}
	x.closed = true
	x.final = x.kernelStats()
	err := os.NewSyscallError("close", unix.Close(x.fd))
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
func (x *XSK) enter() bool {
	x.mu.RLock()
	if x.closed {
		x.mu.RUnlock()
		return false
	}
	return true
}

// QueueID returns the RX queue the socket is bound to.
func (x *XSK) QueueID() int { return x.queueID }

// FD returns the socket's file descriptor (-1 once closed).
func (x *XSK) FD() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.fd
}

// FrameSize returns the UMEM frame size.
func (x *XSK) FrameSize() int { return x.frameSize }

// frameIndex returns the index of the frame starting at addr.
func (x *XSK) frameIndex(addr uint64) (uint32, bool) {
	i := addr >> x.frameShift
	if addr&uint64(x.frameSize-1) != 0 || i >= uint64(len(x.state)) {
		return 0, false
	}
	return uint32(i), true
}

// Alloc fills addrs with up to len(addrs) free TX frame addresses, O(1)
// each, and returns how many; 0 when none is free (call Complete).
func (x *XSK) Alloc(addrs []uint64) int {
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

// Free returns allocated TX frames that will not be transmitted to the
// free list. Addresses that are not allocated TX frames are counted
// (BadFrames) and ignored.
func (x *XSK) Free(addrs []uint64) {
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

// TXFree returns how many TX frames are on the free list.
func (x *XSK) TXFree() int {
	if !x.enter() {
		return 0
	}
	defer x.mu.RUnlock()
	return len(x.txFree)
}

// Frame returns the memory of the frame at addr (from Alloc or Receive),
// FrameSize bytes; nil for an address that is not a frame or once the
// socket is closed. The slice must not be used after Close.
func (x *XSK) Frame(addr uint64) []byte {
	if !x.enter() {
		return nil
	}
	defer x.mu.RUnlock()
	if _, ok := x.frameIndex(addr); !ok {
		return nil
	}
	end := addr + uint64(x.frameSize)
	return x.umem[addr:end:end]
}

// Transmit puts frames from Alloc, with the packet lengths lens, on the TX
// ring, as many as fit, and returns how many it took (the caller keeps the
// rest). It wakes the kernel with sendto(MSG_DONTWAIT) when the ring asks
// for it; EAGAIN, EBUSY, ENOBUFS and EINTR only mean "try again" and are
// counted (KickRetries) and retried by the next Transmit or Complete.
// Other errors are returned, wrapped. A frame that is not an allocated TX
// frame or a length outside 1..FrameSize stops the batch there with
// ErrXDPBadFrame. After Close it returns ErrXDPClosed.
func (x *XSK) Transmit(addrs []uint64, lens []int) (int, error) {
	if !x.enter() {
		return 0, ErrXDPClosed
	}
	defer x.mu.RUnlock()
	room := x.tx.size - (x.tx.local - x.tx.loadConsumer())
	n := min(len(addrs), len(lens), int(room))
	var err error
	i := 0
	for ; i < n; i++ {
		f, ok := x.frameIndex(addrs[i])
		if !ok || f < x.rxFrames || x.state[f] != xskFrameUser || lens[i] <= 0 || lens[i] > x.frameSize {
			x.st.badFrames.Add(1)
			err = fmt.Errorf("AF_XDP transmit: frame %#x length %d: %w", addrs[i], lens[i], ErrXDPBadFrame)
			break
		}
		x.state[f] = xskFrameKernel
		d := &x.tx.descs[(x.tx.local+uint32(i))&x.tx.mask]
		d.Addr, d.Len, d.Options = addrs[i], uint32(lens[i]), 0
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

// kickTX wakes the kernel up if the TX ring has entries it has not taken
// yet and it asked to be woken up.
func (x *XSK) kickTX() error {
	if x.tx.local == x.tx.loadConsumer() || !x.tx.needWakeup() {
		return nil
	}
	x.st.kicks.Add(1)
	_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(x.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return x.kickResult("sendto", e)
}

// kickFill wakes the kernel up if it asked for fill ring entries.
func (x *XSK) kickFill() {
	if !x.fill.needWakeup() {
		return
	}
	x.st.kicks.Add(1)
	_, _, e := unix.Syscall6(unix.SYS_RECVFROM, uintptr(x.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	_ = x.kickResult("recvfrom", e) // counted; RX has no error to report it with
}

// kickResult counts a wakeup's outcome and returns the errors callers
// must see.
func (x *XSK) kickResult(op string, e unix.Errno) error {
	switch e {
	case 0:
		return nil
	case unix.EAGAIN, unix.EBUSY, unix.ENOBUFS, unix.EINTR:
		x.st.kickRetries.Add(1)
		return nil
	}
	x.st.kickErrors.Add(1)
	return fmt.Errorf("AF_XDP queue %d: %w", x.queueID, os.NewSyscallError(op, e))
}

// Complete drains the completion ring: the transmitted frames go back to
// the free list. It returns how many; completions come in submission
// order, so callers release their budget FIFO. It also wakes the kernel
// up for TX entries still waiting on the ring (copy mode sends a bounded
// batch per wakeup).
func (x *XSK) Complete() int {
	if !x.enter() {
		return 0
	}
	defer x.mu.RUnlock()
	prod := x.comp.loadProducer()
	n := prod - x.comp.local
	for i := range n {
		a := x.comp.descs[(x.comp.local+i)&x.comp.mask]
		f, ok := x.frameIndex(a)
		if !ok || f < x.rxFrames || x.state[f] != xskFrameKernel {
			x.st.badFrames.Add(1)
			continue
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
	return int(n)
}

// Receive returns up to min(len(bufs), len(addrs)) received packets:
// bufs[i] is the packet inside the UMEM (a view, valid until the frame is
// recycled), addrs[i] its frame, to give back with Recycle. 0 when none is
// waiting (see Wait).
func (x *XSK) Receive(bufs [][]byte, addrs []uint64) int {
	if !x.enter() {
		return 0
	}
	defer x.mu.RUnlock()
	avail := x.rx.loadProducer() - x.rx.local
	n := min(uint32(min(len(bufs), len(addrs))), avail)
	got := 0
	for i := range n {
		d := x.rx.descs[(x.rx.local+i)&x.rx.mask]
		base := d.Addr &^ uint64(x.frameSize-1)
		f, ok := x.frameIndex(base)
		if !ok || f >= x.rxFrames || x.state[f] != xskFrameKernel || d.Addr+uint64(d.Len) > base+uint64(x.frameSize) {
			x.st.badFrames.Add(1)
			continue
		}
		x.state[f] = xskFrameUser
		bufs[got] = x.umem[d.Addr : d.Addr+uint64(d.Len) : base+uint64(x.frameSize)]
		addrs[got] = base
		got++
	}
	x.rx.local += n
	x.rx.publishConsumer()
	x.st.rx.Add(uint64(got))
	if len(x.rxSpare) > 0 {
		x.fillFromSpare()
	}
	return got
}

// Recycle gives received frames back to the kernel (fill ring). Addresses
// that are not received frames are counted (BadFrames) and ignored.
func (x *XSK) Recycle(addrs []uint64) {
	if !x.enter() {
		return
	}
	defer x.mu.RUnlock()
	for _, a := range addrs {
		f, ok := x.frameIndex(a)
		if !ok || f >= x.rxFrames || x.state[f] != xskFrameUser {
			x.st.badFrames.Add(1)
			continue
		}
		x.state[f] = xskFrameSpare
		x.rxSpare = append(x.rxSpare, a)
	}
	x.fillFromSpare()
	x.kickFill()
}

// fillFromSpare moves spare RX frames into the fill ring while it has room.
func (x *XSK) fillFromSpare() {
	room := x.fill.size - (x.fill.local - x.fill.loadConsumer())
	n := min(int(room), len(x.rxSpare))
	if n == 0 {
		return
	}
	top := len(x.rxSpare) - n
	for i, a := range x.rxSpare[top:] {
		x.state[a>>x.frameShift] = xskFrameKernel
		x.fill.descs[(x.fill.local+uint32(i))&x.fill.mask] = a
	}
	x.rxSpare = x.rxSpare[:top]
	x.fill.local += uint32(n)
	x.fill.publishProducer()
}

// Wait waits up to timeout (negative: forever) until packets can be
// received (rx) or the TX ring has room (tx), with poll(2); EINTR is
// retried. In copy mode the poll also sends what is on the TX ring.
// Completions do not wake it: a sender waiting for free frames should
// call Complete periodically. The TX ring almost always has room, so a
// receiver should use WaitRX.
func (x *XSK) Wait(timeout time.Duration) (rx, tx bool, err error) {
	return x.wait(timeout, unix.POLLIN|unix.POLLOUT)
}

// WaitRX waits up to timeout (negative: forever) until packets can be
// received; it reports whether they can.
func (x *XSK) WaitRX(timeout time.Duration) (bool, error) {
	rx, _, err := x.wait(timeout, unix.POLLIN)
	return rx, err
}

func (x *XSK) wait(timeout time.Duration, events int16) (rx, tx bool, err error) {
	x.mu.RLock()
	closed, fd := x.closed, x.fd
	x.mu.RUnlock()
	if closed {
		return false, false, ErrXDPClosed
	}
	deadline := time.Now().Add(timeout)
	for {
		ms := -1
		if timeout >= 0 {
			ms = int((time.Until(deadline) + time.Millisecond - 1) / time.Millisecond)
			ms = max(ms, 0)
		}
		pfd := [1]unix.PollFd{{Fd: int32(fd), Events: events}}
		_, err := unix.Poll(pfd[:], ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, false, fmt.Errorf("AF_XDP queue %d: %w", x.queueID, os.NewSyscallError("poll", err))
		}
		ev := pfd[0].Revents
		if ev&unix.POLLNVAL != 0 {
			return false, false, ErrXDPClosed
		}
		if ev&unix.POLLERR != 0 {
			return false, false, fmt.Errorf("AF_XDP queue %d: poll: socket error", x.queueID)
		}
		return ev&unix.POLLIN != 0, ev&unix.POLLOUT != 0, nil
	}
}

// Stats returns the socket's counters, the kernel's included (as of
// Close, once closed).
func (x *XSK) Stats() XSKStats {
	x.mu.RLock()
	s := x.final
	if !x.closed {
		s = x.kernelStats()
	}
	x.mu.RUnlock()
	s.RX, s.TX, s.Completed = x.st.rx.Load(), x.st.tx.Load(), x.st.completed.Load()
	s.Kicks, s.KickRetries, s.KickErrors = x.st.kicks.Load(), x.st.kickRetries.Load(), x.st.kickErrors.Load()
	s.BadFrames = x.st.badFrames.Load()
	return s
}

// kernelStats reads XDP_STATISTICS (zero if it fails).
func (x *XSK) kernelStats() XSKStats {
	k, err := xskStatistics(x.fd)
	if err != nil {
		return XSKStats{}
	}
	return XSKStats{
		RXDropped: k.Rx_dropped, RXInvalid: k.Rx_invalid_descs, RXRingFull: k.Rx_ring_full,
		RXFillEmpty: k.Rx_fill_ring_empty_descs, TXInvalid: k.Tx_invalid_descs, TXRingEmpty: k.Tx_ring_empty_descs,
	}
}
