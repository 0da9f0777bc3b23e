package netlab

import (
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// WriteSysfs writes value to the sysfs file path (an absolute path under
// /sys, such as /sys/class/net/veth0/gro_flush_timeout) as seen from
// inside the namespace. sysfs shows the devices of the namespace it was
// mounted in, so this mounts a fresh one, as `ip netns exec` does, in a
// private mount namespace of a thread of its own that is thrown away
// afterwards; the caller's mounts do not change.
func (ns *NS) WriteSysfs(path, value string) error {
	return withSysfs(ns.h, func() error {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		if _, err := f.WriteString(value); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	})
}

// ReadSysfs returns the contents of the sysfs file path, without the
// trailing newline, as seen from inside the namespace, the way WriteSysfs
// writes it.
func (ns *NS) ReadSysfs(path string) (string, error) {
	var value string
	err := withSysfs(ns.h, func() error {
		b, err := os.ReadFile(path)
		value = strings.TrimSuffix(string(b), "\n")
		return err
	})
	return value, err
}

// withSysfs runs fn on a new thread inside ns that has a mount namespace
// of its own with ns's sysfs on /sys. The thread stays locked and exits
// with its goroutine, taking both namespaces with it.
func withSysfs(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked, see above
		errc <- enterWithSysfs(ns, fn)
	}()
	return <-errc
}

// enterWithSysfs moves the calling thread into a private copy of its mount
// namespace and into ns, mounts sysfs on /sys there and runs fn.
func enterWithSysfs(ns netns.NsHandle, fn func() error) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("sysfs: %w", os.NewSyscallError("unshare CLONE_NEWNS", err))
	}
	// Keep the mounts below from propagating back to the host.
	if err := unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("sysfs: make / a slave: %w", os.NewSyscallError("mount", err))
	}
	if err := unix.Setns(int(ns), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("sysfs: enter netns: %w", os.NewSyscallError("setns", err))
	}
	if err := unix.Mount("sysfs", "/sys", "sysfs", 0, ""); err != nil {
		return fmt.Errorf("sysfs: mount on /sys: %w", os.NewSyscallError("mount", err))
	}
	if err := fn(); err != nil {
		return fmt.Errorf("sysfs: %w", err)
	}
	return nil
}
