package main

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// A capability is a Linux capability and why udpfwd needs it.
type capability struct {
	bit  uint
	name string
	why  string
}

var (
	capNetAdmin = capability{unix.CAP_NET_ADMIN, "CAP_NET_ADMIN", "TUN device, XDP attach, addresses, routes, next-hop probes"}
	capNetRaw   = capability{unix.CAP_NET_RAW, "CAP_NET_RAW", "AF_XDP sockets"}
	capBPF      = capability{unix.CAP_BPF, "CAP_BPF", "loading the XDP program and its maps"}
	capSetUID   = capability{unix.CAP_SETUID, "CAP_SETUID", "-user"}
	capSetGID   = capability{unix.CAP_SETGID, "CAP_SETGID", "-user"}
)

// keptCaps is what the running gateway keeps after set-up: CAP_NET_ADMIN,
// because the dataplane asks the kernel to resolve next hops
// (RTM_NEWNEIGH) while it runs, and udpfwd removes its addresses and
// routes at exit. The sockets and the XDP program's BPF link need nothing.
const keptCaps = 1 << unix.CAP_NET_ADMIN

// errNoAllThreads: capabilities are per thread, and a binary built with
// cgo cannot change them on every thread (syscall.AllThreadsSyscall).
var errNoAllThreads = errors.New("cannot change capabilities on every thread: the binary was built with cgo; build it with CGO_ENABLED=0")

// account is the user -user names.
type account struct {
	uid, gid int
	groups   []int
}

// effectiveCaps returns the calling thread's effective capabilities.
func effectiveCaps() (uint64, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, os.NewSyscallError("capget", err)
	}
	return uint64(data[0].Effective) | uint64(data[1].Effective)<<32, nil
}

// checkCaps names every capability set-up needs and the process lacks,
// and how to grant it.
func checkCaps(cfg *config) problems {
	eff, err := effectiveCaps()
	if err != nil {
		return problems{err.Error()}
	}
	need := []capability{capNetAdmin, capNetRaw, capBPF}
	if cfg.User != "" {
		need = append(need, capSetUID, capSetGID)
	}
	var missing, why []string
	for _, c := range need {
		if eff&(1<<c.bit) == 0 && (c != capBPF || eff&(1<<unix.CAP_SYS_ADMIN) == 0) {
			missing = append(missing, c.name)
			why = append(why, fmt.Sprintf("%s (%s)", c.name, c.why))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return problems{fmt.Sprintf("missing capabilities %s: run as root, or grant them with `setcap %s+ep %s`, or with AmbientCapabilities=%s in a systemd unit (see contrib/udpfwd.service)",
		strings.Join(why, ", "), strings.ToLower(strings.Join(missing, ",")), executable(), strings.Join(missing, " "))}
}

func executable() string {
	exe, err := os.Executable()
	if err != nil {
		return "udpfwd"
	}
	return exe
}

// lookupAccount resolves -user (a name or a numeric uid) and checks that
// this binary can switch every thread to it.
func lookupAccount(spec string) (*account, error) {
	u, err := user.Lookup(spec)
	if _, notNumber := strconv.Atoi(spec); err != nil && notNumber == nil {
		u, err = user.LookupId(spec)
	}
	if err != nil {
		return nil, fmt.Errorf("-user %q: %w", spec, err)
	}
	a := new(account)
	a.uid, _ = strconv.Atoi(u.Uid)
	a.gid, _ = strconv.Atoi(u.Gid)
	gids, _ := u.GroupIds()
	for _, g := range gids {
		if n, err := strconv.Atoi(g); err == nil {
			a.groups = append(a.groups, n)
		}
	}
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_GET_KEEPCAPS, 0, 0); e == unix.ENOTSUP {
		return nil, fmt.Errorf("-user %q: %w", spec, errNoAllThreads)
	}
	return a, nil
}

// dropPrivileges switches to a (if not nil) and then keeps only keptCaps,
// on every thread. Capabilities not kept cannot come back.
func dropPrivileges(a *account) error {
	if a != nil {
		if err := switchUser(a); err != nil {
			return err
		}
	}
	return capsetAllThreads(keptCaps, keptCaps, 0)
}

// switchUser changes the uid, gid and groups of every thread to a's,
// keeping the permitted capabilities across the change (PR_SET_KEEPCAPS;
// the effective ones are cleared by the kernel and restored after).
func switchUser(a *account) error {
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_SET_KEEPCAPS, 1, 0); e != 0 {
		if e == unix.ENOTSUP {
			return errNoAllThreads
		}
		return os.NewSyscallError("prctl PR_SET_KEEPCAPS", e)
	}
	if err := syscall.Setgroups(a.groups); err != nil {
		return os.NewSyscallError("setgroups", err)
	}
	if err := syscall.Setgid(a.gid); err != nil {
		return os.NewSyscallError("setgid", err)
	}
	if err := syscall.Setuid(a.uid); err != nil {
		return os.NewSyscallError("setuid", err)
	}
	return nil
}

// capNames lists the capabilities in set.
func capNames(set uint64) string {
	var names []string
	for _, c := range []capability{capNetAdmin, capNetRaw, capBPF, capSetUID, capSetGID} {
		if set&(1<<c.bit) != 0 {
			names = append(names, c.name)
			set &^= 1 << c.bit
		}
	}
	if set != 0 {
		names = append(names, fmt.Sprintf("%#x", set))
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}
