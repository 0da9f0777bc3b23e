package main

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
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
	code := p.wait(5 * time.Second)
	took := time.Since(start)
	out := p.out.String()
	// The drain gives up after 1 s; the rest is the stop's own work,
	// with slack for a busy machine (a stop that waited for the stuck
	// queue would not end before the 5 s wait kills it).
	if code != 0 || took > 2500*time.Millisecond || !strings.Contains(out, "segments left unsent at stop") {
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
// -route-takeover it is taken over while udpfwd runs and the host's
// route is in use again after the stop; an IPv6 route of metric 1, which
// nothing outranks, is refused.
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
	stopTakeover(t, p)
	if after := hostRoutes(); after != before {
		t.Errorf("host routes not as they were after stop:\nbefore %s\nafter  %s", before, after)
	}

	// An IPv6 route of metric 1 cannot be outranked: refused, and the
	// IPv4 route taken over before it is given back.
	netlab.Must(t, a.Netlink().RouteAdd(&netlink.Route{LinkIndex: a.LinkT(t, labNIC).Attrs().Index,
		Dst: ipNet(netip.MustParsePrefix("2001:2:0:19::/64")), Gw: net.ParseIP(netlab.NICB6.String()), Priority: 1}))
	before = hostRoutes()
	p = startUdpfwd(t, a, labEnv, append([]string{"-route-takeover"}, labArgs...)...)
	if code := p.wait(15 * time.Second); code != exitFailure || !strings.Contains(p.out.String(), "which no route can outrank") {
		t.Errorf("takeover of an IPv6 route of metric 1: exit %d, want %d saying why:\n%s", code, exitFailure, p.out.String())
	}
	if after := hostRoutes(); after != before {
		t.Errorf("host routes changed by a failed start:\nbefore %s\nafter  %s", before, after)
	}
}

// routeTable lists namespace ns's main-table routes, sorted.
func routeTable(t *testing.T, ns *netlab.NS) []string {
	t.Helper()
	var out []string
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := ns.Netlink().RouteList(nil, fam)
		netlab.Must(t, err)
		for _, r := range rs {
			out = append(out, fmt.Sprintf("%v via %v dev %d metric %d proto %v", r.Dst, r.Gw, r.LinkIndex, r.Priority, r.Protocol))
		}
	}
	slices.Sort(out)
	return out
}

// TestRouteTakeoverKilled: a route taken over survives a udpfwd killed
// with SIGKILL (the host's route stays behind udpfwd's, which goes with
// the TUN device): packets to the prefix take the host's path; a restart
// takes the route over again, and its clean stop leaves the host's routes
// exactly as they were, IPv4 and IPv6, the default route included.
func TestRouteTakeoverKilled(t *testing.T) {
	requireRoot(t)
	a, b := newLab(t)
	netlab.Must(t, a.AddRoute("198.19.0.0/24", labNIC, netlab.NICB4.String()))
	netlab.Must(t, a.AddRoute("2001:2:0:19::/64", labNIC, netlab.NICB6.String()))
	netlab.Must(t, a.AddRoute("0.0.0.0/0", labNIC, netlab.NICB4.String()))
	const elsewhere = "192.0.2.1" // through the default route
	before := strings.Join(routeTable(t, a), "; ")
	takeOver := func() *proc {
		t.Helper()
		p := startUdpfwd(t, a, labEnv, append([]string{"-route-takeover", "-route", "0.0.0.0/0"}, labArgs...)...)
		waitReady(t, p, a)
		for _, dst := range []string{srv4, srv6, elsewhere} {
			if dev := routeDev(t, a, dst); dev != labTUN {
				t.Errorf("-route-takeover: %s goes through %s, want %s", dst, dev, labTUN)
			}
		}
		return p
	}

	p := takeOver()
	p.cmd.Process.Kill()
	p.wait(5 * time.Second)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := a.Link(labTUN); err != nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("%s still there 5s after SIGKILL", labTUN)
		}
	}
	if after := strings.Join(routeTable(t, a), "; "); after != before {
		t.Errorf("host routes after SIGKILL:\nbefore %s\nafter  %s", before, after)
	}
	if dev := routeDev(t, a, elsewhere); dev != labNIC {
		t.Errorf("after SIGKILL %s goes through %q, want the host's default route through %s", elsewhere, dev, labNIC)
	}
	for _, dst := range []string{srv4, srv6} {
		if dev := routeDev(t, a, dst); dev != labNIC {
			t.Errorf("after SIGKILL %s goes through %q, want the host's route through %s", dst, dev, labNIC)
		}
		udpReaches(t, a, b, dst)
	}

	p = takeOver()
	stopTakeover(t, p)
	if after := strings.Join(routeTable(t, a), "; "); after != before {
		t.Errorf("host routes after the restart's stop:\nbefore %s\nafter  %s", before, after)
	}
}

// TestRouteTakeoverPersistentTUN: on a persistent TUN device a killed
// udpfwd leaves its route in front of the host's; a restart takes it as
// its own and its clean stop deletes it, leaving the host's routes to the
// prefixes exactly as they were.
func TestRouteTakeoverPersistentTUN(t *testing.T) {
	requireRoot(t)
	a, _ := newLab(t)
	dev := &netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: labTUN}, Mode: netlink.TUNTAP_MODE_TUN,
		Flags: netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR}
	netlab.Must(t, a.Run(func() error { return netlink.LinkAdd(dev) }))
	netlab.Must(t, a.AddRoute("198.19.0.0/24", labNIC, netlab.NICB4.String()))
	netlab.Must(t, a.AddRoute("2001:2:0:19::/64", labNIC, netlab.NICB6.String()))
	routed := func() string {
		var out []string
		for _, r := range routeTable(t, a) {
			if strings.HasPrefix(r, "198.19.0.0/24 ") || strings.HasPrefix(r, "2001:2:0:19::/64 ") {
				out = append(out, r)
			}
		}
		return strings.Join(out, "; ")
	}
	before := routed()
	args := append([]string{"-route-takeover"}, labArgs...)
	p := startUdpfwd(t, a, labEnv, args...)
	waitReady(t, p, a)
	p.cmd.Process.Kill()
	p.wait(5 * time.Second)
	if dev := routeDev(t, a, srv4); dev != labTUN {
		t.Errorf("after SIGKILL %s goes through %s, want the route left through the persistent %s", srv4, dev, labTUN)
	}
	p = startUdpfwd(t, a, labEnv, args...)
	waitReady(t, p, a)
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(5 * time.Second); code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.out.String())
	}
	if after := routed(); after != before {
		t.Errorf("routes to the prefixes after the restart's stop:\nbefore %s\nafter  %s", before, after)
	}
}

// routeDev returns the name of the device namespace ns routes dst
// through.
func routeDev(t *testing.T, ns *netlab.NS, dst string) string {
	t.Helper()
	rs, err := ns.Netlink().RouteGet(net.ParseIP(dst))
	netlab.Must(t, err)
	l, err := ns.Netlink().LinkByIndex(rs[0].LinkIndex)
	netlab.Must(t, err)
	return l.Attrs().Name
}

// udpReaches sends a datagram from namespace from to dst, where
// namespace to must receive it.
func udpReaches(t *testing.T, from, to *netlab.NS, dst string) {
	t.Helper()
	addr := net.JoinHostPort(dst, "9999")
	var pc net.PacketConn
	to.Do(t, func() {
		var err error
		pc, err = net.ListenPacket("udp", addr)
		netlab.Must(t, err)
	})
	defer pc.Close()
	c, err := dial(from, "udp", addr)
	netlab.Must(t, err)
	defer c.Close()
	buf := make([]byte, 16)
	for range 50 { // until one arrives: the first may wait for neighbour discovery
		c.Write([]byte("host path"))
		pc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if n, _, err := pc.ReadFrom(buf); err == nil && string(buf[:n]) == "host path" {
			return
		}
	}
	t.Errorf("a datagram to %s did not arrive through the host's route", addr)
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

// TestKilledThenRestarted: udpfwd killed with SIGKILL leaves nothing on
// the NIC through AF_XDP or AF_PACKET with tcx (the programs hang on BPF
// links, the TUN device on its file descriptors); through a cls_bpf
// filter it leaves the filter and its clsact qdisc, which the next start
// deletes (with a warning that says so) before it adds its own, so that
// its stop leaves nothing either; also in the documented non-root
// deployment (file capabilities, user nobody), with a route taken over.
func TestKilledThenRestarted(t *testing.T) {
	requireRoot(t)
	for _, c := range []struct {
		name       string
		args       []string
		left       string // what the kill leaves on the NIC
		privileged bool
	}{
		{"xdp", []string{"-port", "xdp"}, "", true},
		{"packet-tcx", []string{"-port", "packet", "-packet-filter", "tcx"}, "", true},
		{"packet-clsact", []string{"-port", "packet", "-packet-filter", "clsact"}, "clsact qdisc on " + labNIC, true},
		{"packet-clsact-unprivileged", []string{"-port", "packet", "-packet-filter", "clsact", "-route-takeover"}, "clsact qdisc on " + labNIC, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "packet-tcx" {
				netlab.SkipWithout(t, netlab.TCX)
			}
			a, _ := newLab(t)
			args := append(slices.Clone(c.args), labArgs...)
			start := func() *proc { return startUdpfwd(t, a, labEnv, args...) }
			if !c.privileged {
				netlab.Must(t, a.AddRoute("198.19.0.0/24", labNIC, netlab.NICB4.String()))
				bin := capBinary(t, udpfwdBinary(t))
				start = func() *proc { return startCmd(t, a, nobodyCmd(t, bin, args...), labEnv) }
			}
			before := strings.Join(routeTable(t, a), "; ")
			p := start()
			waitReady(t, p, a)
			p.cmd.Process.Kill()
			p.wait(5 * time.Second)
			var left string
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				if left = leftovers(t, a); !strings.Contains(left, "TUN device") || time.Now().After(deadline) {
					break
				}
			}
			if !strings.HasPrefix(left, c.left) || c.left == "" && left != "" {
				t.Fatalf("after SIGKILL: left %q, want %q", left, c.left)
			}
			p = start()
			waitReady(t, p, a)
			p.cmd.Process.Signal(syscall.SIGTERM)
			if code := p.wait(5 * time.Second); code != 0 {
				t.Fatalf("restart: exit %d:\n%s", code, p.out.String())
			}
			if warned := strings.Contains(p.out.String(), "a killed gateway left on the NIC"); warned != (c.left != "") {
				t.Errorf("restart warned of a leftover filter: %v, want %v:\n%s", warned, c.left != "", p.out.String())
			}
			if left := leftovers(t, a); left != "" {
				t.Errorf("after the restart's stop: left %s", left)
			}
			if after := strings.Join(routeTable(t, a), "; "); after != before {
				t.Errorf("routes after the restart's stop:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// TestSecondOnSameTUN: a second udpfwd with the same -tun is refused
// (exit 1, saying the device is in use), with one queue or two, and
// takes no queue of the running gateway's TUN device.
func TestSecondOnSameTUN(t *testing.T) {
	requireRoot(t)
	for _, queues := range []string{"2", "1"} {
		t.Run("queues="+queues, func(t *testing.T) {
			a, _ := newLab(t)
			args := append([]string{"-queues", queues, "-port", "packet"}, labArgs...)
			first := startUdpfwd(t, a, labEnv, args...)
			waitReady(t, first, a)
			code, out := runUdpfwd(t, a, nil, append([]string{"-metrics="}, args...)...)
			if code != exitFailure || !strings.Contains(out, "another program has") {
				t.Errorf("second udpfwd on %s: exit %d, want %d saying the device is in use:\n%s", labTUN, code, exitFailure, out)
			}
			if tt, ok := a.LinkT(t, labTUN).(*netlink.Tuntap); queues == "2" && (!ok || tt.Queues != 2) {
				t.Errorf("queues of %s after the second start: %+v, want the first gateway's 2", labTUN, tt)
			}
			first.cmd.Process.Signal(syscall.SIGTERM)
			if code := first.wait(5 * time.Second); code != 0 {
				t.Fatalf("first udpfwd: exit %d:\n%s", code, first.out.String())
			}
		})
	}
}

// stopTakeover stops a udpfwd run with -route-takeover with SIGTERM and
// checks that it exits 0 having logged the takeover and the give-back.
func stopTakeover(t *testing.T, p *proc) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(5 * time.Second); code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.out.String())
	}
	for _, want := range []string{"route taken over", "route put back"} {
		if !strings.Contains(p.out.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, p.out.String())
		}
	}
}
