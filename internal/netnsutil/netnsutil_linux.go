// Package netnsutil runs code inside Linux network namespaces, creates
// named ones (visible to `ip netns`), and reads and writes sysfs as seen
// from inside one. It is the lowest layer of internal/netlab, the lab the
// privileged tests and the bench build their topologies with. Sockets, TUN
// devices and netlink handles opened inside a namespace stay there.
package netnsutil

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NewNamed creates the named network namespace name.
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

// RunNamed runs fn inside the named namespace name, on a thread of its own
// that is thrown away afterwards.
func RunNamed(name string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		f, err := os.Open(filepath.Join("/run/netns", name))
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", name, os.NewSyscallError("setns", err))
			return
		}
		errc <- fn()
	}()
	return <-errc
}
