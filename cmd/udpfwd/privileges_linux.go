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

// Securebits (linux/securebits.h) and the set udpfwd locks: uid 0 gets
// no capabilities from an exec (NOROOT), changing uids does not touch
// the capability sets (NO_SETUID_FIXUP), capabilities are not kept by
// the "keep caps" flag (KEEP_CAPS off and locked) and no ambient
// capability can be raised (NO_CAP_AMBIENT_RAISE); every bit is locked,
// so that none of this can be undone.
const (
	secbitNoRoot                  = 1 << 0
	secbitNoRootLocked            = 1 << 1
	secbitNoSetuidFixup           = 1 << 2
	secbitNoSetuidFixupLocked     = 1 << 3
	secbitKeepCaps                = 1 << 4
	secbitKeepCapsLocked          = 1 << 5
	secbitNoCapAmbientRaise       = 1 << 6
	secbitNoCapAmbientRaiseLocked = 1 << 7

	lockedSecurebits = secbitNoRoot | secbitNoRootLocked | secbitNoSetuidFixup | secbitNoSetuidFixupLocked |
		secbitKeepCapsLocked | secbitNoCapAmbientRaise | secbitNoCapAmbientRaiseLocked
)

// dropPrivileges leaves every thread with only keptCaps, after switching
// to a (if not nil), so that nothing else can come back, not even
// through an exec by uid 0:
//   - the bounding set is cut to keptCaps and the securebits are set and
//     locked (lockedSecurebits), when the process may (CAP_SETPCAP: root
//     has it; file capabilities and systemd's ambient capabilities
//     usually do not, and there the bounding set is the caller's);
//   - uid, gid and groups become a's (the capabilities stay across the
//     switch: NO_SETUID_FIXUP, or PR_SET_KEEPCAPS without securebits);
//   - effective and permitted become keptCaps, inheritable and ambient
//     empty;
//   - no_new_privs is set: an exec gains nothing, setuid and file
//     capabilities included.
//
// It then reads all of it back and fails if a thread differs.
func dropPrivileges(a *account) error {
	prm, err := permittedCaps()
	if err != nil {
		return err
	}
	lock := prm&(1<<unix.CAP_SETPCAP) != 0
	if lock {
		// Capabilities are used from the effective set: raise it to
		// the permitted one (the file-capability and ambient cases
		// have them effective already).
		if err := capsetAllThreads(prm, prm, 0); err != nil {
			return err
		}
		if err := lockSecurebits(); err != nil {
			return err
		}
		if err := dropBoundingSet(keptCaps); err != nil {
			return err
		}
	}
	if a != nil {
		if err := switchUser(a, !lock); err != nil {
			return err
		}
	}
	if err := capsetAllThreads(keptCaps, keptCaps, 0); err != nil {
		return err
	}
	if err := allThreadsPrctl("PR_SET_NO_NEW_PRIVS", unix.PR_SET_NO_NEW_PRIVS, 1, 0); err != nil {
		return err
	}
	return verifyPrivileges(lock)
}

// allThreadsPrctl calls prctl(option, arg2, arg3) on every thread.
func allThreadsPrctl(name string, option, arg2, arg3 uintptr) error {
	_, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, option, arg2, arg3)
	switch e {
	case 0:
		return nil
	case unix.ENOTSUP:
		return errNoAllThreads
	}
	return os.NewSyscallError("prctl "+name, e)
}

// lockSecurebits sets and locks lockedSecurebits on every thread (a
// no-op if a parent did already).
func lockSecurebits() error {
	bits, err := unix.PrctlRetInt(unix.PR_GET_SECUREBITS, 0, 0, 0, 0)
	if err != nil {
		return os.NewSyscallError("prctl PR_GET_SECUREBITS", err)
	}
	if bits == lockedSecurebits {
		return nil
	}
	if err := allThreadsPrctl("PR_SET_SECUREBITS", unix.PR_SET_SECUREBITS, lockedSecurebits, 0); err != nil {
		return fmt.Errorf("lock securebits %#x (were %#x): %w", lockedSecurebits, bits, err)
	}
	return nil
}

// dropBoundingSet removes every capability but keep from the bounding
// set of every thread.
func dropBoundingSet(keep uint64) error {
	for c := uintptr(0); c <= uintptr(unix.CAP_LAST_CAP); c++ {
		if keep&(1<<c) != 0 {
			continue
		}
		if err := allThreadsPrctl("PR_CAPBSET_DROP", unix.PR_CAPBSET_DROP, c, 0); err != nil {
			if errors.Is(err, unix.EINVAL) { // a capability this kernel does not know
				break
			}
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	return nil
}

// verifyPrivileges reads back what dropPrivileges set, on every thread:
// syscall.AllThreadsSyscall makes the process exit if a thread's answer
// differs from the first one's, so one answer speaks for all.
func verifyPrivileges(locked bool) error {
	get := func(name string, option, arg2 uintptr) (uintptr, error) {
		r, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, option, arg2, 0)
		if e != 0 {
			return 0, os.NewSyscallError("prctl "+name, e)
		}
		return r, nil
	}
	var problems []string
	if nnp, err := get("PR_GET_NO_NEW_PRIVS", unix.PR_GET_NO_NEW_PRIVS, 0); err != nil || nnp != 1 {
		problems = append(problems, fmt.Sprintf("no_new_privs %d (%v)", nnp, err))
	}
	if locked {
		if bits, err := get("PR_GET_SECUREBITS", unix.PR_GET_SECUREBITS, 0); err != nil || bits != lockedSecurebits {
			problems = append(problems, fmt.Sprintf("securebits %s, want %s (%v)",
				securebitNames(int(bits)), securebitNames(lockedSecurebits), err))
		}
		for c := uintptr(0); c <= uintptr(unix.CAP_LAST_CAP); c++ {
			in, err := get("PR_CAPBSET_READ", unix.PR_CAPBSET_READ, c)
			if errors.Is(err, unix.EINVAL) {
				break
			}
			if err != nil || (in == 1) != (keptCaps&(1<<c) != 0) {
				problems = append(problems, fmt.Sprintf("capability %d in the bounding set: %d (%v)", c, in, err))
			}
		}
	}
	if eff, err := effectiveCaps(); err != nil || eff != keptCaps {
		problems = append(problems, fmt.Sprintf("effective capabilities %s (%v)", capNames(eff), err))
	}
	if len(problems) > 0 {
		return fmt.Errorf("privileges not dropped: %s", strings.Join(problems, "; "))
	}
	return nil
}

// permittedCaps returns the calling thread's permitted capabilities.
func permittedCaps() (uint64, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, os.NewSyscallError("capget", err)
	}
	return uint64(data[0].Permitted) | uint64(data[1].Permitted)<<32, nil
}

// securebitNames lists the securebits in bits.
func securebitNames(bits int) string {
	var names []string
	for i, name := range []string{"noroot", "noroot_locked", "no_setuid_fixup", "no_setuid_fixup_locked",
		"keep_caps", "keep_caps_locked", "no_cap_ambient_raise", "no_cap_ambient_raise_locked"} {
		if bits&(1<<i) != 0 {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}

// switchUser changes the uid, gid and groups of every thread to a's.
// The capabilities stay across the change: with the securebits locked
// (NO_SETUID_FIXUP) the kernel leaves them alone; without (keepCaps) the
// permitted ones are kept with PR_SET_KEEPCAPS (the effective ones are
// cleared by the kernel and restored by the caller's capset).
func switchUser(a *account, keepCaps bool) error {
	if keepCaps {
		if err := allThreadsPrctl("PR_SET_KEEPCAPS", unix.PR_SET_KEEPCAPS, 1, 0); err != nil {
			return err
		}
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
