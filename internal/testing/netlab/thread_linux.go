// Threads inside a network namespace: the lowest layer of the lab.

package netlab

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
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
