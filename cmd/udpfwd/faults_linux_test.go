package main

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/gsoplane/gsoplane/internal/netlab"
)

// TestRestartOnExistingTUN: a persistent TUN device left with udpfwd's
// IPv4 address and route by an earlier run (killed) does not stop the
// next start; at exit udpfwd removes only what it added itself (the IPv6
// address and route).
func TestRestartOnExistingTUN(t *testing.T) {
	requireRoot(t)
	a, _ := newLab(t)
	dev := &netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: labTUN}, Mode: netlink.TUNTAP_MODE_TUN,
		Flags: netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR}
	// A persistent device, made where the TUN driver sees it: in A.
	netlab.Must(t, a.Run(func() error { return netlink.LinkAdd(dev) }))
	netlab.Must(t, a.LinkUp(labTUN))
	netlab.Must(t, a.AddAddr(labTUN, "198.18.0.1/24")) // left by the earlier run
	netlab.Must(t, a.AddRoute("198.19.0.0/24", labTUN, ""))
	p := startUdpfwd(t, a, labEnv, labArgs...)
	waitReady(t, p, a)
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(5 * time.Second); code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.out.String())
	}
	routes := routesVia(t, a, labTUN)
	if !routes["198.19.0.0/24"] || routes["2001:2:0:19::/64"] {
		t.Errorf("routes through %s after exit: %v; want the earlier one kept, udpfwd's own removed", labTUN, routes)
	}
}

// routesVia lists the destinations routed through the link called name.
func routesVia(t *testing.T, ns *netlab.NS, name string) map[string]bool {
	t.Helper()
	link := ns.LinkT(t, name)
	out := map[string]bool{}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := ns.Netlink().RouteList(link, fam)
		netlab.Must(t, err)
		for _, r := range rs {
			if r.Dst != nil && !r.Dst.IP.IsLinkLocalUnicast() && !r.Dst.IP.IsMulticast() {
				out[r.Dst.String()] = true
			}
		}
	}
	return out
}

// TestStopStuckQueue: with the NIC down, the queue cannot empty; a stop
// still completes within -drain-timeout, exits 0 and says how many
// segments it discarded.
func TestStopStuckQueue(t *testing.T) {
	requireRoot(t)
	a, _ := newLab(t)
	args := append([]string{"-drain-timeout", "1s"}, labArgs...)
	p := startUdpfwd(t, a, labEnv, args...)
	waitReady(t, p, a)
	netlab.Must(t, a.Netlink().LinkSetDown(a.LinkT(t, labNIC)))
	c, err := dial(a, "udp", net.JoinHostPort(srv4, "9"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 200 { // queued, never sent: the NIC is down
		c.Write(make([]byte, 1000))
	}
	waitQueued(t, a)
	start := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	code := p.wait(3 * time.Second)
	took := time.Since(start)
	out := p.out.String()
	if code != 0 || took > 1500*time.Millisecond || !strings.Contains(out, "segments left unsent at stop") {
		t.Fatalf("exit %d after %v (want 0 within the 1s drain timeout, and the discarded segments logged):\n%s", code, took, out)
	}
	t.Logf("stopped in %v with the NIC down", took.Round(time.Millisecond))
}

// waitQueued waits until udpfwd's transmit queue holds segments it
// cannot send, so that the stop finds them there.
func waitQueued(t *testing.T, ns *netlab.NS) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m, err := scrape(ns, "127.0.0.1:9464"); err == nil && sumMetric(m, "udpfwd_queue_depth_segments") > 0 {
			return
		}
	}
	t.Fatal("no segments queued with the NIC down")
}

// TestRouteTakeover: a -route prefix the host already routes elsewhere is
// refused (the host's route untouched, the default route included); with
// -route-takeover it is taken over while udpfwd runs and put back at stop.
func TestRouteTakeover(t *testing.T) {
	requireRoot(t)
	a, _ := newLab(t)
	gw := netlab.NICB4.String()
	netlab.Must(t, a.AddRoute("198.19.0.0/24", labNIC, gw))
	netlab.Must(t, a.AddRoute("0.0.0.0/0", labNIC, gw))
	hostRoutes := func() string { return strings.Join(routeTable(t, a), "; ") }
	before := hostRoutes()

	for _, args := range [][]string{labArgs, append([]string{"-route", "0.0.0.0/0"}, labArgs...)} {
		p := startUdpfwd(t, a, labEnv, args...)
		if code := p.wait(15 * time.Second); code != exitFailure {
			t.Fatalf("%v: exit %d, want %d:\n%s", args, code, exitFailure, p.out.String())
		}
		if out := p.out.String(); !strings.Contains(out, "the host routes it already") || !strings.Contains(out, "-route-takeover") {
			t.Errorf("refusal does not say why:\n%s", out)
		}
		if after := hostRoutes(); after != before {
			t.Errorf("host routes changed by a refused start:\nbefore %s\nafter  %s", before, after)
		}
	}

	p := startUdpfwd(t, a, labEnv, append([]string{"-route-takeover"}, labArgs...)...)
	waitReady(t, p, a)
	if !routesVia(t, a, labTUN)["198.19.0.0/24"] {
		t.Errorf("198.19.0.0/24 not routed into %s with -route-takeover", labTUN)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(5 * time.Second); code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.out.String())
	}
	for _, want := range []string{"route taken over", "route put back"} {
		if !strings.Contains(p.out.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, p.out.String())
		}
	}
	if after := hostRoutes(); after != before {
		t.Errorf("host routes not as they were after stop:\nbefore %s\nafter  %s", before, after)
	}
}

// routeTable lists namespace ns's main-table IPv4 routes, sorted.
func routeTable(t *testing.T, ns *netlab.NS) []string {
	t.Helper()
	rs, err := ns.Netlink().RouteList(nil, netlink.FAMILY_V4)
	netlab.Must(t, err)
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%v via %v dev %d", r.Dst, r.Gw, r.LinkIndex))
	}
	slices.Sort(out)
	return out
}

// TestTUNDeleted: the TUN device deleted from outside stops udpfwd with
// exit 1 and one line that names the fault, and nothing left behind.
func TestTUNDeleted(t *testing.T) {
	requireRoot(t)
	a, _ := newLab(t)
	p := startUdpfwd(t, a, labEnv, labArgs...)
	waitReady(t, p, a)
	netlab.Must(t, a.Netlink().LinkDel(a.LinkT(t, labTUN)))
	if code := p.wait(10 * time.Second); code != exitFailure {
		t.Fatalf("exit %d, want %d:\n%s", code, exitFailure, p.out.String())
	}
	if out := p.out.String(); !strings.Contains(out, "the TUN device was deleted from outside") || strings.Contains(out, "udpfwd failed") {
		t.Errorf("log does not name the fault in one line:\n%s", out)
	}
	if left := leftovers(t, a); left != "" {
		t.Errorf("left behind: %s", left)
	}
}
