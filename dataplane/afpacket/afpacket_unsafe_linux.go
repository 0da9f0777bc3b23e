package afpacket

// The port's one use of package unsafe: sendmmsg(2) and recvmmsg(2) on
// message headers and iovecs built once and reused, where x/net's batch
// calls would allocate per message.

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsghdr is struct mmsghdr.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

// mmsgs are the message headers of one batch, one iovec each, without
// addresses: the socket is bound, and what we receive needs none.
type mmsgs struct {
	hdrs []mmsghdr
	iovs []unix.Iovec
}

func newMmsgs(n int) *mmsgs {
	m := &mmsgs{hdrs: make([]mmsghdr, n), iovs: make([]unix.Iovec, n)}
	for i := range m.hdrs {
		m.hdrs[i].hdr.Iov = &m.iovs[i]
		m.hdrs[i].hdr.SetIovlen(1)
	}
	return m
}

// set points message i at b (which must not be empty).
func (m *mmsgs) set(i int, b []byte) {
	m.iovs[i].Base = &b[0]
	m.iovs[i].SetLen(len(b))
}

// clear drops the references to the buffers of messages [0, n).
func (m *mmsgs) clear(n int) {
	for i := range n {
		m.iovs[i] = unix.Iovec{}
	}
}

// send sends messages [from, to) without blocking and returns how many
// the kernel took.
func (m *mmsgs) send(fd uintptr, from, to int) (int, unix.Errno) {
	n, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&m.hdrs[from])), uintptr(to-from), unix.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), 0
}

// recv receives up to n messages without blocking; message i's length is
// m.hdrs[i].len and its flags m.hdrs[i].hdr.Flags (MSG_TRUNC).
func (m *mmsgs) recv(fd uintptr, n int) (int, unix.Errno) {
	for i := range n {
		m.hdrs[i].hdr.Flags = 0
	}
	r, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&m.hdrs[0])), uintptr(n), unix.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(r), 0
}
