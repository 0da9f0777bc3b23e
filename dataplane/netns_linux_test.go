package dataplane

// Test helpers for throw-away network namespaces. Everything they create
// is removed in t.Cleanup, also when the test fails, and namespace names
// are unique per process and call, so parallel and repeated runs never
// collide. Typical use:
//
//	ns := newNetns(t)                   // skips unless root
//	nl := netlinkIn(t, ns)              // netlink handle inside ns
//	inNetns(t, ns, func() { ... })      // sockets, TUNs opened here live in ns
//	addVeth(t, ns, "veth-a", nsB, "veth-b") // pair across namespaces, both up
//	addAddr(t, nl, "veth-a", "198.18.1.1/24")
//	addRoute(t, nl, "198.19.0.0/16", "veth-a", "") // gateway optional
//	fd := socketIn(t, ns, unix.AF_INET, unix.SOCK_DGRAM) // closed in cleanup

import (
	"fmt"
	"github.com/gsoplane/gsoplane/internal/netnsutil"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

var netnsSeq atomic.Int64

// requireRoot skips the test unless it runs as root.
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs CAP_NET_ADMIN: run as root")
	}
}

// newNetns creates a named network namespace (visible to `ip netns`) with
// lo up, and deletes it in t.Cleanup. It skips the test unless root.
func newNetns(t testing.TB) netns.NsHandle {
	t.Helper()
	ns, _ := newNamedNetns(t)
	return ns
}

// newNamedNetns is newNetns that also returns the namespace's name, for
// commands run with `ip netns exec NAME`.
func newNamedNetns(t testing.TB) (netns.NsHandle, string) {
	t.Helper()
	requireRoot(t)
	name := fmt.Sprintf("gsoplane-%d-%d", os.Getpid(), netnsSeq.Add(1))
	ns, err := netnsutil.NewNamed(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ns.Close()
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("delete netns %s: %v", name, err)
		}
	})
	nl := netlinkIn(t, ns)
	lo, err := nl.LinkByName("lo")
	if err == nil {
		err = nl.LinkSetUp(lo)
	}
	if err != nil {
		t.Fatalf("netns %s: lo up: %v", name, err)
	}
	return ns, name
}

// inNetns runs fn on the calling goroutine, locked to its thread, inside
// ns, and switches back afterwards (also when fn calls t.FailNow).
// Sockets and TUNs opened in fn stay in ns; goroutines started by fn do
// not run in ns.
func inNetns(t testing.TB, ns netns.NsHandle, fn func()) {
	t.Helper()
	if err := netnsutil.Run(ns, func() error { fn(); return nil }); err != nil {
		t.Fatal(err)
	}
}

// netlinkIn returns a netlink handle that works inside ns from any thread,
// closed in t.Cleanup.
func netlinkIn(t testing.TB, ns netns.NsHandle) *netlink.Handle {
	t.Helper()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatalf("netlink handle: %v", err)
	}
	t.Cleanup(h.Close)
	return h
}

// addVeth creates a veth pair, nameA in nsA and nameB in nsB, both up, and
// deletes it in t.Cleanup (deleting either end deletes both).
func addVeth(t testing.TB, nsA netns.NsHandle, nameA string, nsB netns.NsHandle, nameB string) {
	t.Helper()
	addVethQueues(t, nsA, nameA, nsB, nameB, 0)
}

// addVethQueues is addVeth with queues RX and TX queues on both ends (0:
// the kernel's default, one active queue).
func addVethQueues(t testing.TB, nsA netns.NsHandle, nameA string, nsB netns.NsHandle, nameB string, queues int) {
	t.Helper()
	nl := netlinkIn(t, nsA)
	veth := &netlink.Veth{
		LinkAttrs:       netlink.LinkAttrs{Name: nameA, NumTxQueues: queues, NumRxQueues: queues},
		PeerName:        nameB,
		PeerNamespace:   netlink.NsFd(nsB),
		PeerNumTxQueues: uint32(queues),
		PeerNumRxQueues: uint32(queues),
	}
	if err := nl.LinkAdd(veth); err != nil {
		t.Fatalf("add veth %s/%s: %v", nameA, nameB, err)
	}
	t.Cleanup(func() { _ = nl.LinkDel(veth) }) // fails once the netns is gone: fine
	linkUp(t, nl, nameA)
	linkUp(t, netlinkIn(t, nsB), nameB)
}

// mustLink returns the link called name.
func mustLink(t testing.TB, nl *netlink.Handle, name string) netlink.Link {
	t.Helper()
	l, err := nl.LinkByName(name)
	if err != nil {
		t.Fatalf("link %s: %v", name, err)
	}
	return l
}

// linkUp sets the link called name up.
func linkUp(t testing.TB, nl *netlink.Handle, name string) {
	t.Helper()
	if err := nl.LinkSetUp(mustLink(t, nl, name)); err != nil {
		t.Fatalf("link %s up: %v", name, err)
	}
}

// addAddr adds an address in CIDR form to the link called name (IPv6
// without duplicate address detection) and returns once the kernel
// delivers packets to it. It goes with the link or netns.
func addAddr(t testing.TB, nl *netlink.Handle, name, cidr string) {
	t.Helper()
	a, err := netlink.ParseAddr(cidr)
	if err != nil {
		t.Fatalf("address %s: %v", cidr, err)
	}
	if a.IP.To4() == nil {
		a.Flags |= unix.IFA_F_NODAD
	}
	if err := nl.AddrAdd(mustLink(t, nl, name), a); err != nil {
		t.Fatalf("add %s to %s: %v", cidr, name, err)
	}
	waitLocal(t, nl, a.IP)
}

// waitLocal waits until ip has its local route. IPv6 inserts it from a
// workqueue after RTM_NEWADDR returns, even without DAD: until then,
// packets to the address are dropped.
func waitLocal(t testing.TB, nl *netlink.Handle, ip net.IP) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		rs, err := nl.RouteGet(ip)
		if err == nil && len(rs) > 0 && rs[0].Type == unix.RTN_LOCAL {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no local route for %v after 2s (routes %v, %v)", ip, rs, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// addRoute routes the prefix dst (CIDR) out of the link called name,
// through gw if not empty. It goes with the link or netns.
func addRoute(t testing.TB, nl *netlink.Handle, dst, name, gw string) {
	t.Helper()
	_, ipnet, err := net.ParseCIDR(dst)
	if err != nil {
		t.Fatalf("route %s: %v", dst, err)
	}
	r := &netlink.Route{Dst: ipnet, LinkIndex: mustLink(t, nl, name).Attrs().Index}
	if gw != "" {
		r.Gw = net.ParseIP(gw)
	}
	if err := nl.RouteAdd(r); err != nil {
		t.Fatalf("route %s dev %s: %v", dst, name, err)
	}
}

// socketIn opens a socket inside ns, closed in t.Cleanup.
func socketIn(t testing.TB, ns netns.NsHandle, family, typ int) int {
	t.Helper()
	fd := -1
	var err error
	inNetns(t, ns, func() { fd, err = unix.Socket(family, typ|unix.SOCK_CLOEXEC, 0) })
	if err != nil {
		t.Fatalf("socket: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// setSysctl writes a net sysctl (key like "net/ipv4/ip_forward") inside ns.
func setSysctl(t testing.TB, ns netns.NsHandle, key, value string) {
	t.Helper()
	inNetns(t, ns, func() {
		// /proc/sys/net resolves to the namespace of the opening thread.
		if err := os.WriteFile(filepath.Join("/proc/sys", key), []byte(value), 0o644); err != nil {
			t.Fatalf("sysctl %s=%s: %v", key, value, err)
		}
	})
}
