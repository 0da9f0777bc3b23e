package port

import (
	"errors"
	"fmt"
	"os"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/internal/ethtool"
)

// Interface names the capabilities a port needs and the process lacks
// (CAP_NET_RAW for the sockets, CAP_NET_ADMIN and CAP_BPF for the
// program), before anything is created, and returns the interface
// ifname of the calling thread's network namespace. who prefixes the
// errors.
func Interface(who, ifname string) (netlink.Link, error) {
	if missing := missingCaps(); len(missing) > 0 {
		return nil, fmt.Errorf("%s: needs CAP_NET_RAW for the sockets and CAP_NET_ADMIN and CAP_BPF for the program; missing %v: %w",
			who, missing, os.ErrPermission)
	}
	lnk, err := netlink.LinkByName(ifname)
	if errors.As(err, new(netlink.LinkNotFoundError)) {
		return nil, fmt.Errorf("%s: interface %q: %w", who, ifname, frame.ErrNoDevice)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: interface %q: %w", who, ifname, err)
	}
	return lnk, nil
}

// missingCaps returns the capabilities a port needs that the calling
// thread does not have in its effective set; none when it cannot tell
// (the system calls will say).
func missingCaps() []string {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return nil
	}
	has := func(c uint) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
	var missing []string
	if !has(unix.CAP_NET_RAW) {
		missing = append(missing, "CAP_NET_RAW")
	}
	if !has(unix.CAP_NET_ADMIN) {
		missing = append(missing, "CAP_NET_ADMIN")
	}
	if !has(unix.CAP_BPF) && !has(unix.CAP_SYS_ADMIN) {
		missing = append(missing, "CAP_BPF")
	}
	return missing
}

// RXQueues returns the interface's RX queue count, at least 1: its
// channels (ETHTOOL_GCHANNELS) bounded by the link's RX queues. Not
// /sys/class/net/<if>/queues: sysfs shows the namespace it was mounted
// in, not the caller's.
func RXQueues(lnk netlink.Link) int {
	n := lnk.Attrs().NumRxQueues
	if rx, _, combined, err := ethtool.Channels(lnk.Attrs().Name); err == nil && rx+combined > 0 {
		if n == 0 {
			n = rx + combined
		}
		n = min(n, rx+combined)
	}
	return max(n, 1)
}
