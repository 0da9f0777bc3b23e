package netlab

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/internal/ethtool"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

func TestCreator(t *testing.T) {
	for name, want := range map[string]int{
		Prefix + "bench-a-1234-7": 1234,
		Prefix + "kt-gw-99-1":     99,
		Prefix + "x-0-1":          0,
		"other-1234-7":            0,
		Prefix + "bench":          0,
	} {
		if pid, ok := creator(name); pid != want || ok != (want > 0) {
			t.Errorf("creator(%q) = %d, %v; want %d", name, pid, ok, want)
		}
	}
}

// TestTopology builds the reference topology and checks what the tests
// and the bench rely on: B's features, and that A reaches the server
// through gw-a once the kernel routes it.
func TestTopology(t *testing.T) {
	tp := NewTopologyT(t, "lab")
	Must(t, tp.RouteKernel())
	var f map[string]ethtool.Feature
	Must(t, tp.B.Run(func() (err error) { f, err = ethtool.Features(NICB); return err }))
	if f["tx-checksum-ip-generic"].Active || !f["rx-gro"].Active {
		t.Errorf("gw-b: tx checksum %+v, GRO %+v; want off, on", f["tx-checksum-ip-generic"], f["rx-gro"])
	}
	var ln net.Listener
	Must(t, tp.B.Run(func() (err error) { ln, err = net.Listen("tcp", netip.AddrPortFrom(Srv4, 7).String()); return err }))
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	tp.A.Do(t, func() {
		c, err := net.Dial("tcp", netip.AddrPortFrom(Srv4, 7).String())
		if err != nil {
			t.Fatalf("A to the server through gw-a: %v", err)
		}
		c.Close()
	})
}

// TestSweepStale: a namespace of a process that is gone is removed, one
// of a live process (this one) is left alone.
func TestSweepStale(t *testing.T) {
	RequireRoot(t)
	stale := Prefix + "sweep-4194305-1" // above pid_max: no such process
	h, err := NewNamed(stale)
	Must(t, err)
	h.Close()
	t.Cleanup(func() { netns.DeleteNamed(stale) })
	live := NewT(t, "sweep")
	if gone := SweepStale(); !slices.Contains(gone, stale) || slices.Contains(gone, live.Name) {
		t.Errorf("SweepStale removed %v; want %s and not %s", gone, stale, live.Name)
	}
	if pids := Owners("sweep"); len(pids) != 0 {
		t.Errorf("Owners counts this process or a dead one: %v", pids)
	}
}

// TestTraffic: TCPTransfer moves a checked stream each way and Echo gets
// its answers, here with the kernel routing between A and B.
func TestTraffic(t *testing.T) {
	tp := NewTopologyT(t, "traffic")
	Must(t, tp.RouteKernel())
	for _, srv := range []netip.Addr{Srv4, Srv6} {
		for _, toClient := range []bool{false, true} {
			if d := TCPTransfer(t, tp.A, tp.B, netip.AddrPortFrom(srv, 5201), 1<<20+5, toClient); d <= 0 {
				t.Errorf("TCPTransfer to %v (back %v) took %v", srv, toClient, d)
			}
		}
	}
	for _, a := range []netip.Addr{NICB4, NICB6} {
		Echo(t, tp.B, tp.A, a, 5*time.Second)
	}
	// Counters reads both files: the transfers' segments (GRO's
	// super-packets each one), Echo's datagram, a TcpExt counter.
	c := tp.B.Counters(t)
	if _, ok := c["TcpExt:TCPOFOQueue"]; !ok || c["Tcp:InSegs"] < 100 || c["Udp:InDatagrams"] == 0 {
		t.Errorf("B's counters after the transfers: Tcp:InSegs %d, Udp:InDatagrams %d, TcpExt:TCPOFOQueue there %v", c["Tcp:InSegs"], c["Udp:InDatagrams"], ok)
	}
}

// TestFeatureProbes: each probe answers, with the feature or with its
// absence, never with an error of its own.
func TestFeatureProbes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the probes need root (AF_XDP, /dev/net/tun, bpf)")
	}
	for name, probe := range map[string]func() error{
		"AFXDPMultiBuffer": AFXDPMultiBuffer, "VirtioNetUSO": VirtioNetUSO, "TCX": TCX,
	} {
		err := probe()
		t.Logf("%s: %v", name, err)
		if err != nil && !errors.Is(err, ErrMissingFeature) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestTopologyOnNICs: two devices of this namespace joined by a wire (a
// veth pair here, the guest's virtio-net NICs in make test-kernels) carry
// the topology, and come back under their own names, also after a
// failed build.
func TestTopologyOnNICs(t *testing.T) {
	RequireRoot(t)
	nicA, nicB := fmt.Sprintf("gsopl%d-a", os.Getpid()%100000), fmt.Sprintf("gsopl%d-b", os.Getpid()%100000)
	Must(t, netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: nicA}, PeerName: nicB}))
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(nicA); err == nil {
			netlink.LinkDel(l)
		}
	})
	t.Setenv(NICsEnv, nicA+","+nicB)
	for range 2 {
		tp := NewTopologyOnNICsT(t, "nics")
		Must(t, tp.RouteKernel())
		TCPTransfer(t, tp.A, tp.B, netip.AddrPortFrom(Srv4, 7), 1<<20, false)
		Must(t, tp.Close())
		for _, n := range []string{nicA, nicB} {
			if _, err := netlink.LinkByName(n); err != nil {
				t.Fatalf("%s not back after Close: %v", n, err)
			}
		}
	}
	if _, err := NewTopologyOnNICs("nics", nicA, "gsoplane-none"); err == nil {
		t.Fatal("a topology on a device that does not exist was built")
	}
	if _, err := netlink.LinkByName(nicA); err != nil {
		t.Fatalf("%s not back after a failed build: %v", nicA, err)
	}
}

// TestProbesMatchREADME: the README's requirements table gives each
// probed feature the release its probe names.
func TestProbesMatchREADME(t *testing.T) {
	readme, err := os.ReadFile("../../../README.md")
	Must(t, err)
	for _, p := range Probes {
		var row string
		for _, line := range strings.Split(string(readme), "\n") {
			if strings.HasPrefix(line, "| "+p.Row) {
				row = line
			}
		}
		cells := strings.Split(row, "|")
		if len(cells) < 3 {
			t.Errorf("README: no requirements row starting %q", p.Row)
		} else if !strings.Contains(cells[2], "Linux "+p.Since) {
			t.Errorf("README: %q needs %q, the probe of %s says Linux %s", p.Row, strings.TrimSpace(cells[2]), p.Name, p.Since)
		}
	}
}

// TestNamedBesideIP: on a machine where /run/netns is still a plain
// directory, a namespace made here stays deletable after `ip netns add`
// (which binds /run/netns on itself when it is not a mount point, as the
// docs' recipes do beside the tests). It runs in a private mount
// namespace of a thread of its own, where /run/netns is unmounted first.
func TestNamedBesideIP(t *testing.T) {
	RequireRoot(t)
	name := fmt.Sprintf("%sbeside-ip-%d-1", Prefix, os.Getpid())
	t.Cleanup(func() { os.Remove(runDir + "/" + name) }) // a file left if it fails
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread takes its namespaces with it
		errc <- namedBesideIP(name)
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// namedBesideIP is TestNamedBesideIP on the locked thread.
func namedBesideIP(name string) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return os.NewSyscallError("unshare CLONE_NEWNS", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_PRIVATE|unix.MS_REC, ""); err != nil {
		return os.NewSyscallError("mount / private", err)
	}
	for unix.Unmount(runDir, unix.MNT_DETACH) == nil { // a plain directory again
	}
	if err := shareRunDir(); err != nil {
		return err
	}
	h, err := netns.NewNamed(name)
	if err != nil {
		return err
	}
	h.Close()
	// What ip netns add does before its namespace: make /run/netns a
	// shared mount, binding it on itself if it is not a mount point.
	if err := unix.Mount("", runDir, "none", unix.MS_SHARED|unix.MS_REC, ""); errors.Is(err, unix.EINVAL) {
		if err := unix.Mount(runDir, runDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return os.NewSyscallError("mount --rbind", err)
		}
	}
	if err := netns.DeleteNamed(name); err != nil {
		return fmt.Errorf("delete %s after ip's bind: %w", name, err)
	}
	return nil
}
