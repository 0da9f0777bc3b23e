package tun

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/internal/iphdr"
	"github.com/gsoplane/gsoplane/segment"
)

// Every Queue is a frame.Source and a frame.Writer.
var (
	_ frame.Source = (*Queue)(nil)
	_ frame.Writer = (*Queue)(nil)
)

// tunDevicePath is the TUN clone device.
const tunDevicePath = "/dev/net/tun"

// tunFlags are the TUNSETIFF flags of every queue.
const tunFlags = unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR

// Device is an open TUN device: one file descriptor per queue.
type Device struct {
	name     string
	index    int
	offloads Offloads
	hdrSize  int
	created  bool
	queues   []*Queue
	closed   atomic.Bool
}

// Open creates or attaches the TUN device described by cfg in the
// calling thread's network namespace and configures it: header size,
// offloads, send buffer and MTU. The device is configured as a whole, so
// attaching an existing device changes these settings for its other users
// too. Open neither brings the device up nor assigns addresses. It
// refuses an existing device another program has queues of (ErrInUse):
// another queue would take part of its flows.
//
// It needs CAP_NET_ADMIN to create a device (or to attach one owned by
// someone else) and says so when it is missing.
func Open(cfg Config) (*Device, error) {
	return openTUN(cfg, tunDevicePath)
}

func openTUN(cfg Config, path string) (*Device, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	index, err := ifIndex(cfg.Name)
	t := &Device{name: cfg.Name, created: cfg.Name == "" || err != nil}
	if !t.created {
		if err := t.checkFree(index); err != nil {
			return nil, err
		}
	}
	fds, err := t.attach(cfg, path)
	if err == nil {
		err = t.configure(fds[0], cfg)
	}
	if err != nil {
		closeFDs(fds)
		return nil, err
	}
	t.queues = make([]*Queue, len(fds))
	for i, fd := range fds {
		if t.queues[i], err = newQueue(t, i, fd); err != nil {
			closeFDs(fds[i+1:])
			t.Close()
			return nil, err
		}
	}
	return t, nil
}

// verb says whether Open creates or attaches the device, for errors.
func (t *Device) verb() string {
	if t.created {
		return "create"
	}
	return "attach"
}

// checkFree refuses the existing device if queues of it are attached
// to other files (the kernel's IFLA_TUN_NUM_QUEUES, from Linux 4.15, and
// the queues detached with TUNSETQUEUE): another program reads it (another
// gateway, say). The kernel gives the count of a multi-queue device only;
// TUNSETIFF refuses a single-queue device in use (EBUSY), and another
// kind of device.
func (t *Device) checkFree(index int) error {
	link, err := netlink.LinkByIndex(index)
	if err != nil {
		return fmt.Errorf("tun: attach %s: %w", t.name, err)
	}
	if tt, ok := link.(*netlink.Tuntap); ok && tt.Queues+tt.DisabledQueues > 0 {
		return fmt.Errorf("tun: attach %s: another program has %d queues of it open: %w", t.name, tt.Queues+tt.DisabledQueues, ErrInUse)
	}
	return nil
}

// attach opens cfg.Queues file descriptors on the device. The first one
// creates it when missing and learns its name if the kernel chose it.
func (t *Device) attach(cfg Config, path string) ([]int, error) {
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
func (t *Device) openQueue(path string, flags uint16) (int, string, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", t.openError(path, err)
	}
	ifr, err := unix.NewIfreq(t.name)
	if err != nil { // unreachable: the name was checked
		unix.Close(fd)
		return -1, "", fmt.Errorf("tun: %s %s: %w", t.verb(), t.name, err)
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return -1, "", t.setIffError(err)
	}
	return fd, ifr.Name(), nil
}

func (t *Device) openError(path string, err error) error {
	if errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("tun: %s %s: %s is missing (is the tun module loaded? modprobe tun): %w",
			t.verb(), t.name, path, os.NewSyscallError("open", err))
	}
	return fmt.Errorf("tun: %s %s: %w", t.verb(), t.name, os.NewSyscallError("open "+path, err))
}

func (t *Device) setIffError(err error) error {
	switch {
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("tun: %s %s: needs CAP_NET_ADMIN: %w", t.verb(), t.name, err)
	case errors.Is(err, unix.EBUSY):
		return fmt.Errorf("tun: %s %s: another program has it open (a single-queue device takes one): %w: %w",
			t.verb(), t.name, ErrInUse, os.NewSyscallError("ioctl TUNSETIFF", err))
	case errors.Is(err, unix.EINVAL) && !t.created:
		return fmt.Errorf("tun: %s %s: not a TUN device, or its queue mode (IFF_MULTI_QUEUE) differs: %w",
			t.verb(), t.name, os.NewSyscallError("ioctl TUNSETIFF", err))
	}
	return fmt.Errorf("tun: %s %s: %w", t.verb(), t.name, os.NewSyscallError("ioctl TUNSETIFF", err))
}

// configure sets the device-wide settings through one of its queues.
func (t *Device) configure(fd int, cfg Config) error {
	wrap := func(what string, err error) error {
		return fmt.Errorf("tun: %s %s: %s: %w", t.verb(), t.name, what, err)
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETSNDBUF, cfg.SndBuf); err != nil {
		return wrap(fmt.Sprintf("send buffer %d", cfg.SndBuf), os.NewSyscallError("ioctl TUNSETSNDBUF", err))
	}
	if err := t.setOffloads(fd, cfg); err != nil {
		return wrap("offloads", err)
	}
	var err error
	if cfg.MTU != 0 {
		if err := setMTU(t.name, cfg.MTU); err != nil {
			return wrap(fmt.Sprintf("MTU %d", cfg.MTU), err)
		}
	}
	if t.index, err = ifIndex(t.name); err != nil {
		return wrap("index", err)
	}
	return t.setQueue(cfg)
}

// setQueue sets the ring length and the noqueue qdisc (Config.TxQueueLen,
// Config.NoQueue) through netlink.
func (t *Device) setQueue(cfg Config) error {
	if cfg.TxQueueLen == 0 && !cfg.NoQueue {
		return nil
	}
	link, err := netlink.LinkByIndex(t.index)
	if err == nil && cfg.TxQueueLen > 0 {
		err = netlink.LinkSetTxQLen(link, cfg.TxQueueLen)
	}
	if err != nil {
		return fmt.Errorf("tun: %s %s: txqueuelen %d: %w", t.verb(), t.name, cfg.TxQueueLen, err)
	}
	if cfg.NoQueue {
		q := &netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: t.index, Parent: netlink.HANDLE_ROOT}, QdiscType: "noqueue"}
		if err := netlink.QdiscReplace(q); err != nil {
			return fmt.Errorf("tun: %s %s: noqueue qdisc: %w", t.verb(), t.name, err)
		}
	}
	return nil
}

// setOffloads sets the header size and enables DefaultOffloads (without
// the tunnel offloads unless the header is the 24-byte one) or the first
// fallback the kernel accepts, or clears all offloads when cfg.Offload is
// false. The header is set first, so that no tunnel super-packet is ever
// queued for a shorter one.
func (t *Device) setOffloads(fd int, cfg Config) error {
	t.hdrSize = cfg.HeaderSize
	if err := setHeaderSize(fd, t.hdrSize); err != nil {
		return err
	}
	if !cfg.Offload {
		t.offloads = 0
		return os.NewSyscallError("ioctl TUNSETOFFLOAD", unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, 0))
	}
	sets := offloadFallbacks[:]
	if t.hdrSize != segment.HeaderSizeTunnel {
		sets = sets[1:]
	}
	var err error
	for _, o := range sets {
		if err = unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, int(o)); err == nil {
			t.offloads = o
			return nil
		}
		if !errors.Is(err, unix.EINVAL) {
			break
		}
	}
	return os.NewSyscallError("ioctl TUNSETOFFLOAD", err)
}

func setHeaderSize(fd, size int) error {
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, size); err != nil {
		return fmt.Errorf("header size %d: %w", size, os.NewSyscallError("ioctl TUNSETVNETHDRSZ", err))
	}
	return nil
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

// Name returns the device name (the kernel's choice if Config.Name was
// empty).
func (t *Device) Name() string { return t.name }

// Index returns the device's interface index.
func (t *Device) Index() int { return t.index }

// Offloads returns the offloads the kernel accepted: DefaultOffloads, a
// fallback without the tunnel offloads, USO or ECN, or none when
// Config.Offload was false.
func (t *Device) Offloads() Offloads { return t.offloads }

// HeaderSize returns the virtio-net header size in front of every packet
// read or written: segment.HeaderSize, segment.HeaderSizeMrg or
// segment.HeaderSizeTunnel.
func (t *Device) HeaderSize() int { return t.hdrSize }

// Queues returns the queues, one per file descriptor.
func (t *Device) Queues() []*Queue { return slices.Clone(t.queues) }

// Close closes every queue. Reads and writes blocked on them return errors
// wrapping os.ErrClosed. A device that Open created disappears with its
// last file descriptor (it is not persistent); an attached one stays.
// Close is idempotent: later calls return nil.
func (t *Device) Close() error {
	if !t.closed.CompareAndSwap(false, true) {
		return nil
	}
	var errs []error
	for _, q := range t.queues {
		if q == nil {
			continue
		}
		if err := q.file.Close(); err != nil {
			errs = append(errs, fmt.Errorf("tun: close %s queue %d: %w", t.name, q.index, err))
		}
	}
	return errors.Join(errs...)
}

// Queue is one queue (file descriptor) of a TUN. Read and Write may run
// concurrently with each other; concurrent Reads (or Writes) on one queue
// take turns.
type Queue struct {
	tun   *Device
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

// newQueue makes fd non-blocking and hands it to the Go runtime poller.
func newQueue(t *Device, index, fd int) (*Queue, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("tun: open %s queue %d: %w", t.name, index, os.NewSyscallError("fcntl", err))
	}
	q := &Queue{tun: t, index: index, file: os.NewFile(uintptr(fd), tunDevicePath)}
	rc, err := q.file.SyscallConn()
	if err != nil {
		q.file.Close()
		return nil, fmt.Errorf("tun: open %s queue %d: %w", t.name, index, err)
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
func (q *Queue) Read(bufs [][]byte, sizes []int, offset int) (n int, err error) {
	bufs = bufs[:min(len(bufs), len(sizes))]
	if len(bufs) == 0 {
		return 0, nil
	}
	if offset < 0 {
		return 0, fmt.Errorf("tun: read %s queue %d: negative offset %d", q.tun.name, q.index, offset)
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

// SetReadDeadline sets the deadline of Read: once it has passed, a Read in
// progress or to come returns an error wrapping os.ErrDeadlineExceeded; a
// zero t means none. A pipeline.Forwarder sets it to stop promptly
// (frame.ReadDeadliner).
func (q *Queue) SetReadDeadline(t time.Time) error { return q.file.SetReadDeadline(t) }

// Write writes bufs[i][offset:], a virtio-net header followed by a packet,
// for each i in order. The kernel processes each packet inside the write
// (routing, local delivery); Write blocks (through the Go runtime poller)
// only while the device's send buffer (Config.SndBuf) is full. It returns
// how many packets were written; on error, bufs[n] is the packet that
// failed (the kernel refuses, for example, a header it cannot parse) and
// the packets after it were not tried. After Close, Write returns an
// error wrapping os.ErrClosed.
func (q *Queue) Write(bufs [][]byte, offset int) (n int, err error) {
	if offset < 0 {
		return 0, fmt.Errorf("tun: write %s queue %d: negative offset %d", q.tun.name, q.index, offset)
	}
	return q.write(writeOp{bufs: bufs, offset: offset})
}

// WriteVectors writes packets given in pieces: packet i is the
// concatenation of pkts[i], a virtio-net header first, written with one
// writev(2), as a segment.Coalescer produces them. Otherwise it is Write.
func (q *Queue) WriteVectors(pkts [][][]byte) (n int, err error) {
	return q.write(writeOp{vecs: pkts})
}

func (q *Queue) write(op writeOp) (n int, err error) {
	if len(op.bufs) == 0 && len(op.vecs) == 0 {
		return 0, nil
	}
	q.wmu.Lock()
	defer q.wmu.Unlock()
	q.wr.start(op)
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

// ioError wraps an error of packet n with the device and queue, turns
// the runtime's "use of closed file" into os.ErrClosed and a deleted
// device's EBADFD into ErrDeviceGone.
func (q *Queue) ioError(op string, n int, err error) error {
	switch {
	case q.tun.closed.Load():
		err = os.ErrClosed
	case errors.Is(err, unix.EBADFD):
		// The kernel detached the file from its device: deleted.
		err = fmt.Errorf("%w: %w", ErrDeviceGone, err)
	}
	return fmt.Errorf("tun: %s %s queue %d packet %d: %w", op, q.tun.name, q.index, n, err)
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
// when the header does not give it: a length field of 0.
func ipPacketLen(pkt []byte) int {
	n, ok := iphdr.Len(pkt)
	if !ok || iphdr.Version(pkt) == 6 && n == iphdr.IPv6Len {
		return 0
	}
	return n
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
		return fmt.Errorf("%w: %d bytes (virtio-net header included), buffer %d", frame.ErrPacketTruncated, op.pktLen, op.bufLen)
	case op.pktLen > 0:
		return fmt.Errorf("%w: the packet filled the %d-byte buffer and its IP header gives no length", frame.ErrPacketTruncated, op.bufLen)
	}
	return nil
}

// writeOp is the state of one Write or WriteVectors, filled in by do on
// the poller's behalf: packet i is bufs[i][offset:] or the pieces vecs[i].
type writeOp struct {
	hdrSize int
	bufs    [][]byte
	offset  int
	vecs    [][][]byte
	iov     []unix.Iovec // kept from one WriteVectors to the next
	n       int
	err     error
}

func (op *writeOp) start(next writeOp) {
	next.hdrSize, next.iov = op.hdrSize, op.iov
	*op = next
}

// do writes packets in order. It returns false, to wait for the fd to
// become writable, when the device's send buffer is full.
func (op *writeOp) do(fd uintptr) bool {
	for op.n < max(len(op.bufs), len(op.vecs)) {
		m, want, err := op.writeOne(int(fd))
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return false
		case err != nil:
			op.err = err
			return true
		case m != want:
			op.err = io.ErrShortWrite
			return true
		}
		op.n++
	}
	return true
}

// writeOne writes packet op.n and returns how many bytes were written and
// how many should have been.
func (op *writeOp) writeOne(fd int) (int, int, error) {
	if op.vecs == nil {
		b := op.bufs[op.n]
		if len(b) < op.offset+op.hdrSize {
			return 0, 0, fmt.Errorf("%d bytes after the offset, shorter than the %d-byte virtio-net header", len(b)-op.offset, op.hdrSize)
		}
		m, err := unix.Write(fd, b[op.offset:])
		return m, len(b) - op.offset, syscallError("write", err)
	}
	want := 0
	for _, p := range op.vecs[op.n] {
		want += len(p)
	}
	if want < op.hdrSize {
		return 0, 0, fmt.Errorf("%d bytes, shorter than the %d-byte virtio-net header", want, op.hdrSize)
	}
	m, err := writev(fd, op.vecs[op.n], &op.iov)
	return m, want, syscallError("writev", err)
}

// syscallError wraps err, but for the errnos do retries.
func syscallError(op string, err error) error {
	if err == nil || err == unix.EINTR || err == unix.EAGAIN {
		return err
	}
	return os.NewSyscallError(op, err)
}

func (op *writeOp) finish() (int, error) {
	n, err := op.n, op.err
	op.start(writeOp{})
	return n, err
}
