package main

// The floor's one use of unsafe: the address of its iovecs and message
// header for the kernel, kept from call to call (unix.Readv, unix.Writev
// and unix.SendmsgBuffers allocate theirs each time, which would charge
// the floor a garbage collector the gateway does not have).

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// vecIO runs readv(2) or writev(2) (trap) on fd with v, which must not be
// empty, blocking.
func vecIO(trap uintptr, fd int, v []unix.Iovec) (int, error) {
	n, _, errno := unix.Syscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&v[0])), uintptr(len(v)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// setMsgIov points h at v and ctl (its control message, if any).
func setMsgIov(h *unix.Msghdr, v []unix.Iovec, ctl []byte) {
	h.Iov = &v[0]
	h.SetIovlen(len(v))
	h.Control, h.Controllen = nil, 0
	if len(ctl) > 0 {
		h.Control = &ctl[0]
		h.SetControllen(len(ctl))
	}
}

// msgIO runs sendmsg(2) or recvmsg(2) (trap) on fd with h, blocking.
func msgIO(trap uintptr, fd int, h *unix.Msghdr) (int, error) {
	n, _, errno := unix.Syscall(trap, uintptr(fd), uintptr(unsafe.Pointer(h)), 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// putUDPSegment writes into ctl (unix.CmsgSpace(2) bytes) a UDP_SEGMENT
// control message of size.
func putUDPSegment(ctl []byte, size uint16) {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&ctl[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	*(*uint16)(unsafe.Pointer(&ctl[unix.CmsgLen(0)])) = size
}

// udpGROSize returns the segment size of a UDP_GRO control message, the
// first of ctl, or 0 if it is none.
func udpGROSize(ctl []byte) int {
	if len(ctl) < unix.CmsgLen(4) {
		return 0
	}
	h := (*unix.Cmsghdr)(unsafe.Pointer(&ctl[0]))
	if h.Level != unix.SOL_UDP || h.Type != unix.UDP_GRO {
		return 0
	}
	return int(*(*int32)(unsafe.Pointer(&ctl[unix.CmsgLen(0)])))
}
