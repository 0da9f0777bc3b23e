package privs

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// capsetAllThreads sets the effective, permitted and inheritable
// capabilities of every thread of the process (capabilities are per
// thread, so unix.Capset would change only the calling one). An
// inheritable set of 0 also clears the ambient set.
func capsetAllThreads(eff, prm, inh Caps) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{
		{Effective: uint32(eff), Permitted: uint32(prm), Inheritable: uint32(inh)},
		{Effective: uint32(eff >> 32), Permitted: uint32(prm >> 32), Inheritable: uint32(inh >> 32)},
	}
	_, _, e := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
	return allThreadsErr("capset", e)
}
