package netlab

import (
	"errors"
	"net/netip"
)

// The reference topology (DESIGN.md):
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
const (
	NICA = "gw-a" // the gateway's NIC, in A
	NICB = "gw-b" // its peer, in B
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

	// AppRoutes are the prefixes behind the TUN: what the gateway takes
	// from the NIC.
	AppRoutes = []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24"), netip.MustParsePrefix("2001:2:0:1::/64")}
	// SrvRoutes are the server's prefixes, routed from A into the TUN.
	SrvRoutes = []netip.Prefix{netip.MustParsePrefix("198.19.0.0/24"), netip.MustParsePrefix("2001:2:0:19::/64")}
)

// Topology is one instance of the reference topology, without a gateway.
type Topology struct {
	A, B *NS
}

// NewTopology builds the namespaces, the veth pair and B's side; the
// caller adds a gateway and calls TUNUp, or calls RouteKernel.
func NewTopology(tag string) (tp *Topology, err error) {
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
	if err = AddVeth(tp.A, NICA, tp.B, NICB, 2); err != nil {
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
		func() error { return b.AddRoute(AppRoutes[0].String(), NICB, NICA4.String()) },
		func() error { return b.AddRoute(AppRoutes[1].String(), NICB, NICA6.String()) },
		func() error { return b.SetFeatures(NICB, map[string]bool{"tx": false, "gro": true}) },
	} {
		if err = step(); err != nil {
			return tp, err
		}
	}
	return tp, nil
}

// Close deletes both namespaces and everything in them.
func (tp *Topology) Close() error {
	var errs []error
	for _, ns := range []*NS{tp.A, tp.B} {
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

// RouteKernel routes the server's prefixes from A straight out of gw-a:
// the kernel forwards between the namespaces, no userspace involved.
func (tp *Topology) RouteKernel() error {
	return errors.Join(
		tp.A.AddRoute(SrvRoutes[0].String(), NICA, NICB4.String()),
		tp.A.AddRoute(SrvRoutes[1].String(), NICA, NICB6.String()))
}
