package dataplane

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/icmp"
	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/segment"
)

// openIngress opens the ingress device's port and wires both directions
// through forwarders that read packets from a wire (pipeline.WireSource),
// every queue of each port to a queue of the other (wireLanes), each
// packet cut to its egress MTU. One MSS table serves both
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
	g.reply = icmp.NewReplier(g.raw, 0, firstOf(routers, true), firstOf(routers, false))
	nicMTU := g.mon.stats().MTU
	mss := pipeline.NewMSSTable(pipeline.MSSConfig{})
	// Each direction drops what claims a source on the side it goes to
	// (strict reverse-path filtering).
	out := pipeline.WireConfig{MTU: nicMTU, IngressMTU: inMTU, Inside: cfg.Ingress.Routes, OnBigTCP: bigTCPWarning(log, cfg.Ingress.Device)}
	if err := g.wireLanes(cfg, &g.out, out, mss, in, g.nic); err != nil {
		return err
	}
	back := pipeline.WireConfig{MTU: inMTU, IngressMTU: nicMTU, Inside: cfg.Routes, OnBigTCP: bigTCPWarning(log, cfg.NIC)}
	return g.wireLanes(cfg, &g.back, back, mss, g.nic, in)
}

// wireLanes runs forwarders on p from every queue of from to the queues
// of to: as many forwarders as the smaller port has queues, forwarder j
// reading queues j, j+k, j+2k... of from (k forwarders; through a
// pipeline.FanIn where that is more than one) and sending on queue j of
// to. Every received packet has a way out, and each TX queue one
// producer.
func (g *Gateway) wireLanes(cfg GatewayConfig, p *path, wc pipeline.WireConfig, mss *pipeline.MSSTable, from, to *nic) error {
	k := min(len(from.lanes), len(to.lanes))
	for j := range k {
		var rs []frame.Receiver
		for i := j; i < len(from.lanes); i += k {
			rs = append(rs, from.lanes[i].recv)
		}
		wc.Receiver = rs[0]
		if len(rs) > 1 {
			f := pipeline.NewFanIn(rs)
			g.fanIns = append(g.fanIns, f)
			wc.Receiver = f
		}
		if err := p.addWire(g, cfg, wc, mss, to.lanes[j]); err != nil {
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

// bigTCPWarning returns a WireConfig.OnBigTCP that logs, once for all
// the lanes from device, that its BIG TCP super-packets are dropped.
func bigTCPWarning(log *slog.Logger, device string) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			log.Warn("BIG TCP super-packets (over 64 KiB) from "+device+" cannot be forwarded whole and are dropped: keep gso_max_size at 65536 on the senders there, and gro_max_size on "+device,
				"device", device)
		})
	}
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
