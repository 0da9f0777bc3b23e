package tun

// The one use of package unsafe in the TUN port: writev(2) with iovecs
// kept from call to call, where unix.Writev would allocate them each time.

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// writev writes the pieces as one packet; *iov is grown to fit them and
// reused.
func writev(fd int, pieces [][]byte, iov *[]unix.Iovec) (int, error) {
	if cap(*iov) < len(pieces) {
		*iov = make([]unix.Iovec, len(pieces))
	}
	v := (*iov)[:0]
	for _, p := range pieces {
		if len(p) == 0 {
			continue
		}
		var e unix.Iovec
		e.Base = &p[0]
		e.SetLen(len(p))
		v = append(v, e)
	}
	if len(v) == 0 {
		return 0, nil
	}
	n, _, errno := unix.Syscall(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&v[0])), uintptr(len(v)))
	clear(v) // drop the references to the caller's buffers
	if errno != 0 {
		return int(n), errno
	}
	return int(n), nil
}
