package mmsg

// The package's one use of unsafe: the address of the message headers,
// for the kernel.

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsg runs sendmmsg(2) or recvmmsg(2) (trap) on hdrs, which must not be
// empty, without blocking.
func mmsg(trap, fd uintptr, hdrs []unix.Mmsghdr) (int, unix.Errno) {
	n, _, errno := unix.Syscall6(trap, fd, uintptr(unsafe.Pointer(&hdrs[0])), uintptr(len(hdrs)), unix.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), 0
}
