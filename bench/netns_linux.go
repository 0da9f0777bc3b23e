package main

// Helpers for network namespaces, links, addresses and routes (netlink),
// and /proc/net counters.

import (
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// snmpField returns a field of /proc/net/snmp: a header line and a value
// line, both starting with proto.
func snmpField(snmp, proto, field string) uint64 {
	var hdr []string
	for _, line := range strings.Split(snmp, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != proto {
			continue
		}
		if hdr == nil {
			hdr = f
			continue
		}
		for i := range min(len(hdr), len(f)) {
			if hdr[i] == field {
				v, _ := strconv.ParseUint(f[i], 10, 64)
				return v
			}
		}
	}
	return 0
}

// newNamedNetns creates a named network namespace (visible to `ip netns`).
func newNamedNetns(name string) (netns.NsHandle, error) {
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

// inNetns runs fn on the calling goroutine, locked to its thread, inside
// ns. Sockets and devices opened in fn stay in ns.
func inNetns(ns netns.NsHandle, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("current netns: %w", err)
	}
	defer func() {
		// A thread that cannot go back stays locked and dies with its
		// goroutine instead of running other code in the wrong namespace.
		if unix.Setns(int(orig), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		orig.Close()
	}()
	if err := unix.Setns(int(ns), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter netns: %w", err)
	}
	return fn()
}

func linkUp(h *netlink.Handle, name string) error {
	link, err := h.LinkByName(name)
	if err == nil {
		err = h.LinkSetUp(link)
	}
	if err != nil {
		return fmt.Errorf("link %s up: %w", name, err)
	}
	return nil
}

// addAddr adds an address in CIDR form (IPv6 without duplicate address
// detection).
func addAddr(h *netlink.Handle, name, cidr string) error {
	a, err := netlink.ParseAddr(cidr)
	if err != nil {
		return err
	}
	if a.IP.To4() == nil {
		a.Flags |= unix.IFA_F_NODAD
	}
	link, err := h.LinkByName(name)
	if err == nil {
		err = h.AddrAdd(link, a)
	}
	if err != nil {
		return fmt.Errorf("add %s to %s: %w", cidr, name, err)
	}
	return nil
}

// addRoute routes dst (CIDR) out of the link called name, through gw if
// not empty.
func addRoute(h *netlink.Handle, dst, name, gw string) error {
	_, ipnet, err := net.ParseCIDR(dst)
	if err != nil {
		return err
	}
	link, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("route %s: link %s: %w", dst, name, err)
	}
	r := &netlink.Route{Dst: ipnet, LinkIndex: link.Attrs().Index}
	if gw != "" {
		r.Gw = net.ParseIP(gw)
	}
	if err := h.RouteAdd(r); err != nil {
		return fmt.Errorf("route %s dev %s: %w", dst, name, err)
	}
	return nil
}
