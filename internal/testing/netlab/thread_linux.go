// Threads inside a network namespace: the lowest layer of the lab.

package netlab

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// runDir is where named namespaces are bind-mounted, as by `ip netns`.
const runDir = "/run/netns"

// sharedRunDir makes runDir a shared mount point once per process.
var sharedRunDir = sync.OnceValue(shareRunDir)

// shareRunDir does what `ip netns add` does before its first namespace:
// it makes runDir a mount point of its own (a recursive bind on itself)
// and shared. A namespace bind-mounted while runDir is a plain directory
// is hidden, and cannot be deleted (EBUSY), once another program (such
// as ip, which the docs' recipes run beside the tests) binds runDir on
// itself; on a shared runDir, every mount and unmount reaches every view.
func shareRunDir() error {
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return err
	}
	err := unix.Mount("", runDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if errors.Is(err, unix.EINVAL) { // not a mount point yet
		if err := unix.Mount(runDir, runDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s on itself: %w", runDir, err)
		}
		err = unix.Mount("", runDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	}
	if err != nil {
		return fmt.Errorf("make %s shared: %w", runDir, err)
	}
	return nil
}

// NewNamed creates the named network namespace name (visible to `ip
// netns`) and returns a handle to it. New names and removes them itself;
// this is for tests that need a name of their own.
func NewNamed(name string) (netns.NsHandle, error) {
	if err := sharedRunDir(); err != nil {
		return -1, fmt.Errorf("create netns %s: %w", name, err)
	}
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
