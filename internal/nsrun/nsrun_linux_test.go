package nsrun_test

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/internal/nsrun"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// TestRunWithoutSysAdmin: on a thread with CAP_NET_ADMIN alone (as
// cmd/wggso runs once it dropped its privileges), Run in the thread's
// own namespace runs fn there, and Run in another namespace fails
// (setns: EPERM) without running fn.
func TestRunWithoutSysAdmin(t *testing.T) {
	other := netlab.NewT(t, "nsrun")
	err := netlab.WithCaps(1<<unix.CAP_NET_ADMIN, func() error {
		own, err := netns.Get()
		if err != nil {
			return err
		}
		defer own.Close()
		if err := nsrun.Run(own, func() error { return inNS(own) }); err != nil {
			return fmt.Errorf("own namespace: %w", err)
		}
		ran := false
		err = nsrun.Run(other.Handle(), func() error { ran = true; return nil })
		if !errors.Is(err, unix.EPERM) || ran {
			return fmt.Errorf("another namespace: %v (fn ran: %v), want EPERM without running fn", err, ran)
		}
		return inNS(own)
	})
	netlab.Must(t, err)
}

// inNS fails unless the calling thread is in ns.
func inNS(ns netns.NsHandle) error {
	cur, err := netns.Get()
	if err != nil {
		return err
	}
	defer cur.Close()
	if !cur.Equal(ns) {
		return fmt.Errorf("in %s, want %s", cur, ns)
	}
	return nil
}

// TestRunGoesBack: fn that moves its thread to a namespace of its own
// (unshare), run in the thread's namespace (no switch in), still leaves
// the thread back where it was.
func TestRunGoesBack(t *testing.T) {
	netlab.RequireRoot(t)
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: should the thread stay elsewhere, it ends
		// with this goroutine.
		runtime.LockOSThread()
		own, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer own.Close()
		err = nsrun.Run(own, func() error {
			return os.NewSyscallError("unshare", unix.Unshare(unix.CLONE_NEWNET))
		})
		if err != nil {
			errc <- err
			return
		}
		errc <- inNS(own)
	}()
	netlab.Must(t, <-errc)
}
