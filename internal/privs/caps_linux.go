package privs

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Caps is a set of Linux capabilities: bit N is capability N
// (1<<unix.CAP_NET_ADMIN is CAP_NET_ADMIN).
type Caps uint64

// Effective returns the calling thread's effective capabilities.
func Effective() (Caps, error) {
	data, err := capget()
	return Caps(data[0].Effective) | Caps(data[1].Effective)<<32, err
}

// Permitted returns the calling thread's permitted capabilities.
func Permitted() (Caps, error) {
	data, err := capget()
	return Caps(data[0].Permitted) | Caps(data[1].Permitted)<<32, err
}

// capget reads the calling thread's capability sets (version 3:
// capabilities 0-31, then 32-63).
func capget() ([2]unix.CapUserData, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return data, os.NewSyscallError("capget", err)
	}
	return data, nil
}

// capNames are the capabilities' names, by bit (linux/capability.h).
var capNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE",
	"CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER",
	"CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT",
	"CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME",
	"CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL",
	"CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM",
	"CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
}

// String lists the capabilities of c by name, comma-separated, in bit
// order; bits without a name here follow in hex; "none" for none.
func (c Caps) String() string {
	var names []string
	for bit, name := range capNames {
		if c&(1<<bit) != 0 {
			names = append(names, name)
			c &^= 1 << bit
		}
	}
	if c != 0 {
		names = append(names, fmt.Sprintf("%#x", uint64(c)))
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}
