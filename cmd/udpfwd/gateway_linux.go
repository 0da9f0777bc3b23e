package main

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/dataplane"
	"github.com/gsoplane/gsoplane/dataplane/afpacket"
	"github.com/gsoplane/gsoplane/dataplane/xsk"
)

// gateway is the running dataplane plus what udpfwd configured around
// it: the TUN device's addresses and routes, removed again at exit.
type gateway struct {
	*dataplane.Gateway
	undo []func() error // in reverse order of set-up
	nic  int            // the NIC's ifindex
	mtu  int            // the TUN device's MTU
	log  *slog.Logger
}

// openGateway opens the dataplane and configures the TUN device: up, with
// -addr addresses and -route routes.
func openGateway(cfg *config, log *slog.Logger) (*gateway, error) {
	dc := gatewayConfig(cfg)
	dc.Log = log
	dg, err := dataplane.OpenGateway(dc)
	if err != nil {
		return nil, err
	}
	g := &gateway{Gateway: dg, nic: dg.Ifindex(), log: log}
	if cfg.Ingress != "" {
		return g, nil
	}
	if err := g.configureTUN(cfg); err != nil {
		return nil, errors.Join(err, g.close())
	}
	return g, nil
}

// gatewayConfig translates the flags into the dataplane's configuration.
func gatewayConfig(cfg *config) dataplane.GatewayConfig {
	modes := map[string]xsk.Mode{"auto": xsk.ModeAuto, "native": xsk.ModeNative, "generic": xsk.ModeGeneric}
	zeroCopy := map[string]dataplane.XDPZeroCopy{"auto": dataplane.XDPZeroCopyAuto, "on": dataplane.XDPZeroCopyOn, "off": dataplane.XDPZeroCopyOff}
	ports := map[string]dataplane.PortKind{"auto": dataplane.PortAuto, "xdp": dataplane.PortXDP, "packet": dataplane.PortPacket}
	gso := map[string]afpacket.GSOMode{"auto": afpacket.GSOModeAuto, "offload": afpacket.GSOModeOffload, "partial": afpacket.GSOModePartial, "full": afpacket.GSOModeFull}
	filters := map[string]afpacket.HostFilter{"auto": afpacket.HostFilterAuto, "tcx": afpacket.HostFilterTCX, "clsact": afpacket.HostFilterClsact}
	return dataplane.GatewayConfig{
		TUN:                 dataplane.TUNOptions{Name: cfg.TUN, Queues: cfg.Queues, MTU: cfg.MTU, DisableOffload: !cfg.GSO},
		NIC:                 cfg.NIC,
		Routes:              cfg.redirects(),
		Ingress:             dataplane.IngressOptions{Device: cfg.Ingress, Routes: cfg.IngressRedirect},
		NextHop:             cfg.NextHop.addr,
		Port:                ports[cfg.Port.value],
		XDP:                 dataplane.XDPOptions{Mode: modes[cfg.XDPMode.value], ZeroCopy: zeroCopy[cfg.ZeroCopy.value], BusyPoll: cfg.BusyPoll},
		Packet:              dataplane.PacketOptions{GSO: gso[cfg.PacketGSO.value], HostFilter: filters[cfg.PacketFilter.value]},
		RouterAddrs:         routerAddrs(cfg.Addrs),
		DisableBackpressure: !cfg.Backpressure,
		Budget:              int(cfg.Budget.bytes),
		QueueLen:            cfg.TxQueueLen,
		DrainTimeout:        sendTime(cfg.DrainTimeout),
		DisableGRO:          !cfg.GRO,
		OnDetach:            map[string]dataplane.DetachPolicy{"reattach": dataplane.DetachReattach, "stop": dataplane.DetachStop}[cfg.Detached.value],
	}
}

// routerAddrs returns, for the first -addr of each IP version, the
// gateway's own address on the TUN's link: the first host address of the
// prefix that is not the TUN's (198.18.0.2 for 198.18.0.1/24, 2001:2::1
// for 2001:2::2/64), the source of the ICMP errors the gateway writes
// into the TUN. A /31, /32, /127 or /128 has none to spare.
func routerAddrs(addrs prefixList) []netip.Addr {
	var out []netip.Addr
	seen := map[bool]bool{}
	for _, p := range addrs {
		v4 := p.Addr().Is4()
		if seen[v4] || p.Bits() >= p.Addr().BitLen()-1 {
			continue
		}
		seen[v4] = true
		a := p.Masked().Addr().Next() // the network address is not a host's
		if a == p.Addr() {
			a = a.Next()
		}
		out = append(out, a)
	}
	return out
}

// portMode describes how the port runs: the XDP program's mode and
// zero-copy, or the AF_PACKET sink's GSO mode and how its ingress
// program is attached.
func (g *gateway) portMode(cfg *config) string {
	if x := g.XDP(); x != nil {
		return fmt.Sprintf("xdp %v, zero-copy %v, busy-poll %v", x.Mode(), x.ZeroCopy(), cfg.BusyPoll)
	}
	mode := "gso " + cfg.PacketGSO.value
	if p := g.Packet(); p != nil {
		filter, _ := p.HostFilter()
		mode += ", host filter " + filter.String()
	}
	return mode
}

// sendTime is the part of -drain-timeout the forwarders spend sending
// what is queued at a stop; the rest is for the clean-up.
func sendTime(drain time.Duration) time.Duration { return drain * 4 / 5 }

// configureTUN brings the TUN device up and adds the addresses and
// routes, recording how to remove each.
func (g *gateway) configureTUN(cfg *config) error {
	link, err := netlink.LinkByIndex(g.TUN().Index())
	if err == nil {
		err = netlink.LinkSetUp(link)
	}
	if err != nil {
		return fmt.Errorf("bring up TUN %s: %w", g.TUN().Name(), err)
	}
	g.mtu = link.Attrs().MTU
	for _, a := range cfg.Addrs {
		if err := g.addAddr(link, a); err != nil {
			return err
		}
	}
	for _, r := range cfg.Routes {
		if err := g.addRoute(link, r, cfg.RouteTakeover); err != nil {
			return err
		}
	}
	return nil
}

// addAddr adds an address; one that is already there is left alone.
func (g *gateway) addAddr(link netlink.Link, p netip.Prefix) error {
	addr := &netlink.Addr{IPNet: ipNet(p)}
	err := netlink.AddrAdd(link, addr)
	switch {
	case errors.Is(err, unix.EEXIST):
		return nil
	case err != nil:
		return fmt.Errorf("-addr %v on %s: %w", p, link.Attrs().Name, err)
	}
	g.undo = append(g.undo, func() error { return netlink.AddrDel(link, addr) })
	return nil
}

// addRoute routes prefix p into the TUN device. Set-up is idempotent: a
// route left by an earlier run is replaced, not refused; udpfwd removes
// at exit only a route that was not there before it. A prefix the host
// routes elsewhere (the same prefix, another device or gateway) is
// refused, or with takeover outranked (see takeOver).
func (g *gateway) addRoute(link netlink.Link, p netip.Prefix, takeover bool) error {
	route := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: ipNet(p), Scope: netlink.SCOPE_LINK}
	existing, err := routesTo(p)
	if err != nil {
		return fmt.Errorf("-route %v: list the host's routes: %w", p, err)
	}
	ours, others := splitRoutes(existing, route.LinkIndex)
	switch {
	case len(others) > 0 && !takeover:
		return fmt.Errorf("-route %v: the host routes it already (%s); route a narrower prefix, or pass -route-takeover to route it into the TUN in front of the host's route while udpfwd runs (the host's route stays)", p, others[0])
	case len(others) > 0:
		return g.takeOver(route, p, others)
	}
	if err := netlink.RouteReplace(route); err != nil {
		return fmt.Errorf("-route %v dev %s: %w", p, link.Attrs().Name, err)
	}
	if len(ours) == 0 {
		g.undo = append(g.undo, func() error { return netlink.RouteDel(route) })
	}
	return nil
}

// takeOver routes p into the TUN device in front of the host's routes to
// it, which stay as they are: an IPv4 route at the lowest of their
// metrics, ahead of theirs (as `ip route prepend`), an IPv6 route at a
// metric one lower (the kernel puts one of the same metric behind). So
// the host keeps its routes whatever becomes of udpfwd: its route goes
// with a TUN device it created if it is killed, and a clean stop deletes
// it (one left by an earlier run too).
func (g *gateway) takeOver(route *netlink.Route, p netip.Prefix, others []netlink.Route) error {
	host := slices.MinFunc(others, func(a, b netlink.Route) int { return cmp.Compare(a.Priority, b.Priority) })
	route.Priority = host.Priority
	add := netlink.RouteAddEcmp // NLM_F_CREATE alone: in front of the routes of its metric
	if p.Addr().Is6() {
		if host.Priority <= 1 {
			return fmt.Errorf("-route %v: the host's route (%s) has metric %d, which no route can outrank: give it a higher metric to take it over", p, host, host.Priority)
		}
		route.Priority--
		add = netlink.RouteReplace
	}
	if err := add(route); err != nil && !errors.Is(err, unix.EEXIST) { // EEXIST: left by an earlier run
		return fmt.Errorf("-route %v dev %s metric %d: %w", p, g.TUN().Name(), route.Priority, err)
	}
	g.log.Warn("route taken over (-route-takeover): the host's route stays, behind udpfwd's until it stops", "route", p.String(), "metric", route.Priority, "host_route", host.String())
	g.undo = append(g.undo, func() error {
		g.log.Info("route put back: the host's route is in use again", "route", p.String(), "host_route", host.String())
		return netlink.RouteDel(route)
	})
	return nil
}

// routesTo lists the main table's routes to exactly p.
func routesTo(p netip.Prefix) ([]netlink.Route, error) {
	family := netlink.FAMILY_V4
	if p.Addr().Is6() {
		family = netlink.FAMILY_V6
	}
	all, err := netlink.RouteListFiltered(family, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, err
	}
	want := ipNet(p).String()
	var out []netlink.Route
	for _, r := range all {
		if routeDst(r, p.Addr().Is6()) == want {
			out = append(out, r)
		}
	}
	return out, nil
}

// routeDst is r's destination as ipNet writes it; a default route may
// come without one.
func routeDst(r netlink.Route, v6 bool) string {
	switch {
	case r.Dst != nil:
		return r.Dst.String()
	case v6:
		return "::/0"
	}
	return "0.0.0.0/0"
}

// splitRoutes separates the routes through device ifindex (alone) from
// the others (another device, a gateway, or several next hops).
func splitRoutes(routes []netlink.Route, ifindex int) (ours, others []netlink.Route) {
	for _, r := range routes {
		if r.LinkIndex == ifindex && r.Gw == nil && len(r.MultiPath) == 0 {
			ours = append(ours, r)
		} else {
			others = append(others, r)
		}
	}
	return ours, others
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// close removes the routes and addresses udpfwd added (they outlive an
// attached TUN device), then closes the dataplane: the XDP program is
// detached and a TUN device udpfwd created disappears.
func (g *gateway) close() error {
	var errs []error
	for i := len(g.undo) - 1; i >= 0; i-- {
		if err := g.undo[i](); err != nil && !gone(err) {
			errs = append(errs, fmt.Errorf("undo TUN set-up: %w", err))
		}
	}
	g.undo = nil
	return errors.Join(append(errs, g.Close())...)
}

// gone reports whether a removal failed because the device, address or
// route is gone already (a TUN device we created disappears when the
// dataplane stops).
func gone(err error) bool {
	return errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ESRCH) || errors.Is(err, unix.EADDRNOTAVAIL)
}
