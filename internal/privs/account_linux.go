package privs

import (
	"os"
	"os/user"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// An Account is a user Drop switches every thread to: its uid, its
// primary gid and its supplementary groups.
type Account struct {
	UID, GID int
	Groups   []int
}

// LookupAccount resolves spec, a user name or a numeric uid, and checks
// that this binary can switch every thread to it (ErrNoAllThreads: it
// cannot, built with cgo).
func LookupAccount(spec string) (*Account, error) {
	u, err := user.Lookup(spec)
	if _, notNumber := strconv.Atoi(spec); err != nil && notNumber == nil {
		u, err = user.LookupId(spec)
	}
	if err != nil {
		return nil, err
	}
	a := new(Account)
	a.UID, _ = strconv.Atoi(u.Uid)
	a.GID, _ = strconv.Atoi(u.Gid)
	gids, _ := u.GroupIds()
	for _, g := range gids {
		if n, err := strconv.Atoi(g); err == nil {
			a.Groups = append(a.Groups, n)
		}
	}
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_GET_KEEPCAPS, 0, 0); e == unix.ENOTSUP {
		return nil, ErrNoAllThreads
	}
	return a, nil
}

// switchUser changes the uid, gid and groups of every thread to a's.
// The capabilities stay across the change: with the securebits locked
// (NO_SETUID_FIXUP) the kernel leaves them alone; without (keepCaps) the
// permitted ones are kept with PR_SET_KEEPCAPS (the effective ones are
// cleared by the kernel and restored by the caller's capset).
func switchUser(a *Account, keepCaps bool) error {
	if keepCaps {
		if err := allThreadsPrctl("PR_SET_KEEPCAPS", unix.PR_SET_KEEPCAPS, 1, 0); err != nil {
			return err
		}
	}
	if err := syscall.Setgroups(a.Groups); err != nil {
		return os.NewSyscallError("setgroups", err)
	}
	if err := syscall.Setgid(a.GID); err != nil {
		return os.NewSyscallError("setgid", err)
	}
	if err := syscall.Setuid(a.UID); err != nil {
		return os.NewSyscallError("setuid", err)
	}
	return nil
}
