package afpacket

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// auditArch is the seccomp architecture of the GOARCHes refuseTCX knows.
var auditArch = map[string]uint32{"amd64": unix.AUDIT_ARCH_X86_64, "arm64": unix.AUDIT_ARCH_AARCH64}

// refuseTCX makes every thread of the process fail bpf(BPF_LINK_CREATE)
// with EINVAL, as a kernel without tcx answers a tcx link (cilium/ebpf's
// probe then says ebpf.ErrNotSupported), through a seccomp filter
// (root needs no PR_SET_NO_NEW_PRIVS for it).
func refuseTCX() error {
	const (
		bpfLinkCreate = 28 // enum bpf_cmd
		ld            = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq           = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret           = unix.BPF_RET | unix.BPF_K
		allow         = unix.SECCOMP_RET_ALLOW
	)
	// struct seccomp_data: nr at 0, arch at 4, args[0] at 16 (its low
	// half first: both architectures are little-endian).
	filter := []unix.SockFilter{
		{Code: ld, K: 4},
		{Code: jeq, Jt: 1, K: auditArch[runtime.GOARCH]},
		{Code: ret, K: allow},
		{Code: ld, K: 0},
		{Code: jeq, Jf: 3, K: unix.SYS_BPF},
		{Code: ld, K: 16},
		{Code: jeq, Jf: 1, K: bpfLinkCreate},
		{Code: ret, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EINVAL)},
		{Code: ret, K: allow},
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	if errno != 0 {
		return errno
	}
	return nil
}
