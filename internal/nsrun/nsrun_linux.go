// Package nsrun runs code on a thread inside a Linux network namespace:
// sockets, TUN devices and BPF links made there belong to that namespace.
// The NIC ports (dataplane/internal/port) use it to re-attach their programs from
// any goroutine,
// and internal/testing/netlab builds the tests' namespaces on it.
package nsrun

import (
	"fmt"
	"os"
	"runtime"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Run runs fn on the calling goroutine, locked to its thread, inside ns,
// and switches the thread back afterwards. A thread that cannot go back
// stays locked and exits with the goroutine instead of running other code
// in the wrong namespace.
func Run(ns netns.NsHandle, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("current netns: %w", err)
	}
	defer func() {
		if unix.Setns(int(orig), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		orig.Close()
	}()
	if err := unix.Setns(int(ns), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter netns: %w", os.NewSyscallError("setns", err))
	}
	return fn()
}
