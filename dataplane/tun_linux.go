package dataplane

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/segment"
)

// tunDevicePath is the TUN clone device.
const tunDevicePath = "/dev/net/tun"

// DefaultTUNSndBuf is the TUNSETSNDBUF value used when TUNConfig.SndBuf is
// 0: 4 MiB of truesize, instead of the kernel's unbounded INT_MAX.
const DefaultTUNSndBuf = 4 << 20

// MaxTUNQueues is the largest TUNConfig.Queues (the kernel's MAX_TAP_QUEUES).
const MaxTUNQueues = 256

// maxIfNameLen is the longest interface name (IFNAMSIZ less the NUL).
const maxIfNameLen = unix.IFNAMSIZ - 1

// tunFlags are the TUNSETIFF flags of every queue.
const tunFlags = unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR

// Errors callers can act on.
var (
	// ErrInvalidConfig is wrapped by errors about a config that OpenTUN
	// refused before making any system call.
	ErrInvalidConfig = errors.New("invalid config")
	// ErrPacketTruncated is wrapped by Read errors about a packet longer
	// than its buffer (the kernel copies what fits and drops the rest, so
	// Read checks a packet that fills its buffer against its IP header).
	// The packet is lost; buffers of HeaderSize+65535 bytes after the
	// offset never see it.
	ErrPacketTruncated = errors.New("packet larger than the read buffer")
)

// Offloads is a set of TUNSETOFFLOAD flags: what the kernel may hand to a
// TUN reader without segmenting or checksumming it first.
type Offloads uint32

// The TUNSETOFFLOAD flags (include/uapi/linux/if_tun.h).
const (
	OffloadCsum   Offloads = unix.TUN_F_CSUM    // partial checksums (NEEDS_CSUM)
	OffloadTSO4   Offloads = unix.TUN_F_TSO4    // TCP super-packets over IPv4
	OffloadTSO6   Offloads = unix.TUN_F_TSO6    // TCP super-packets over IPv6
	OffloadTSOECN Offloads = unix.TUN_F_TSO_ECN // TSO with CWR set (GSO ECN flag)
	OffloadUFO    Offloads = unix.TUN_F_UFO     // legacy UFO (accepted, ignored by the kernel)
	OffloadUSO4   Offloads = unix.TUN_F_USO4    // UDP_SEGMENT super-packets over IPv4 (Linux 6.2+)
	OffloadUSO6   Offloads = unix.TUN_F_USO6    // UDP_SEGMENT super-packets over IPv6 (Linux 6.2+)
)

// DefaultOffloads is what OpenTUN asks for when TUNConfig.Offload is set.
const DefaultOffloads = OffloadCsum | OffloadTSO4 | OffloadTSO6 | OffloadTSOECN | OffloadUSO4 | OffloadUSO6

// offloadFallbacks are the sets OpenTUN tries in turn when the kernel
// refuses one with EINVAL: without USO (before Linux 6.2), then without ECN.
var offloadFallbacks = [...]Offloads{
	DefaultOffloads,
	DefaultOffloads &^ (OffloadUSO4 | OffloadUSO6),
	DefaultOffloads &^ (OffloadUSO4 | OffloadUSO6 | OffloadTSOECN),
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

// TUNConfig says which TUN device to open and how to set it up. OpenTUN
// works in the network namespace of the calling thread.
type TUNConfig struct {
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
	// Offload enables DefaultOffloads, falling back without USO and then
	// without ECN when the kernel refuses them (TUN.Offloads says what was
	// accepted). Without it the device has no offloads and the kernel
	// segments and checksums every packet before the TUN.
	Offload bool
	// HeaderSize is the virtio-net header size: segment.HeaderSize (10,
	// the default when 0) or segment.HeaderSizeMrg (12).
	HeaderSize int
	// SndBuf bounds the truesize of written packets still charged to
	// the TUN (TUNSETSNDBUF); Write blocks while it is reached. 0 means
	// DefaultTUNSndBuf. The charge ends early: the kernel's IP input
	// (ip_rcv) orphans the packet inside write() for routed and local
	// traffic alike, so this is a safety bound, not backpressure from a
	// slow egress (measured on Linux 6.18: a tbf on the egress device did
	// not make a 32 KiB SndBuf block).
	SndBuf int
}

// withDefaults fills in defaults and checks cfg without any system call.
func (cfg TUNConfig) withDefaults() (TUNConfig, error) {
	bad := func(format string, args ...any) (TUNConfig, error) {
		return cfg, fmt.Errorf("open TUN %q: %w: %s", cfg.Name, ErrInvalidConfig, fmt.Sprintf(format, args...))
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
		cfg.SndBuf = DefaultTUNSndBuf
	}
	switch {
	case cfg.Queues < 0 || cfg.Queues > MaxTUNQueues:
		return bad("%d queues, want 1 to %d", cfg.Queues, MaxTUNQueues)
	case cfg.HeaderSize != segment.HeaderSize && cfg.HeaderSize != segment.HeaderSizeMrg:
		return bad("header size %d, want %d or %d", cfg.HeaderSize, segment.HeaderSize, segment.HeaderSizeMrg)
	case cfg.MTU < 0:
		return bad("MTU %d", cfg.MTU)
	case cfg.SndBuf < 0 || cfg.SndBuf > 1<<31-1:
		return bad("send buffer %d bytes, want 1 to 2^31-1", cfg.SndBuf)
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

// TUN is an open TUN device: one file descriptor per queue.
type TUN struct {
	name     string
	index    int
	offloads Offloads
	hdrSize  int
	created  bool
	queues   []*TUNQueue
	closed   atomic.Bool
}

// OpenTUN creates or attaches the TUN device described by cfg in the
// calling thread's network namespace and configures it: header size,
// offloads, send buffer and MTU. The device is configured as a whole, so
// attaching an existing device changes these settings for its other users
// too. OpenTUN neither brings the device up nor assigns addresses.
//
// It needs CAP_NET_ADMIN to create a device (or to attach one owned by
// someone else) and says so when it is missing.
func OpenTUN(cfg TUNConfig) (*TUN, error) {
	return openTUN(cfg, tunDevicePath)
}

func openTUN(cfg TUNConfig, path string) (*TUN, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	_, err = ifIndex(cfg.Name)
	t := &TUN{name: cfg.Name, hdrSize: cfg.HeaderSize, created: cfg.Name == "" || err != nil}
	fds, err := t.attach(cfg, path)
	if err == nil {
		err = t.configure(fds[0], cfg)
	}
	if err != nil {
		closeFDs(fds)
		return nil, err
	}
	t.queues = make([]*TUNQueue, len(fds))
	for i, fd := range fds {
		if t.queues[i], err = newTUNQueue(t, i, fd); err != nil {
			closeFDs(fds[i+1:])
			t.Close()
			return nil, err
		}
	}
	return t, nil
}

// verb says whether OpenTUN creates or attaches the device, for errors.
func (t *TUN) verb() string {
	if t.created {
		return "create"
	}
	return "attach"
}

// attach opens cfg.Queues file descriptors on the device. The first one
// creates it when missing and learns its name if the kernel chose it.
func (t *TUN) attach(cfg TUNConfig, path string) ([]int, error) {
	flags := uint16(tunFlags)
	if cfg.Queues > 1 {
		flags |= unix.IFF_MULTI_QUEUE
	}
	fds := make([]int, 0, cfg.Queues)
	for range cfg.Queues {
		fd, name, err := t.openQueue(path, flags)
		if err != nil {
			closeFDs(fds)
			return nil, err
		}
		t.name = name
		fds = append(fds, fd)
	}
	return fds, nil
}

// openQueue opens the clone device and binds it to the device (TUNSETIFF).
func (t *TUN) openQueue(path string, flags uint16) (int, string, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", t.openError(path, err)
	}
	ifr, err := unix.NewIfreq(t.name)
	if err != nil { // unreachable: the name was checked
		unix.Close(fd)
		return -1, "", fmt.Errorf("%s TUN %s: %w", t.verb(), t.name, err)
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return -1, "", t.setIffError(err)
	}
	return fd, ifr.Name(), nil
}

func (t *TUN) openError(path string, err error) error {
	if errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%s TUN %s: %s is missing (is the tun module loaded? modprobe tun): %w",
			t.verb(), t.name, path, os.NewSyscallError("open", err))
	}
	return fmt.Errorf("%s TUN %s: %w", t.verb(), t.name, os.NewSyscallError("open "+path, err))
}

func (t *TUN) setIffError(err error) error {
	switch {
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("%s TUN %s: needs CAP_NET_ADMIN: %w", t.verb(), t.name, err)
	case errors.Is(err, unix.EBUSY):
		return fmt.Errorf("%s TUN %s: already attached by another file and not multi-queue: %w",
			t.verb(), t.name, os.NewSyscallError("ioctl TUNSETIFF", err))
	case errors.Is(err, unix.EINVAL) && !t.created:
		return fmt.Errorf("%s TUN %s: not a TUN device, or its queue mode (IFF_MULTI_QUEUE) differs: %w",
			t.verb(), t.name, os.NewSyscallError("ioctl TUNSETIFF", err))
	}
	return fmt.Errorf("%s TUN %s: %w", t.verb(), t.name, os.NewSyscallError("ioctl TUNSETIFF", err))
}

// configure sets the device-wide settings through one of its queues.
func (t *TUN) configure(fd int, cfg TUNConfig) error {
	wrap := func(what string, err error) error {
		return fmt.Errorf("%s TUN %s: %s: %w", t.verb(), t.name, what, err)
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, cfg.HeaderSize); err != nil {
		return wrap(fmt.Sprintf("header size %d", cfg.HeaderSize), os.NewSyscallError("ioctl TUNSETVNETHDRSZ", err))
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETSNDBUF, cfg.SndBuf); err != nil {
		return wrap(fmt.Sprintf("send buffer %d", cfg.SndBuf), os.NewSyscallError("ioctl TUNSETSNDBUF", err))
	}
	var err error
	if t.offloads, err = setOffloads(fd, cfg.Offload); err != nil {
		return wrap("offloads", err)
	}
	if cfg.MTU != 0 {
		if err := setMTU(t.name, cfg.MTU); err != nil {
			return wrap(fmt.Sprintf("MTU %d", cfg.MTU), err)
		}
	}
	if t.index, err = ifIndex(t.name); err != nil {
		return wrap("index", err)
	}
	return nil
}

// setOffloads enables DefaultOffloads or the first fallback the kernel
// accepts, or clears all offloads when offload is false.
func setOffloads(fd int, offload bool) (Offloads, error) {
	if !offload {
		return 0, os.NewSyscallError("ioctl TUNSETOFFLOAD", unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, 0))
	}
	var err error
	for _, o := range offloadFallbacks {
		if err = unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, int(o)); err == nil {
			return o, nil
		}
		if !errors.Is(err, unix.EINVAL) {
			break
		}
	}
	return 0, os.NewSyscallError("ioctl TUNSETOFFLOAD", err)
}

// ifreqIoctl runs an interface ioctl (SIOCGIFINDEX, SIOCSIFMTU) through a
// throw-away socket in the calling thread's network namespace.
func ifreqIoctl(req uint, ifr *unix.Ifreq) error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return os.NewSyscallError("socket", err)
	}
	defer unix.Close(s)
	return unix.IoctlIfreq(s, req, ifr)
}

// ifIndex returns the index of the interface called name.
func ifIndex(name string) (int, error) {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return 0, err
	}
	if err := ifreqIoctl(unix.SIOCGIFINDEX, ifr); err != nil {
		return 0, os.NewSyscallError("ioctl SIOCGIFINDEX", err)
	}
	return int(ifr.Uint32()), nil
}

// setMTU sets the MTU of the interface called name.
func setMTU(name string, mtu int) error {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	ifr.SetUint32(uint32(mtu))
	return os.NewSyscallError("ioctl SIOCSIFMTU", ifreqIoctl(unix.SIOCSIFMTU, ifr))
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// Name returns the device name (the kernel's choice if TUNConfig.Name was
// empty).
func (t *TUN) Name() string { return t.name }

// Index returns the device's interface index.
func (t *TUN) Index() int { return t.index }

// Offloads returns the offloads the kernel accepted: DefaultOffloads, a
// fallback without USO or ECN, or none when TUNConfig.Offload was false.
func (t *TUN) Offloads() Offloads { return t.offloads }

// HeaderSize returns the virtio-net header size in front of every packet
// read or written: segment.HeaderSize or segment.HeaderSizeMrg.
func (t *TUN) HeaderSize() int { return t.hdrSize }

// Queues returns the queues, one per file descriptor.
func (t *TUN) Queues() []*TUNQueue { return slices.Clone(t.queues) }

// Close closes every queue. Reads and writes blocked on them return errors
// wrapping os.ErrClosed. A device that OpenTUN created disappears with its
// last file descriptor (it is not persistent); an attached one stays.
// Close is idempotent: later calls return nil.
func (t *TUN) Close() error {
	if !t.closed.CompareAndSwap(false, true) {
		return nil
	}
	var errs []error
	for _, q := range t.queues {
		if q == nil {
			continue
		}
		if err := q.file.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close TUN %s queue %d: %w", t.name, q.index, err))
		}
	}
	return errors.Join(errs...)
}

// TUNQueue is one queue (file descriptor) of a TUN. Read and Write may run
// concurrently with each other; concurrent Reads (or Writes) on one queue
// take turns.
type TUNQueue struct {
	tun   *TUN
	index int
	file  *os.File
	rc    syscall.RawConn

	rmu    sync.Mutex
	rd     readOp // the Read in progress, under rmu
	readFn func(uintptr) bool

	wmu     sync.Mutex
	wr      writeOp // the Write in progress, under wmu
	writeFn func(uintptr) bool
}

// newTUNQueue makes fd non-blocking and hands it to the Go runtime poller.
func newTUNQueue(t *TUN, index, fd int) (*TUNQueue, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("open TUN %s queue %d: %w", t.name, index, os.NewSyscallError("fcntl", err))
	}
	q := &TUNQueue{tun: t, index: index, file: os.NewFile(uintptr(fd), tunDevicePath)}
	rc, err := q.file.SyscallConn()
	if err != nil {
		q.file.Close()
		return nil, fmt.Errorf("open TUN %s queue %d: %w", t.name, index, err)
	}
	q.rc = rc
	q.rd.hdrSize, q.wr.hdrSize = t.hdrSize, t.hdrSize
	// Method values made once, so that Read and Write do not allocate.
	q.readFn, q.writeFn = q.rd.do, q.wr.do
	return q, nil
}

// Read reads up to min(len(bufs), len(sizes)) packets: packet i, virtio-net
// header first, lands at bufs[i][offset:offset+sizes[i]]. It blocks
// (through the Go runtime poller) until at least one packet is there, then
// reads on without blocking until the buffers are full or no packet is
// left: one call is one batch.
//
// A packet longer than its buffer is lost and reported with an error
// wrapping ErrPacketTruncated; size buffers to HeaderSize()+65535 bytes
// after the offset. When err is not nil, the n packets before it are valid.
// After Close, Read returns an error wrapping os.ErrClosed.
func (q *TUNQueue) Read(bufs [][]byte, sizes []int, offset int) (n int, err error) {
	bufs = bufs[:min(len(bufs), len(sizes))]
	if len(bufs) == 0 {
		return 0, nil
	}
	if offset < 0 {
		return 0, fmt.Errorf("read TUN %s queue %d: negative offset %d", q.tun.name, q.index, offset)
	}
	q.rmu.Lock()
	defer q.rmu.Unlock()
	q.rd.start(bufs, sizes, offset)
	err = q.rc.Read(q.readFn)
	n, opErr := q.rd.finish()
	if err == nil {
		err = opErr
	}
	if err != nil {
		return n, q.ioError("read", n, err)
	}
	return n, nil
}

// Write writes bufs[i][offset:], a virtio-net header followed by a packet,
// for each i in order. The kernel processes each packet inside the write
// (routing, local delivery); Write blocks (through the Go runtime poller)
// only while the device's send buffer (TUNConfig.SndBuf) is full. It
// returns how many
// packets were written; on error, bufs[n] is the packet that failed (the
// kernel refuses, for example, a header it cannot parse) and the packets
// after it were not tried. After Close, Write returns an error wrapping
// os.ErrClosed.
func (q *TUNQueue) Write(bufs [][]byte, offset int) (n int, err error) {
	if len(bufs) == 0 {
		return 0, nil
	}
	if offset < 0 {
		return 0, fmt.Errorf("write TUN %s queue %d: negative offset %d", q.tun.name, q.index, offset)
	}
	q.wmu.Lock()
	defer q.wmu.Unlock()
	q.wr.start(bufs, offset)
	err = q.rc.Write(q.writeFn)
	n, opErr := q.wr.finish()
	if err == nil {
		err = opErr
	}
	if err != nil {
		return n, q.ioError("write", n, err)
	}
	return n, nil
}

// ioError wraps an error of packet n with the device and queue, and turns
// the runtime's "use of closed file" into os.ErrClosed.
func (q *TUNQueue) ioError(op string, n int, err error) error {
	if q.tun.closed.Load() {
		err = os.ErrClosed
	}
	return fmt.Errorf("%s TUN %s queue %d packet %d: %w", op, q.tun.name, q.index, n, err)
}

// readOp is the state of one Read, filled in by do on the poller's behalf.
type readOp struct {
	hdrSize int
	bufs    [][]byte
	sizes   []int
	offset  int
	n       int
	errno   error
	bufLen  int // buffer length, for errors
	pktLen  int // packet length, for ErrPacketTruncated; -1: buffer shorter than the header
}

func (op *readOp) start(bufs [][]byte, sizes []int, offset int) {
	*op = readOp{hdrSize: op.hdrSize, bufs: bufs, sizes: sizes, offset: offset}
}

// do reads packets until the buffers are full or the queue is empty. It
// returns false, to wait for the fd to become readable, only while no
// packet has been read.
func (op *readOp) do(fd uintptr) bool {
	for op.n < len(op.bufs) {
		b := op.bufs[op.n]
		if len(b) < op.offset+op.hdrSize {
			op.bufLen, op.pktLen = len(b)-op.offset, -1
			return true
		}
		b = b[op.offset:]
		m, err := unix.Read(int(fd), b)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return op.n > 0
		case err != nil:
			op.errno = err
			return true
		case m == len(b) && truncated(b[op.hdrSize:]):
			op.bufLen, op.pktLen = len(b), op.hdrSize+ipPacketLen(b[op.hdrSize:])
			return true
		}
		op.sizes[op.n] = m
		op.n++
	}
	return true
}

// truncated reports whether pkt, which filled its read buffer, lost its
// end: the kernel copies what fits and returns the buffer's length without
// saying so, but the IP header tells. A packet whose length the IP header
// does not give (IPv4 BIG TCP, IPv6 jumbogram) counts as truncated.
func truncated(pkt []byte) bool {
	n := ipPacketLen(pkt)
	return n == 0 || n > len(pkt)
}

// ipPacketLen returns the length of pkt according to its IP header, or 0
// when the header does not give it.
func ipPacketLen(pkt []byte) int {
	switch {
	case len(pkt) >= header.IPv4MinimumSize && pkt[0]>>4 == header.IPv4Version:
		return int(header.IPv4(pkt).TotalLength())
	case len(pkt) >= header.IPv6MinimumSize && pkt[0]>>4 == header.IPv6Version:
		if n := header.IPv6(pkt).PayloadLength(); n != 0 {
			return header.IPv6MinimumSize + int(n)
		}
	}
	return 0
}

// finish returns the result and drops the references to the caller's
// buffers.
func (op *readOp) finish() (int, error) {
	n, err := op.n, op.err()
	op.start(nil, nil, 0)
	return n, err
}

func (op *readOp) err() error {
	switch {
	case op.errno != nil:
		return os.NewSyscallError("read", op.errno)
	case op.pktLen < 0:
		return fmt.Errorf("buffer of %d bytes after the offset cannot hold the %d-byte virtio-net header", op.bufLen, op.hdrSize)
	case op.pktLen > op.hdrSize:
		return fmt.Errorf("%w: %d bytes (virtio-net header included), buffer %d", ErrPacketTruncated, op.pktLen, op.bufLen)
	case op.pktLen > 0:
		return fmt.Errorf("%w: the packet filled the %d-byte buffer and its IP header gives no length", ErrPacketTruncated, op.bufLen)
	}
	return nil
}

// writeOp is the state of one Write, filled in by do on the poller's behalf.
type writeOp struct {
	hdrSize int
	bufs    [][]byte
	offset  int
	n       int
	err     error
}

func (op *writeOp) start(bufs [][]byte, offset int) {
	*op = writeOp{hdrSize: op.hdrSize, bufs: bufs, offset: offset}
}

// do writes packets in order. It returns false, to wait for the fd to
// become writable, when the device's send buffer is full.
func (op *writeOp) do(fd uintptr) bool {
	for op.n < len(op.bufs) {
		b := op.bufs[op.n]
		if len(b) < op.offset+op.hdrSize {
			op.err = fmt.Errorf("%d bytes after the offset, shorter than the %d-byte virtio-net header", len(b)-op.offset, op.hdrSize)
			return true
		}
		m, err := unix.Write(int(fd), b[op.offset:])
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return false
		case err != nil:
			op.err = os.NewSyscallError("write", err)
			return true
		case m != len(b)-op.offset:
			op.err = io.ErrShortWrite
			return true
		}
		op.n++
	}
	return true
}

func (op *writeOp) finish() (int, error) {
	n, err := op.n, op.err
	op.start(nil, 0)
	return n, err
}
