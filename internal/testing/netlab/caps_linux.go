// Code run with fewer capabilities than the test process has.

package netlab

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// WithCaps runs fn on a thread of its own whose effective capabilities
// are only those of caps (a mask of 1<<unix.CAP_* bits) that the process
// has: the loader a binary with file capabilities, or a systemd unit's
// AmbientCapabilities, makes. The other threads keep theirs; the thread
// exits with fn. It returns fn's error, or why the thread could not drop
// the others.
func WithCaps(caps uint64, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the Go runtime ends the thread with this
		// goroutine, and starts no other thread from a locked one.
		runtime.LockOSThread()
		if err := setEffectiveCaps(caps); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// setEffectiveCaps leaves the calling thread's effective set with only
// the capabilities of caps it has, and checks that it did.
func setEffectiveCaps(caps uint64) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData // version 3: capabilities 0-31, then 32-63
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return os.NewSyscallError("capget", err)
	}
	for i := range data {
		data[i].Effective &= uint32(caps >> (32 * i))
	}
	want := data
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return os.NewSyscallError("capset", err)
	}
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return os.NewSyscallError("capget", err)
	}
	if data != want {
		return fmt.Errorf("capabilities %+v after capset, want %+v", data, want)
	}
	return nil
}
