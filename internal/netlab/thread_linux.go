// Threads inside a network namespace: the lowest layer of the lab.

package netlab

import (
	"fmt"
	"os"
	"runtime"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NewNamed creates the named network namespace name (visible to `ip
// netns`) and returns a handle to it. New names and removes them itself;
// this is for tests that need a name of their own.
func NewNamed(name string) (netns.NsHandle, error) {
	var ns netns.NsHandle
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		// NewNamed moves the calling thread into the new namespace: the
		// thread stays locked and exits with this goroutine.
		runtime.LockOSThread()
		ns, err = netns.NewNamed(name)
	}()
	<-done
	if err != nil {
		return -1, fmt.Errorf("create netns %s: %w", name, err)
	}
	return ns, nil
}

// runIn runs fn on the calling goroutine, locked to its thread, inside ns,
// and switches the thread back afterwards. A thread that cannot go back
// stays locked and exits with the goroutine instead of running other code
// in the wrong namespace.
func runIn(ns netns.NsHandle, fn func() error) error {
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
