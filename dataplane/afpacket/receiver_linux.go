package afpacket

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/internal/ethernet"
	"github.com/gsoplane/gsoplane/internal/mmsg"
	"github.com/gsoplane/gsoplane/segment"
)

// A socket's Receiver is a frame.HeaderReceiver and a frame.IntoReceiver.
var (
	_ frame.HeaderReceiver = (*receiver)(nil)
	_ frame.IntoReceiver   = (*receiver)(nil)
)

const (
	rxBatch = 64 // most frames one recvmmsg takes
	// rxBufSize holds the virtio-net header, the Ethernet header and the
	// largest packet GRO makes without BIG TCP (64 KiB), rounded up: the
	// least receive buffer (rxSizeFor).
	rxBufSize = (Headroom + 40 + 65535 + 127) &^ 127
	// maxBigLen is the largest packet the kernel makes with BIG TCP
	// (GSO_MAX_SIZE, GRO_MAX_SIZE: 512 KiB).
	maxBigLen = 512 << 10
	// rxWait bounds one Receive's wait, so that a return path notices
	// that its context ended even without StopReceive.
	rxWait = 50 * time.Millisecond
)

// receiver is a socket's receive side.
type receiver struct {
	s    *Socket
	mem  []byte
	bufs [][]byte
	msgs *mmsg.Batch
	hdrs []segment.Header
	n    int // frames of the last Receive
	// lent is how many messages, from the first, point into a caller's
	// buffers (ReceiveInto) rather than bufs.
	lent int
	// deadline is the socket's read deadline, as the last armDeadline
	// set it.
	deadline time.Time
	want     int // recvFn's argument and results
	got      int
	errno    unix.Errno
	recvFn   func(uintptr)
	waitFn   func(uintptr) bool
}

// rxSizeFor is the size of a receive buffer on an interface: the
// headroom and the largest packet the interface may hand the sockets,
// rounded up. That is 64 KiB, or more with BIG TCP: where the device's
// GRO merges into larger packets (gro_max_size, gro_ipv4_max_size), or
// where it hands over larger GSO packets whole (tso_max_size: a veth
// passes its peer's packets on as they are, and both ends have the
// kernel's GSO_MAX_SIZE, so a peer with gso_max_size above 64 KiB sends
// them), up to the kernel's 512 KiB. Open reads the limits: raised later,
// they take a new Open (until then the longer frames count as Truncated).
func rxSizeFor(a *netlink.LinkAttrs) int {
	n := min(max(int(a.GROMaxSize), int(a.GROIPv4MaxSize), int(a.TSOMaxSize)), maxBigLen)
	return max(rxBufSize, (Headroom+n+127)&^127)
}

// Receiver returns the socket's receive side as a
// frame.HeaderReceiver. Each Receive takes up to 64 frames with one
// recvmmsg(2) into buffers of its own (allocated here, once: 64 of
// rxSizeFor bytes, some 4 MiB, up to 32 MiB on a device that may hand
// over BIG TCP packets, of which only what the kernel writes takes
// memory), waiting through the Go runtime poller when none is there, for
// at most 50 ms (then it returns 0), until the port stops receiving
// (Port.StopReceive: then it returns 0 at once) or is closed (ErrClosed).
// The frames are views valid until the next Receive: frame i is the
// kernel's virtio-net header, the Ethernet header and the IP packet at
// frame[Headroom:]; Header(i) is that virtio-net header with csum_start
// and hdr_len counted from the IP header. With GRO on the NIC the kernel
// hands over super-packets (a GSO type, a partial checksum), which the
// return path writes into the TUN whole (BIG TCP ones cut to 64 KiB). A
// frame whose EtherType is not IPv4 or IPv6, or disagrees with its IP
// version, or that is truncated or too short, comes back with an empty
// packet (the return path counts it as invalid; Stats counts why). Use one Receiver per socket, from one
// goroutine.
func (s *Socket) Receiver() frame.HeaderReceiver {
	r := &receiver{
		s:    s,
		bufs: make([][]byte, rxBatch),
		msgs: mmsg.New(rxBatch),
		hdrs: make([]segment.Header, rxBatch),
	}
	r.mem = rxMemory(r, rxBatch*s.port.rxSize)
	for i := range r.bufs {
		r.bufs[i] = r.mem[i*s.port.rxSize : (i+1)*s.port.rxSize : (i+1)*s.port.rxSize]
		r.msgs.Set(i, r.bufs[i])
	}
	r.recvFn, r.waitFn = r.doRecv, r.doRecvOrWait
	return r
}

// rxMemory returns size bytes for owner's receive buffers: an anonymous
// mapping, of which only the pages the kernel writes into take memory,
// unmapped once owner is unreachable (memory from make would be cleared
// when the runtime reuses freed memory for it: all 32 MiB of a socket's
// buffers for BIG TCP); memory from make if the mapping fails.
func rxMemory(owner *receiver, size int) []byte {
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return make([]byte, size)
	}
	runtime.AddCleanup(owner, func(m []byte) { unix.Munmap(m) }, mem)
	return mem
}

// Headroom is the virtio-net header and the Ethernet header.
func (r *receiver) Headroom() int { return Headroom }

// Header returns the virtio-net header of frame i of the last Receive.
func (r *receiver) Header(i int) segment.Header {
	if i < 0 || i >= r.n {
		return segment.Header{}
	}
	return r.hdrs[i]
}

func (r *receiver) Receive(frames [][]byte) (int, error) {
	for i := range r.lent {
		r.msgs.Set(i, r.bufs[i])
	}
	r.lent = 0
	return r.receive(r.bufs, frames, false)
}

// ReceiveInto is Receive into the caller's buffers (frame.IntoReceiver):
// frame i into bufs[i], of which each must hold at least the headroom; a
// frame longer than its buffer comes back nil, counted as truncated.
func (r *receiver) ReceiveInto(bufs, frames [][]byte) (int, error) {
	want := min(len(bufs), len(frames), rxBatch)
	for i, b := range bufs[:want] {
		if len(b) < Headroom {
			return 0, fmt.Errorf("afpacket: receive into a buffer of %d bytes: %w", len(b), frame.ErrInvalidConfig)
		}
		r.msgs.Set(i, b)
	}
	r.lent = max(r.lent, want)
	return r.receive(bufs[:want], frames, true)
}

// receive receives up to len(frames) frames into bufs, at which the
// messages point, and returns them as views of bufs; into: a truncated
// one as nil (ReceiveInto), else as an empty packet.
func (r *receiver) receive(bufs, frames [][]byte, into bool) (int, error) {
	r.n = 0
	want := min(len(frames), len(bufs), rxBatch)
	if want == 0 {
		return 0, nil
	}
	if r.s.closed.Load() {
		return 0, ErrClosed
	}
	r.want = want
	wait := !r.s.stopped.Load() && r.armDeadline()
	n, err := r.recv(wait)
	if err != nil {
		return 0, err
	}
	r.n = n
	var bytes, super uint64
	for i := range n {
		frames[i] = r.frame(i, bufs[i], r.msgs.MsgLen(i), r.msgs.Flags(i)&unix.MSG_TRUNC != 0)
		if frames[i] == nil && !into {
			frames[i] = bufs[i][:Headroom]
		}
		bytes += uint64(max(len(frames[i])-vnetHdrLen, 0))
		if r.hdrs[i].GSOType != segment.GSONone {
			super++
		}
	}
	st := &r.s.st
	st.rx.Add(uint64(n))
	st.rxBytes.Add(bytes)
	st.rxSuper.Add(super)
	return n, nil
}

// armDeadline keeps the socket's read deadline between rxWait/2 and
// rxWait ahead, so that a wait ends within rxWait, and reports whether it
// is set. It sets a new one only when the last is less than rxWait/2
// ahead: each costs the runtime a timer update, which a Receive per
// packet would pay otherwise.
func (r *receiver) armDeadline() bool {
	now := time.Now()
	if r.deadline.Sub(now) > rxWait/2 {
		return true
	}
	if r.s.file.SetReadDeadline(now.Add(rxWait)) != nil {
		return false
	}
	r.deadline = now.Add(rxWait)
	if r.s.stopped.Load() { // stopRX ran meanwhile: its deadline is the past
		r.s.file.SetReadDeadline(time.Unix(1, 0))
	}
	return true
}

// recv takes what is waiting, or (wait) waits for it through the runtime
// poller until the read deadline. A packet the kernel could not describe
// with a virtio-net header is lost, counted, and receiving goes on.
func (r *receiver) recv(wait bool) (int, error) {
	for tries := 0; ; tries++ {
		var err error
		if wait {
			err = r.s.rc.Read(r.waitFn)
		} else {
			err = r.s.rc.Control(r.recvFn)
		}
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			return 0, nil
		case err != nil:
			return 0, ErrClosed
		}
		r.s.st.rxCalls.Add(1)
		if r.got > 0 {
			return r.got, nil
		}
		switch r.errno {
		case unix.EAGAIN, unix.ENETDOWN:
			// Nothing waiting; or the device went down (the kernel
			// reports it once), and receiving resumes when it is up.
			return 0, nil
		case unix.EINTR:
		case unix.EINVAL:
			// recvmmsg stopped at a packet the kernel could not give
			// a virtio-net header and reports that the next call.
			r.s.st.header.Add(1)
		case unix.EBADF:
			return 0, ErrClosed
		default:
			return 0, fmt.Errorf("afpacket: receive on socket %d: %w", r.s.index, os.NewSyscallError("recvmmsg", r.errno))
		}
		if tries > rxBatch {
			return 0, nil
		}
	}
}

// doRecv is recvFn: one recvmmsg of up to want messages.
func (r *receiver) doRecv(fd uintptr) { r.got, r.errno = r.msgs.Recv(fd, r.want) }

// doRecvOrWait is waitFn: one recvmmsg, and a wait when nothing is there.
func (r *receiver) doRecvOrWait(fd uintptr) bool {
	r.doRecv(fd)
	return r.got > 0 || r.errno != unix.EAGAIN
}

// frame checks received message i, of length l (truncated: MSG_TRUNC),
// in b, and returns its frame: nil if it was truncated, with an empty
// packet if it is not a whole IP packet behind an Ethernet header that
// says so; it decodes the virtio-net header into hdrs[i].
func (r *receiver) frame(i int, b []byte, l int, truncated bool) []byte {
	r.hdrs[i] = segment.Header{}
	empty := b[:Headroom]
	switch {
	case truncated || l > len(b):
		r.s.st.truncated.Add(1)
		return nil
	case l <= Headroom || !ethernet.IsIP(b[vnetHdrLen:l]):
		r.s.st.invalid.Add(1)
		return empty
	}
	h, _ := segment.DecodeHeader(b, vnetHdrLen) // b is long enough
	pktLen := l - Headroom
	if h.NeedsCsum() {
		if h.CsumStart < ethernet.HeaderLen || int(h.CsumStart)-ethernet.HeaderLen >= pktLen {
			r.s.st.invalid.Add(1)
			return empty
		}
		h.CsumStart -= ethernet.HeaderLen
	}
	// hdr_len is a hint (the length of the skb's linear part): keep it
	// within the IP packet.
	h.HdrLen = uint16(min(max(int(h.HdrLen)-ethernet.HeaderLen, 0), pktLen))
	r.hdrs[i] = h
	return b[:l]
}
