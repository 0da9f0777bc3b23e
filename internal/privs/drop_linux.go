package privs

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrNoAllThreads: capabilities are per thread, and a binary built with
// cgo cannot change them on every thread (syscall.AllThreadsSyscall).
var ErrNoAllThreads = errors.New("cannot change capabilities on every thread: the binary was built with cgo; build it with CGO_ENABLED=0")

// Securebits (linux/securebits.h) and the set Drop locks: uid 0 gets no
// capabilities from an exec (NOROOT), changing uids does not touch the
// capability sets (NO_SETUID_FIXUP), capabilities are not kept by the
// "keep caps" flag (KEEP_CAPS off and locked) and no ambient capability
// can be raised (NO_CAP_AMBIENT_RAISE); every bit is locked, so that
// none of this can be undone.
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

// Drop leaves every thread of the process with only the capabilities of
// keep that it has (its permitted set), after switching to a (if not
// nil), so that nothing else can come back, not even through an exec by
// uid 0:
//   - the bounding set is cut to them and the securebits are set and
//     locked (lockedSecurebits), when the process may (CAP_SETPCAP: root
//     has it; file capabilities and systemd's ambient capabilities
//     usually do not, and there the bounding set is the caller's);
//   - uid, gid and groups become a's (the capabilities stay across the
//     switch: NO_SETUID_FIXUP, or PR_SET_KEEPCAPS without securebits);
//   - effective and permitted become them, inheritable and ambient
//     empty;
//   - no_new_privs is set: an exec gains nothing, setuid and file
//     capabilities included.
//
// It then reads all of it back and fails if it differs. A binary built
// with cgo gets ErrNoAllThreads, with nothing changed.
func Drop(keep Caps, a *Account) error {
	prm, err := Permitted()
	if err != nil {
		return err
	}
	keep &= prm
	lock := prm&(1<<unix.CAP_SETPCAP) != 0
	if lock {
		if err := lockDown(prm, keep); err != nil {
			return err
		}
	}
	if a != nil {
		if err := switchUser(a, !lock); err != nil {
			return err
		}
	}
	if err := capsetAllThreads(keep, keep, 0); err != nil {
		return err
	}
	if err := allThreadsPrctl("PR_SET_NO_NEW_PRIVS", unix.PR_SET_NO_NEW_PRIVS, 1, 0); err != nil {
		return err
	}
	return verify(keep, lock)
}

// lockDown locks the securebits and cuts the bounding set to keep on
// every thread, which needs CAP_SETPCAP effective: first the effective
// set is raised to the permitted one, prm (file capabilities and
// ambient ones are effective already; root's need not be).
func lockDown(prm, keep Caps) error {
	if err := capsetAllThreads(prm, prm, 0); err != nil {
		return err
	}
	if err := lockSecurebits(); err != nil {
		return err
	}
	return dropBoundingSet(keep)
}

// allThreadsPrctl calls prctl(option, arg2, arg3) on every thread.
func allThreadsPrctl(name string, option, arg2, arg3 uintptr) error {
	_, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, option, arg2, arg3)
	return allThreadsErr("prctl "+name, e)
}

// allThreadsErr is the error of a system call made on every thread:
// ErrNoAllThreads where cgo keeps it from being made at all.
func allThreadsErr(name string, e syscall.Errno) error {
	switch e {
	case 0:
		return nil
	case unix.ENOTSUP:
		return ErrNoAllThreads
	}
	return os.NewSyscallError(name, e)
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
func dropBoundingSet(keep Caps) error {
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

// verify reads back what Drop set. The prctl answers come from every
// thread: syscall.AllThreadsSyscall makes the process exit if a thread's
// answer differs from the first one's, so one answer speaks for all.
// The capability sets are the calling thread's (capget reads one
// thread; capset succeeded on all of them).
func verify(keep Caps, locked bool) error {
	var problems []string
	if nnp, err := allThreadsGet("PR_GET_NO_NEW_PRIVS", unix.PR_GET_NO_NEW_PRIVS, 0); err != nil || nnp != 1 {
		problems = append(problems, fmt.Sprintf("no_new_privs %d (%v)", nnp, err))
	}
	if locked {
		problems = append(problems, verifyLocked(keep)...)
	}
	if eff, err := Effective(); err != nil || eff != keep {
		problems = append(problems, fmt.Sprintf("effective capabilities %s, want %s (%v)", eff, keep, err))
	}
	if prm, err := Permitted(); err != nil || prm != keep {
		problems = append(problems, fmt.Sprintf("permitted capabilities %s, want %s (%v)", prm, keep, err))
	}
	if len(problems) > 0 {
		return fmt.Errorf("privileges not dropped: %s", strings.Join(problems, "; "))
	}
	return nil
}

// verifyLocked checks the securebits and the bounding set of every
// thread: what is wrong.
func verifyLocked(keep Caps) []string {
	var problems []string
	if bits, err := allThreadsGet("PR_GET_SECUREBITS", unix.PR_GET_SECUREBITS, 0); err != nil || bits != lockedSecurebits {
		problems = append(problems, fmt.Sprintf("securebits %s, want %s (%v)",
			securebitNames(int(bits)), securebitNames(lockedSecurebits), err))
	}
	for c := uintptr(0); c <= uintptr(unix.CAP_LAST_CAP); c++ {
		in, err := allThreadsGet("PR_CAPBSET_READ", unix.PR_CAPBSET_READ, c)
		if errors.Is(err, unix.EINVAL) { // a capability this kernel does not know
			break
		}
		if err != nil || (in == 1) != (keep&(1<<c) != 0) {
			problems = append(problems, fmt.Sprintf("capability %d in the bounding set: %d (%v)", c, in, err))
		}
	}
	return problems
}

// allThreadsGet returns what prctl(option, arg2) answers on every
// thread (they answer alike, or the process exits).
func allThreadsGet(name string, option, arg2 uintptr) (uintptr, error) {
	r, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, option, arg2, 0)
	if e != 0 {
		return 0, os.NewSyscallError("prctl "+name, e)
	}
	return r, nil
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
