package netlab

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// The reference topology (docs/design.md):
//
//	netns A ("app" side)                           netns B ("server" side)
//	 application, gateway; App4/App6 on the TUN      server; Srv4/Srv6 on gw-b
//	 SrvRoutes -> TUN                                AppRoutes via NICA4/NICA6
//	 TUN <-- gateway --> gw-a NICA4 ====veth==== gw-b NICB4
//
// The veth pair has two queues on each end. gw-b checksums in software
// (tx off): a veth hands its peer partial checksums in memory, and AF_XDP
// sees only the bytes. gw-b coalesces what it receives (gro on), as a
// host behind a real NIC does; a veth does not by default. Traffic only
// ever goes to 198.18.0.0/15 and 2001:2::/48.
//
// AddIngress puts the application in a third namespace instead, C, behind
// a veth into A (for a gateway that forwards from a network device):
//
//	netns C: App4/App6 on app0 ====veth==== gw-c in A (Router4/Router6)
//	SrvRoutes via Router4/Router6
const (
	NICA    = "gw-a" // the gateway's NIC, in A
	NICB    = "gw-b" // its peer, in B
	Ingress = "gw-c" // the gateway's ingress device, in A (AddIngress)
	AppIf   = "app0" // its peer, in C
)

// Addresses of the reference topology.
var (
	App4  = netip.MustParseAddr("198.18.0.1")      // the application, on the TUN in A
	App6  = netip.MustParseAddr("2001:2:0:1::1")   //
	Srv4  = netip.MustParseAddr("198.19.0.2")      // the server, on gw-b in B
	Srv6  = netip.MustParseAddr("2001:2:0:19::2")  //
	NICA4 = netip.MustParseAddr("198.18.100.1")    // gw-a
	NICA6 = netip.MustParseAddr("2001:2:0:100::1") //
	NICB4 = netip.MustParseAddr("198.18.100.2")    // gw-b
	NICB6 = netip.MustParseAddr("2001:2:0:100::2") //

	Router4 = netip.MustParseAddr("198.18.0.2")    // gw-c, or the gateway's address on the TUN's link
	Router6 = netip.MustParseAddr("2001:2:0:1::2") //

	// AppRoutes are the prefixes behind the TUN: what the gateway takes
	// from the NIC.
	AppRoutes = []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24"), netip.MustParsePrefix("2001:2:0:1::/64")}
	// SrvRoutes are the server's prefixes, routed from A into the TUN.
	SrvRoutes = []netip.Prefix{netip.MustParsePrefix("198.19.0.0/24"), netip.MustParsePrefix("2001:2:0:19::/64")}
)

// Topology is one instance of the reference topology, without a gateway.
type Topology struct {
	A, B *NS
	C    *NS // the application's namespace, after AddIngress

	release func() error // gives back what the topology borrowed, before the namespaces go
}

// NewTopology builds the namespaces, the veth pair and B's side; the
// caller adds a gateway and calls TUNUp, or calls RouteKernel.
func NewTopology(tag string) (*Topology, error) { return NewTopologyQueues(tag, 2) }

// NewTopologyQueues is NewTopology with a veth pair of the given number
// of queues.
func NewTopologyQueues(tag string, queues int) (*Topology, error) {
	return newTopology(tag, func(tp *Topology) error { return AddVeth(tp.A, NICA, tp.B, NICB, queues) })
}

// newTopology builds the topology with wire, which joins NICA in A to
// NICB in B.
func newTopology(tag string, wire func(tp *Topology) error) (tp *Topology, err error) {
	tp = &Topology{}
	defer func() {
		if err != nil {
			err = errors.Join(err, tp.Close())
		}
	}()
	if tp.A, err = New(tag + "-a"); err != nil {
		return tp, err
	}
	if tp.B, err = New(tag + "-b"); err != nil {
		return tp, err
	}
	if err = wire(tp); err != nil {
		return tp, err
	}
	a, b := tp.A, tp.B
	for _, step := range []func() error{
		func() error { return a.AddAddr(NICA, NICA4.String()+"/24") },
		func() error { return a.AddAddr(NICA, NICA6.String()+"/64") },
		func() error { return b.AddAddr(NICB, NICB4.String()+"/24") },
		func() error { return b.AddAddr(NICB, NICB6.String()+"/64") },
		// The server addresses live on gw-b, so that A resolves them on
		// link through gw-a.
		func() error { return b.AddAddr(NICB, Srv4.String()+"/24") },
		func() error { return b.AddAddr(NICB, Srv6.String()+"/64") },
		// B reaches the application from the server's addresses, which
		// A (or C) routes back, not from gw-b's.
		func() error { return routeFrom(b, AppRoutes[0], NICB, NICA4, Srv4) },
		func() error { return routeFrom(b, AppRoutes[1], NICB, NICA6, Srv6) },
		func() error { return b.SetFeatures(NICB, map[string]bool{"tx": false, "gro": true}) },
	} {
		if err = step(); err != nil {
			return tp, err
		}
	}
	return tp, nil
}

// Close deletes both namespaces and everything in them (real NICs go back
// first).
func (tp *Topology) Close() error {
	var errs []error
	if tp.release != nil {
		errs = append(errs, tp.release())
		tp.release = nil
	}
	for _, ns := range []*NS{tp.A, tp.B, tp.C} {
		if ns != nil {
			errs = append(errs, ns.Close())
		}
	}
	return errors.Join(errs...)
}

// TUNUp brings the TUN device called name in A up with the application's
// addresses and routes the server's prefixes into it.
func (tp *Topology) TUNUp(name string) error {
	a := tp.A
	for _, step := range []func() error{
		func() error { return a.LinkUp(name) },
		func() error { return a.AddAddr(name, App4.String()+"/24") },
		func() error { return a.AddAddr(name, App6.String()+"/64") },
		func() error { return a.AddRoute(SrvRoutes[0].String(), name, "") },
		func() error { return a.AddRoute(SrvRoutes[1].String(), name, "") },
	} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// AddIngress makes namespace C with the application's addresses on app0,
// joined to gw-c in A by a veth pair of the given MTU and queues (the
// veth's defaults: TSO and checksum offload on, so C hands A 64 KiB GSO
// packets where A can take them); C routes the server's prefixes through
// gw-c's addresses, Router4 and Router6.
func (tp *Topology) AddIngress(mtu, queues int) (err error) {
	if tp.C, err = New("c"); err != nil {
		return err
	}
	a, c := tp.A, tp.C
	for _, step := range []func() error{
		func() error { return AddVeth(a, Ingress, c, AppIf, queues) },
		func() error { return setMTU(a, Ingress, mtu) },
		func() error { return setMTU(c, AppIf, mtu) },
		func() error { return a.AddAddr(Ingress, Router4.String()+"/24") },
		func() error { return a.AddAddr(Ingress, Router6.String()+"/64") },
		func() error { return c.AddAddr(AppIf, App4.String()+"/24") },
		func() error { return c.AddAddr(AppIf, App6.String()+"/64") },
		func() error { return c.AddRoute(SrvRoutes[0].String(), AppIf, Router4.String()) },
		func() error { return c.AddRoute(SrvRoutes[1].String(), AppIf, Router6.String()) },
	} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// routeFrom routes dst out of the link called name through gw, with src
// as the source address of what ns sends there.
func routeFrom(ns *NS, dst netip.Prefix, name string, gw, src netip.Addr) error {
	l, err := ns.Link(name)
	if err != nil {
		return err
	}
	r := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: prefixNet(dst), Gw: gw.AsSlice(), Src: src.AsSlice()}
	if err := ns.nl.RouteAdd(r); err != nil {
		return fmt.Errorf("route %v via %v src %v: %w", dst, gw, src, err)
	}
	return nil
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// setMTU sets the MTU of the link called name in ns.
func setMTU(ns *NS, name string, mtu int) error {
	l, err := ns.Link(name)
	if err == nil {
		err = ns.nl.LinkSetMTU(l, mtu)
	}
	return err
}

// RouteKernel routes the server's prefixes from A straight out of gw-a:
// the kernel forwards between the namespaces, no userspace involved.
func (tp *Topology) RouteKernel() error {
	return errors.Join(
		tp.A.AddRoute(SrvRoutes[0].String(), NICA, NICB4.String()),
		tp.A.AddRoute(SrvRoutes[1].String(), NICA, NICB6.String()))
}
