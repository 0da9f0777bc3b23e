package dataplane

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/segment"
)

// openIngress opens the ingress device's port and wires both directions
// through forwarders that read packets from a wire (pipeline.WireSource):
// ingress queue i to NIC queue i, and NIC queue i back to ingress queue
// i, each packet cut to its egress MTU. One MSS table serves both
// directions: each side's SYNs bound the other's segments. The ICMP
// errors go through the host's stack, which routes them to their
// destination on either side.
func (g *Gateway) openIngress(cfg GatewayConfig, log *slog.Logger) error {
	if len(cfg.Ingress.Routes) == 0 {
		return fmt.Errorf("dataplane: %w: an ingress device needs Ingress.Routes", ErrInvalidConfig)
	}
	icfg := cfg // NextHop is the NIC side's: behind the ingress, destinations are on link or routed
	icfg.NIC, icfg.Routes, icfg.NextHop = cfg.Ingress.Device, cfg.Ingress.Routes, netip.Addr{}
	in, err := openNIC(icfg, log)
	if err != nil {
		return err
	}
	g.ingress = in
	inMTU, routers, err := linkOf(cfg.Ingress.Device)
	if err != nil {
		return err
	}
	if len(cfg.RouterAddrs) > 0 {
		routers = cfg.RouterAddrs
	}
	if g.raw, err = openRaw(); err != nil {
		return err
	}
	g.reply = pipeline.NewICMP(g.raw, 0, firstOf(routers, true), firstOf(routers, false))
	nicMTU := g.mon.stats().MTU
	mss := pipeline.NewMSSTable(pipeline.MSSConfig{})
	// Each direction drops what claims a source on the side it goes to
	// (strict reverse-path filtering).
	for i := range min(len(in.lanes), len(g.nic.lanes)) {
		out := pipeline.WireConfig{Receiver: in.lanes[i].recv, MTU: nicMTU, IngressMTU: inMTU, Inside: cfg.Ingress.Routes}
		if err := g.out.addWire(g, cfg, out, mss, g.nic.lanes[i]); err != nil {
			return err
		}
		back := pipeline.WireConfig{Receiver: g.nic.lanes[i].recv, MTU: inMTU, IngressMTU: nicMTU, Inside: cfg.Routes}
		if err := g.back.addWire(g, cfg, back, mss, in.lanes[i]); err != nil {
			return err
		}
	}
	return nil
}

// addWire runs a forwarder from the packets wc's receiver takes, cut to
// wc's MTU, to a sink on to.
func (p *path) addWire(g *Gateway, cfg GatewayConfig, wc pipeline.WireConfig, mss *pipeline.MSSTable, to lane) error {
	wc.MSS, wc.Clamp, wc.Replier = mss, true, g.reply
	w, err := pipeline.NewWireSource(wc)
	if err != nil {
		return err
	}
	p.wires = append(p.wires, w)
	return p.add(g, cfg, w, segment.HeaderSize, to)
}

// linkOf returns the MTU and the global unicast addresses of the device
// called name.
func linkOf(name string) (int, []netip.Addr, error) {
	l, err := netlink.LinkByName(name)
	if errors.As(err, new(netlink.LinkNotFoundError)) {
		err = ErrNoDevice
	}
	if err != nil {
		return 0, nil, fmt.Errorf("dataplane: ingress device %q: %w", name, err)
	}
	addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return 0, nil, fmt.Errorf("dataplane: addresses of %s: %w", name, err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap().IsGlobalUnicast() {
			out = append(out, ip.Unmap())
		}
	}
	return l.Attrs().MTU, out, nil
}
