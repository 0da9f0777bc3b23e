package main

import (
	"fmt"
	"os/exec"
	"runtime"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// startWired starts cmd (QEMU with netdevArgs(true, …)) in a new network
// namespace holding the taps on one bridge, which goes when QEMU exits; it
// returns why not when the namespace or the taps cannot be made, and
// then has not started cmd.
func startWired(cmd *exec.Cmd) (why string, err error) {
	type result struct {
		why string
		err error
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: the thread, in the new namespace, ends with
		// this goroutine; QEMU, forked from it, keeps the namespace.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			done <- result{why: fmt.Sprintf("unshare a network namespace: %v", err)}
			return
		}
		if why := makeWire(); why != "" {
			done <- result{why: why}
			return
		}
		done <- result{err: cmd.Start()}
	}()
	r := <-done
	return r.why, r.err
}

// makeWire makes the bridge and the taps in the thread's namespace, or
// says why it could not.
func makeWire() string {
	if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "gsobr0"}}); err != nil {
		return fmt.Sprintf("add bridge: %v", err)
	}
	br, err := netlink.LinkByName("gsobr0")
	if err != nil {
		return fmt.Sprintf("bridge: %v", err)
	}
	for _, name := range wireTaps {
		tap := &netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: name}, Mode: netlink.TUNTAP_MODE_TAP,
			Flags: netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR}
		if err := netlink.LinkAdd(tap); err != nil {
			return fmt.Sprintf("add tap %s: %v", name, err)
		}
		// The kernel keeps the persistent tap; QEMU opens it by name.
		for _, fd := range tap.Fds {
			fd.Close()
		}
		if err := netlink.LinkSetMaster(tap, br); err != nil {
			return fmt.Sprintf("%s on the bridge: %v", name, err)
		}
		if err := netlink.LinkSetUp(tap); err != nil {
			return fmt.Sprintf("%s up: %v", name, err)
		}
	}
	if err := netlink.LinkSetUp(br); err != nil {
		return fmt.Sprintf("bridge up: %v", err)
	}
	return ""
}
