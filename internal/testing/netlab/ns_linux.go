package netlab

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/internal/ethtool"
	"github.com/gsoplane/gsoplane/internal/nsrun"
)

// Prefix starts the name of every namespace the lab creates.
const Prefix = "gsoplane-"

// NS is a named network namespace with lo up and a netlink handle in it.
type NS struct {
	Name string
	h    netns.NsHandle
	nl   *netlink.Handle
}

var seq atomic.Int64

var sweepOnce sync.Once

// New creates the namespace Prefix+tag+"-PID-N" with lo up and IPv6
// duplicate address detection off for the links made in it. The first
// call of a process sweeps stale namespaces (see SweepStale).
func New(tag string) (*NS, error) {
	sweepOnce.Do(func() { SweepStale() })
	name := fmt.Sprintf("%s%s-%d-%d", Prefix, tag, os.Getpid(), seq.Add(1))
	h, err := NewNamed(name)
	if err != nil {
		return nil, err
	}
	ns := &NS{Name: name, h: h}
	if ns.nl, err = netlink.NewHandleAt(h); err != nil {
		return nil, errors.Join(fmt.Errorf("netlink in %s: %w", name, err), ns.Close())
	}
	// No duplicate address detection on the links made later: until a
	// link-local address has passed it (a second or more), IPv6
	// neighbour discovery sends nothing from that link.
	if err := ns.Sysctl("net/ipv6/conf/default/accept_dad", "0"); err != nil {
		return nil, errors.Join(err, ns.Close())
	}
	if err := ns.LinkUp("lo"); err != nil {
		return nil, errors.Join(err, ns.Close())
	}
	return ns, nil
}

// Close deletes the namespace and with it every device inside. It is
// idempotent.
func (ns *NS) Close() error {
	if ns.nl != nil {
		ns.nl.Close()
		ns.nl = nil
	}
	if ns.h >= 0 {
		ns.h.Close()
		ns.h = -1
	}
	if ns.Name == "" {
		return nil
	}
	name := ns.Name
	ns.Name = ""
	if err := netns.DeleteNamed(name); err != nil {
		return fmt.Errorf("delete netns %s: %w", name, err)
	}
	return nil
}

// Handle returns the namespace's handle.
func (ns *NS) Handle() netns.NsHandle { return ns.h }

// Netlink returns a netlink handle that works inside the namespace from
// any thread. It belongs to ns.
func (ns *NS) Netlink() *netlink.Handle { return ns.nl }

// Run runs fn on the calling goroutine, locked to its thread, inside the
// namespace. Sockets, TUN devices and AF_XDP sockets opened by fn stay in
// it; goroutines fn starts do not run in it.
func (ns *NS) Run(fn func() error) error { return nsrun.Run(ns.h, fn) }

// Start starts cmd inside the namespace: a child inherits the namespace
// of the thread that forks it.
func (ns *NS) Start(cmd *exec.Cmd) error {
	if err := ns.Run(cmd.Start); err != nil {
		return fmt.Errorf("start %s in %s: %w", cmd.Path, ns.Name, err)
	}
	return nil
}

// Link returns the link called name.
func (ns *NS) Link(name string) (netlink.Link, error) {
	l, err := ns.nl.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("link %s in %s: %w", name, ns.Name, err)
	}
	return l, nil
}

// LinkUp sets the link called name up.
func (ns *NS) LinkUp(name string) error {
	l, err := ns.Link(name)
	if err == nil {
		err = ns.nl.LinkSetUp(l)
	}
	if err != nil {
		return fmt.Errorf("link %s up: %w", name, err)
	}
	return nil
}

// AddAddr adds an address in CIDR form to the link called name (IPv6
// without duplicate address detection) and returns once the kernel
// delivers packets to it.
func (ns *NS) AddAddr(name, cidr string) error {
	a, err := netlink.ParseAddr(cidr)
	if err != nil {
		return fmt.Errorf("address %s: %w", cidr, err)
	}
	if a.IP.To4() == nil {
		a.Flags |= unix.IFA_F_NODAD
	}
	l, err := ns.Link(name)
	if err == nil {
		err = ns.nl.AddrAdd(l, a)
	}
	if err != nil {
		return fmt.Errorf("add %s to %s: %w", cidr, name, err)
	}
	return ns.waitLocal(a.IP)
}

// waitLocal waits until ip has its local route. IPv6 inserts it from a
// workqueue after RTM_NEWADDR returns, even without DAD: until then,
// packets to the address are dropped.
func (ns *NS) waitLocal(ip net.IP) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		rs, err := ns.nl.RouteGet(ip)
		if err == nil && len(rs) > 0 && rs[0].Type == unix.RTN_LOCAL {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no local route for %v after 2s (routes %v, %v)", ip, rs, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// AddRoute routes the prefix dst (CIDR) out of the link called name,
// through gw if not empty.
func (ns *NS) AddRoute(dst, name, gw string) error {
	_, ipnet, err := net.ParseCIDR(dst)
	if err != nil {
		return fmt.Errorf("route %s: %w", dst, err)
	}
	l, err := ns.Link(name)
	if err != nil {
		return fmt.Errorf("route %s: %w", dst, err)
	}
	r := &netlink.Route{Dst: ipnet, LinkIndex: l.Attrs().Index}
	if gw != "" {
		r.Gw = net.ParseIP(gw)
	}
	if err := ns.nl.RouteAdd(r); err != nil {
		return fmt.Errorf("route %s dev %s: %w", dst, name, err)
	}
	return nil
}

// Sysctl writes a sysctl (key like "net/ipv4/ip_forward") inside the
// namespace and reads it back.
func (ns *NS) Sysctl(key, value string) error {
	return ns.Run(func() error {
		// /proc/sys/net resolves to the namespace of the opening thread.
		p := filepath.Join("/proc/sys", key)
		if err := os.WriteFile(p, []byte(value), 0o644); err != nil {
			return fmt.Errorf("sysctl %s=%s: %w", key, value, err)
		}
		if b, err := os.ReadFile(p); err != nil || strings.TrimSpace(string(b)) != value {
			return fmt.Errorf("sysctl %s: wrote %s, reads %q (%v)", key, value, b, err)
		}
		return nil
	})
}

// SetFeatures switches device features of the link called name by their
// kernel names or ethtool -K aliases ("tx", "gro", ...), as
// ethtool.SetFeatures does.
func (ns *NS) SetFeatures(name string, want map[string]bool) error {
	return ns.Run(func() error { return ethtool.SetFeatures(name, want) })
}

// Socket opens a socket inside the namespace.
func (ns *NS) Socket(family, typ int) (int, error) {
	fd := -1
	err := ns.Run(func() error {
		var err error
		fd, err = unix.Socket(family, typ|unix.SOCK_CLOEXEC, 0)
		return os.NewSyscallError("socket", err)
	})
	return fd, err
}

// AddVeth creates a veth pair, nameA in a and nameB in b, both up, with
// queues RX and TX queues on each end (0: the kernel's default, one).
// Deleting either end, or either namespace, deletes both.
func AddVeth(a *NS, nameA string, b *NS, nameB string, queues int) error {
	veth := &netlink.Veth{
		LinkAttrs:       netlink.LinkAttrs{Name: nameA, NumTxQueues: queues, NumRxQueues: queues},
		PeerName:        nameB,
		PeerNamespace:   netlink.NsFd(b.h),
		PeerNumTxQueues: uint32(queues),
		PeerNumRxQueues: uint32(queues),
	}
	if err := a.nl.LinkAdd(veth); err != nil {
		return fmt.Errorf("add veth %s/%s: %w", nameA, nameB, err)
	}
	return errors.Join(a.LinkUp(nameA), b.LinkUp(nameB))
}

// SweepStale deletes the lab namespaces whose creating process is gone
// (killed, or timed out: a test timeout skips t.Cleanup) and returns
// their names. Namespaces of live processes are left alone.
func SweepStale() []string {
	var gone []string
	for name, pid := range labNamespaces() {
		if !alive(pid) && netns.DeleteNamed(name) == nil {
			gone = append(gone, name)
		}
	}
	return gone
}

// Owners returns the live processes other than this one that have lab
// namespaces whose tag starts with tag.
func Owners(tag string) []int {
	seen := map[int]bool{}
	for name, pid := range labNamespaces() {
		if strings.HasPrefix(name, Prefix+tag) && pid != os.Getpid() && alive(pid) {
			seen[pid] = true
		}
	}
	pids := make([]int, 0, len(seen))
	for pid := range seen {
		pids = append(pids, pid)
	}
	return pids
}

// labNamespaces returns the named namespaces of the lab and the processes
// that created them.
func labNamespaces() map[string]int {
	ns := map[string]int{}
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		if pid, ok := creator(e.Name()); ok {
			ns[e.Name()] = pid
		}
	}
	return ns
}

// alive reports whether process pid exists.
func alive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// creator returns the process ID in a lab namespace's name.
func creator(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, Prefix)
	if !ok {
		return 0, false
	}
	parts := strings.Split(rest, "-")
	if len(parts) < 3 {
		return 0, false
	}
	var pid int
	if _, err := fmt.Sscanf(parts[len(parts)-2], "%d", &pid); err != nil || pid <= 0 {
		return 0, false
	}
	return pid, true
}
