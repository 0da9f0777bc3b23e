package udp

// The receive side's use of package unsafe: recvmmsg(2) on message headers
// built once, where x/net's ReadBatch would allocate a source address for
// every message.

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

// mmsgs are the message headers of one recvmmsg call, pointing at their
// buffers and control buffers for good.
type mmsgs struct {
	hdrs []mmsghdr
	iovs []unix.Iovec
}

// newMmsgs points message i at bufs[i] and oob[i].
func newMmsgs(bufs, oob [][]byte) *mmsgs {
	m := &mmsgs{hdrs: make([]mmsghdr, len(bufs)), iovs: make([]unix.Iovec, len(bufs))}
	for i := range bufs {
		m.iovs[i].Base = &bufs[i][0]
		m.iovs[i].SetLen(len(bufs[i]))
		h := &m.hdrs[i].hdr
		h.Iov = &m.iovs[i]
		h.SetIovlen(1)
		h.Control = &oob[i][0]
	}
	return m
}

// recv receives up to len(hdrs) messages without blocking; message i's
// data is hdrs[i].len bytes, its control message hdrs[i].hdr.Controllen.
func (m *mmsgs) recv(fd uintptr, oobLen int) (int, unix.Errno) {
	for i := range m.hdrs {
		m.hdrs[i].hdr.SetControllen(oobLen)
		m.hdrs[i].hdr.Flags = 0
	}
	n, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&m.hdrs[0])), uintptr(len(m.hdrs)), unix.MSG_DONTWAIT, 0, 0)
	return int(n), errno
}
