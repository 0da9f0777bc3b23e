package main

// The reference topology (DESIGN.md), built fresh for every measured run:
//
//	netns A (gsobench-PID-N-a)                       netns B (gsobench-PID-N-b)
//	 sender; 198.18.0.1 on the TUN                    receiver; 198.19.0.2 on gw-b
//	 198.19.0.0/24 -> TUN                             198.18.0.0/24 via 198.18.100.1
//	 TUN <-- gateway --> gw-a 198.18.100.1 ===veth=== gw-b 198.18.100.2
//
// The veth pair has two queues on each end, as the dataplane tests use it.
// gw-b checksums in software (ethtool -K gw-b tx off): a veth hands its peer
// partial checksums in memory, and AF_XDP sees only the bytes. gw-b
// coalesces what it receives (gro on), as a host behind a real NIC does; a
// veth does not by default. Traffic only
// ever goes to 198.18.0.0/15 and 2001:2::/48.

import (
	"errors"
	"fmt"
	"github.com/gsoplane/gsoplane/internal/netnsutil"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gsoplane/gsoplane/dataplane"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

const (
	nicA    = "gw-a"
	nicB    = "gw-b"
	tunName = "gsotun0"
)

var (
	app4    = netip.MustParseAddr("198.18.0.1")
	srv4    = netip.MustParseAddr("198.19.0.2")
	nicA4   = "198.18.100.1"
	nicB4   = "198.18.100.2"
	nicA6   = "2001:2:0:100::1"
	nicB6   = "2001:2:0:100::2"
	aRoutes = []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24"), netip.MustParsePrefix("2001:2:0:1::/64")}
)

// lab is one instance of the topology: two named network namespaces and
// the veth pair between them.
type lab struct {
	a, b         netns.NsHandle
	aName, bName string
	nlA, nlB     *netlink.Handle
}

var labSeq atomic.Int64

// liveLabs are the labs not yet closed, removed by closeAllLabs on the way
// out (also after a failure or an interrupt).
var liveLabs struct {
	sync.Mutex
	m map[*lab]bool
}

// newLab builds the topology without a gateway: the caller adds one, or
// the kernel route (routeKernel).
func newLab() (l *lab, err error) {
	n := labSeq.Add(1)
	l = &lab{a: -1, b: -1}
	liveLabs.Lock()
	if liveLabs.m == nil {
		liveLabs.m = make(map[*lab]bool)
	}
	liveLabs.m[l] = true
	liveLabs.Unlock()
	defer func() {
		if err != nil {
			l.close()
		}
	}()
	base := fmt.Sprintf("%s%d-%d", netnsPrefix, os.Getpid(), n)
	if l.a, err = netnsutil.NewNamed(base + "-a"); err != nil {
		return l, err
	}
	l.aName = base + "-a"
	if l.b, err = netnsutil.NewNamed(base + "-b"); err != nil {
		return l, err
	}
	l.bName = base + "-b"
	if l.nlA, err = netlink.NewHandleAt(l.a); err != nil {
		return l, fmt.Errorf("netlink in %s: %w", l.aName, err)
	}
	if l.nlB, err = netlink.NewHandleAt(l.b); err != nil {
		return l, fmt.Errorf("netlink in %s: %w", l.bName, err)
	}
	for _, h := range []*netlink.Handle{l.nlA, l.nlB} {
		if err = linkUp(h, "lo"); err != nil {
			return l, err
		}
	}
	veth := &netlink.Veth{
		LinkAttrs:       netlink.LinkAttrs{Name: nicA, NumTxQueues: 2, NumRxQueues: 2},
		PeerName:        nicB,
		PeerNamespace:   netlink.NsFd(l.b),
		PeerNumTxQueues: 2,
		PeerNumRxQueues: 2,
	}
	if err = l.nlA.LinkAdd(veth); err != nil {
		return l, fmt.Errorf("add veth %s/%s: %w", nicA, nicB, err)
	}
	steps := []func() error{
		func() error { return linkUp(l.nlA, nicA) },
		func() error { return linkUp(l.nlB, nicB) },
		func() error { return addAddr(l.nlA, nicA, nicA4+"/24") },
		func() error { return addAddr(l.nlA, nicA, nicA6+"/64") },
		func() error { return addAddr(l.nlB, nicB, nicB4+"/24") },
		func() error { return addAddr(l.nlB, nicB, nicB6+"/64") },
		// The server addresses live on gw-b, so that A resolves them on
		// link through gw-a.
		func() error { return addAddr(l.nlB, nicB, srv4.String()+"/24") },
		func() error { return addAddr(l.nlB, nicB, "2001:2:0:19::2/64") },
		func() error { return addRoute(l.nlB, "198.18.0.0/24", nicB, nicA4) },
		func() error { return addRoute(l.nlB, "2001:2:0:1::/64", nicB, nicA6) },
		func() error { return l.execB("ethtool", "-K", nicB, "tx", "off", "gro", "on") },
	}
	for _, step := range steps {
		if err = step(); err != nil {
			return l, err
		}
	}
	return l, nil
}

// close deletes the namespaces (and with them every device inside).
func (l *lab) close() error {
	liveLabs.Lock()
	delete(liveLabs.m, l)
	liveLabs.Unlock()
	var errs []error
	for _, h := range []*netlink.Handle{l.nlA, l.nlB} {
		if h != nil {
			h.Close()
		}
	}
	for _, ns := range []struct {
		h    netns.NsHandle
		name string
	}{{l.a, l.aName}, {l.b, l.bName}} {
		if ns.h >= 0 {
			ns.h.Close()
		}
		if ns.name != "" {
			if err := netns.DeleteNamed(ns.name); err != nil {
				errs = append(errs, fmt.Errorf("delete netns %s: %w", ns.name, err))
			}
		}
	}
	l.a, l.b, l.aName, l.bName = -1, -1, "", ""
	return errors.Join(errs...)
}

// closeAllLabs removes every lab still open.
func closeAllLabs() error {
	liveLabs.Lock()
	labs := make([]*lab, 0, len(liveLabs.m))
	for l := range liveLabs.m {
		labs = append(labs, l)
	}
	liveLabs.Unlock()
	var errs []error
	for _, l := range labs {
		errs = append(errs, l.close())
	}
	return errors.Join(errs...)
}

// tunUp brings a TUN device in A up with the application's addresses and
// routes the server's prefixes into it.
func (l *lab) tunUp(name string) error {
	for _, step := range []func() error{
		func() error { return linkUp(l.nlA, name) },
		func() error { return addAddr(l.nlA, name, app4.String()+"/24") },
		func() error { return addAddr(l.nlA, name, "2001:2:0:1::1/64") },
		func() error { return addRoute(l.nlA, "198.19.0.0/24", name, "") },
		func() error { return addRoute(l.nlA, "2001:2:0:19::/64", name, "") },
	} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// noqueue gives a device in A the noqueue qdisc and a ring of qlen packets
// (if qlen > 0), as OpenGateway does for its TUN device, so that peers'
// TUN devices are set up alike.
func (l *lab) noqueue(name string, qlen int) error {
	link, err := l.nlA.LinkByName(name)
	if err != nil {
		return fmt.Errorf("link %s: %w", name, err)
	}
	return netnsutil.Run(l.a, func() error { return dataplane.SetTUNQueue(link.Attrs().Index, qlen) })
}

// routeKernel routes the server's prefixes from A straight out of gw-a:
// the kernel forwards between the namespaces, no userspace involved.
func (l *lab) routeKernel() error {
	if err := addRoute(l.nlA, "198.19.0.0/24", nicA, nicB4); err != nil {
		return err
	}
	return addRoute(l.nlA, "2001:2:0:19::/64", nicA, nicB6)
}

// dropUDPAtB drops IPv4 UDP packets to port on gw-b's ingress (tc cls_bpf
// with a classic BPF program), so that a small-packet flood costs B as
// little as possible; ARP and everything else pass.
func (l *lab) dropUDPAtB(port int) error {
	if err := l.execB("tc", "qdisc", "add", "dev", nicB, "clsact"); err != nil {
		return err
	}
	// cls_bpf runs ingress programs from the Ethernet header on:
	// ldb [14+9]; jeq #17 ? next : pass; ldh [14+20+2]; jeq #port ? drop :
	// pass; drop: ret #2 (TC_ACT_SHOT); pass: ret #0 (TC_ACT_OK). Offsets
	// assume a 20-byte IPv4 header, which is what our sender sends.
	prog := fmt.Sprintf("6,48 0 0 23,21 0 3 17,40 0 0 36,21 0 1 %d,6 0 0 2,6 0 0 0", port)
	return l.execB("tc", "filter", "add", "dev", nicB, "ingress", "protocol", "ip", "prio", "1", "bpf", "da", "bytecode", prog)
}

// rxPacketsB returns how many packets gw-b has received.
func (l *lab) rxPacketsB() uint64 {
	link, err := l.nlB.LinkByName(nicB)
	if err != nil || link.Attrs().Statistics == nil {
		return 0
	}
	return link.Attrs().Statistics.RxPackets
}

// udpCounterB returns a field of B's Udp counters (/proc/net/snmp), such
// as RcvbufErrors (datagrams dropped for want of socket buffer) or NoPorts
// (datagrams for a port nobody listens on).
func (l *lab) udpCounterB(field string) uint64 {
	var v uint64
	netnsutil.Run(l.b, func() error {
		// /proc/thread-self/net is the namespace of this (locked) thread.
		b, err := os.ReadFile("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		v = snmpField(string(b), "Udp:", field)
		return nil
	})
	return v
}

// execB runs a command inside B.
func (l *lab) execB(name string, args ...string) error {
	return execIn(l.bName, name, args...)
}

func execIn(ns, name string, args ...string) error {
	if _, err := exec.LookPath(name); err != nil {
		return fmt.Errorf("%s is needed (apt-get install %s): %w", name, pkgOf(name), err)
	}
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s in %s: %w: %s", name, strings.Join(args, " "), ns, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func pkgOf(cmd string) string {
	if cmd == "tc" {
		return "iproute2"
	}
	return cmd
}
