package main

// Helpers for network namespaces, links, addresses and routes (netlink),
// and /proc/net counters.

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
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
