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
// in the wrong namespace. A thread in ns already runs fn without a
// switch: setns needs CAP_SYS_ADMIN, which a process that dropped its
// privileges (cmd/wggso) no longer has, even for its own namespace.
func Run(ns netns.NsHandle, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("current netns: %w", err)
	}
	defer goBack(orig)
	if !orig.Equal(ns) {
		if err := unix.Setns(int(ns), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("enter netns: %w", os.NewSyscallError("setns", err))
		}
	}
	return fn()
}

// goBack returns the calling thread to orig (if it is elsewhere), closes
// orig and unlocks the thread; a thread that cannot go back stays locked.
func goBack(orig netns.NsHandle) {
	defer orig.Close()
	if cur, err := netns.Get(); err == nil {
		there := cur.Equal(orig)
		cur.Close()
		if there {
			runtime.UnlockOSThread()
			return
		}
	}
	if unix.Setns(int(orig), unix.CLONE_NEWNET) == nil {
		runtime.UnlockOSThread()
	}
}
