package wgtunnel

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/internal/nsrun"
)

// currentNS returns the network namespace of the calling thread.
func currentNS() (netns.NsHandle, error) { return netns.Get() }

// inNS runs fn inside network namespace ns.
func inNS(ns netns.NsHandle, fn func() error) error { return nsrun.Run(ns, fn) }

// linkMTU returns the MTU of the link of index i (ErrDeviceRemoved: none).
func linkMTU(i int) (int, error) {
	link, err := netlink.LinkByIndex(i)
	if err != nil {
		if _, ok := errors.AsType[netlink.LinkNotFoundError](err); ok || errors.Is(err, unix.ENODEV) {
			return 0, ErrDeviceRemoved
		}
		return 0, fmt.Errorf("wgtunnel: %w", err)
	}
	return link.Attrs().MTU, nil
}

// setMark sets the socket's SO_MARK (0: clears it).
func setMark(conn *net.UDPConn, mark uint32) error {
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, int(mark))
	}); err != nil {
		return err
	}
	return serr
}
