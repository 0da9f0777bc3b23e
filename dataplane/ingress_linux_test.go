package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// An ingress lab: the application in C behind gw-c, the gateway in A
// forwarding between gw-c and gw-a in -ingress mode, the server in B.
type ingressLab struct {
	*netlab.Topology
	g *Gateway
}

// newIngressLab builds the topology with nicQueues queues on gw-a's veth
// and inQueues on gw-c's and runs a gateway between them on port.
func newIngressLab(t *testing.T, port labPort, nicQueues, inQueues int) *ingressLab {
	t.Helper()
	tp := newIngressTopology(t, nicQueues, inQueues)
	g, _ := startIngress(t, tp, port)
	return &ingressLab{Topology: tp, g: g}
}

// newIngressTopology builds the topology with nicQueues queues on gw-a's
// veth and inQueues on gw-c's, without a gateway.
func newIngressTopology(t *testing.T, nicQueues, inQueues int) *netlab.Topology {
	t.Helper()
	netlab.RequireRoot(t)
	tp, err := netlab.NewTopologyQueues("gwin", nicQueues)
	netlab.Must(t, err)
	t.Cleanup(func() {
		if err := tp.Close(); err != nil {
			t.Error(err)
		}
	})
	netlab.Must(t, tp.AddIngress(1500, inQueues))
	return tp
}

// startIngress runs a gateway on port between gw-c and gw-a of tp and
// returns it with a function that stops and closes it (idempotent,
// called at the test's end too).
func startIngress(t *testing.T, tp *netlab.Topology, port labPort) (*Gateway, func()) {
	t.Helper()
	return startIngressWith(t, tp, port.config(GatewayConfig{}))
}

// startIngressWith is startIngress with the gateway configured by cfg
// (its devices, routes and next hop filled in).
func startIngressWith(t *testing.T, tp *netlab.Topology, cfg GatewayConfig) (*Gateway, func()) {
	t.Helper()
	cfg.NIC, cfg.Routes, cfg.NextHop = netlab.NICA, netlab.AppRoutes, netlab.NICB4
	cfg.Ingress = IngressOptions{Device: netlab.Ingress, Routes: netlab.SrvRoutes}
	var g *Gateway
	var err error
	tp.A.Do(t, func() {
		if g, err = OpenGateway(cfg); err != nil {
			t.Fatalf("OpenGateway: %v", err)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	stop := sync.OnceFunc(func() {
		cancel()
		var err error
		select {
		case err = <-done:
		case <-time.After(10 * time.Second):
			err = errors.New("Run did not return")
		}
		if err = errors.Join(err, g.Close()); err != nil {
			t.Errorf("gateway: %v", err)
		}
	})
	t.Cleanup(stop)
	return g, stop
}

// TestIngressQueues forwards between a NIC and an ingress device of
// different queue counts, on each port: every queue's packets go
// through, whichever queue a flow lands on. Echo requests of many
// identifiers (each hashed to a queue of its own) are all answered, and
// a UDP datagram sent into each receive queue of the side with more
// arrives, and SHA-256-checked TCP streams from new source ports run
// both ways until every socket of both ports has received.
func TestIngressQueues(t *testing.T) {
	forPorts(t, func(t *testing.T, port labPort) {
		for _, q := range []struct{ nic, in int }{{2, 1}, {1, 2}} {
			t.Run(fmt.Sprintf("nic%d-ingress%d", q.nic, q.in), func(t *testing.T) { ingressQueues(t, port, q.nic, q.in) })
		}
	})
}

func ingressQueues(t *testing.T, port labPort, nicQueues, inQueues int) {
	lab := newIngressLab(t, port, nicQueues, inQueues)
	for _, srv := range []netip.Addr{netlab.Srv4, netlab.Srv6} {
		for id := range 16 {
			if typ, from := icmpEcho(t, lab.C, srv, 64, 0x4700+id); typ != echoReply(srv) || from != srv {
				t.Errorf("echo request %#x to %v: type %d from %v, want an echo reply", 0x4700+id, srv, typ, from)
			}
		}
	}
	// One datagram into each receive queue of the side with more.
	if nicQueues > inQueues {
		queueDatagrams(t, lab.B, netlab.NICB, lab.C, netlab.App4, nicQueues)
	} else {
		queueDatagrams(t, lab.C, netlab.AppIf, lab.B, netlab.Srv4, inQueues)
	}
	all := func(p PortStats) bool {
		for _, s := range p.Sockets {
			if s.RX == 0 {
				return false
			}
		}
		return len(p.Sockets) > 0
	}
	for i := 0; i < 24 && (i < 4 || !all(lab.g.Stats().Port) || !all(lab.g.Stats().Ingress)); i++ {
		netlab.TCPTransfer(t, lab.C, lab.B, netip.AddrPortFrom(netlab.Srv4, uint16(5201+i)), 2<<20, i%2 == 1)
	}
	st := lab.g.Stats()
	if len(st.Port.Sockets) != nicQueues || len(st.Ingress.Sockets) != inQueues {
		t.Fatalf("%d NIC sockets, %d ingress sockets; want %d and %d", len(st.Port.Sockets), len(st.Ingress.Sockets), nicQueues, inQueues)
	}
	for name, p := range map[string]PortStats{"NIC": st.Port, "ingress": st.Ingress} {
		for i, s := range p.Sockets {
			t.Logf("%s socket %d: received %d, sent %d", name, i, s.RX, s.TX)
			if s.RX == 0 {
				t.Errorf("%s socket %d received nothing", name, i)
			}
		}
		if p.Sent == 0 {
			t.Errorf("nothing sent through the %s port", name)
		}
	}
	if lost(st.Forward.Drops) != 0 || lost(st.Reverse.Drops) != 0 {
		t.Errorf("the gateway dropped: toward the NIC %v, toward the ingress device %v", st.Forward.Drops, st.Reverse.Drops)
	}
	var rx uint64
	for _, p := range []PortStats{st.Port, st.Ingress} {
		for _, s := range p.Sockets {
			rx += s.RX
		}
	}
	if st.Wire.Packets == 0 || st.Wire.Packets > rx {
		t.Errorf("the wire sources read %d packets, the sockets received %d", st.Wire.Packets, rx)
	}
}

// queueDatagrams sends a UDP datagram from ns through its veth dev into
// each of the peer's receive queues in turn and checks that each arrives
// at dst in peer. A veth hands a packet sent on its TX queue q to its
// peer's RX queue q; dev's transmit packet steering (XPS) maps queue q
// to CPU q, and the sender's thread runs on CPU q.
func queueDatagrams(t *testing.T, ns *netlab.NS, dev string, peer *netlab.NS, dst netip.Addr, queues int) {
	t.Helper()
	if runtime.NumCPU() < queues {
		t.Skipf("%d CPUs: too few to steer into %d queues", runtime.NumCPU(), queues)
	}
	for q := range queues {
		netlab.Must(t, ns.WriteSysfs(fmt.Sprintf("/sys/class/net/%s/queues/tx-%d/xps_cpus", dev, q), fmt.Sprintf("%x", 1<<q)))
	}
	var ln net.PacketConn
	var err error
	peer.Do(t, func() { ln, err = net.ListenPacket("udp", netip.AddrPortFrom(dst, 7300).String()) })
	netlab.Must(t, err)
	defer ln.Close()
	buf := make([]byte, 64)
	for q := range queues {
		msg := fmt.Sprintf("queue %d", q)
		done := make(chan error, 1)
		go func() {
			done <- ns.Run(func() error {
				// Never unlocked: the thread, whose CPU affinity
				// changes, ends with the goroutine.
				runtime.LockOSThread()
				var cpus unix.CPUSet
				cpus.Set(q)
				if err := unix.SchedSetaffinity(0, &cpus); err != nil {
					return err
				}
				fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
				if err != nil {
					return err
				}
				defer unix.Close(fd)
				return unix.Sendto(fd, []byte(msg), 0, &unix.SockaddrInet4{Port: 7300, Addr: dst.As4()})
			})
		}()
		netlab.Must(t, <-done)
		ln.SetReadDeadline(time.Now().Add(2 * time.Second))
		if n, _, err := ln.ReadFrom(buf); err != nil || string(buf[:n]) != msg {
			t.Errorf("the datagram into %s's peer's RX queue %d: %q, %v", dev, q, buf[:n], err)
		}
	}
}

// echoReply is the echo reply type of dst's family.
func echoReply(dst netip.Addr) int {
	if dst.Is4() {
		return int(ipv4.ICMPTypeEchoReply)
	}
	return int(ipv6.ICMPTypeEchoReply)
}

// icmpEcho sends an echo request with identifier id and the given TTL
// (hop limit) from ns to dst through a raw ICMP socket and returns the
// type and the source of the first answer to it: an echo reply, or an
// error quoting it; type -1 if nothing came within two seconds.
func icmpEcho(t *testing.T, ns *netlab.NS, dst netip.Addr, ttl, id int) (int, netip.Addr) {
	t.Helper()
	network, typ, proto := "ip4:icmp", icmp.Type(ipv4.ICMPTypeEcho), 1
	if dst.Is6() {
		network, typ, proto = "ip6:ipv6-icmp", ipv6.ICMPTypeEchoRequest, 58
	}
	var c *icmp.PacketConn
	var err error
	ns.Do(t, func() { c, err = icmp.ListenPacket(network, "") })
	netlab.Must(t, err)
	defer c.Close()
	if dst.Is4() {
		netlab.Must(t, c.IPv4PacketConn().SetTTL(ttl))
	} else {
		netlab.Must(t, c.IPv6PacketConn().SetHopLimit(ttl))
	}
	msg := icmp.Message{Type: typ, Body: &icmp.Echo{ID: id, Seq: 1, Data: []byte("gsoplane ttl")}}
	b, err := msg.Marshal(nil)
	netlab.Must(t, err)
	if _, err := c.WriteTo(b, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
		t.Fatalf("echo request to %v: %v", dst, err)
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 1500)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return -1, netip.Addr{}
		}
		m, err := icmp.ParseMessage(proto, buf[:n])
		if err != nil {
			continue
		}
		src, _ := netip.AddrFromSlice(from.(*net.IPAddr).IP)
		switch body := m.Body.(type) {
		case *icmp.Echo:
			if body.ID == id && m.Type != typ {
				return icmpType(m.Type), src.Unmap()
			}
		case *icmp.TimeExceeded:
			if quotesEcho(body.Data, dst, id) {
				return icmpType(m.Type), src.Unmap()
			}
		}
	}
}

// icmpType is the number of an ICMP or ICMPv6 type.
func icmpType(t icmp.Type) int {
	if v4, ok := t.(ipv4.ICMPType); ok {
		return int(v4)
	}
	return int(t.(ipv6.ICMPType))
}

// quotesEcho reports whether q, the quote of an ICMP error, is our echo
// request to dst with identifier id.
func quotesEcho(q []byte, dst netip.Addr, id int) bool {
	off := 40
	if dst.Is4() {
		if len(q) < 20 {
			return false
		}
		off = int(q[0]&0x0f) * 4
	}
	return len(q) >= off+8 && int(q[off+4])<<8|int(q[off+5]) == id
}

// TestIngressTTL: between two wires the gateway is a router. An echo
// request from the container with TTL (hop limit) 1 is answered with
// time exceeded from the gateway's address on the container's link, and
// counted; a UDP datagram with TTL 2 reaches the server with TTL 1, and
// one from the server the container.
func TestIngressTTL(t *testing.T) {
	forPorts(t, func(t *testing.T, port labPort) {
		lab := newIngressLab(t, port, 2, 2)
		for _, c := range []struct{ srv, router netip.Addr }{{netlab.Srv4, netlab.Router4}, {netlab.Srv6, netlab.Router6}} {
			want := int(ipv4.ICMPTypeTimeExceeded)
			if c.srv.Is6() {
				want = int(ipv6.ICMPTypeTimeExceeded)
			}
			if typ, from := icmpEcho(t, lab.C, c.srv, 1, 0x4801); typ != want || from != c.router {
				t.Errorf("echo request to %v with TTL 1: type %d from %v, want time exceeded (%d) from %v", c.srv, typ, from, want, c.router)
			}
			if ttl := arrivingTTL(t, lab.C, lab.B, c.srv, 2); ttl != 1 {
				t.Errorf("a datagram to %v sent with TTL 2 arrived with %d, want 1", c.srv, ttl)
			}
		}
		for _, app := range []netip.Addr{netlab.App4, netlab.App6} {
			if ttl := arrivingTTL(t, lab.B, lab.C, app, 2); ttl != 1 {
				t.Errorf("a datagram to %v sent with TTL 2 arrived with %d, want 1", app, ttl)
			}
		}
		st := lab.g.Stats()
		if st.Wire.TTLExceeded != 2 || st.Replies.Sent < 2 {
			t.Errorf("%d packets with their TTL run out, %d ICMP errors sent; want 2 and 2", st.Wire.TTLExceeded, st.Replies.Sent)
		}
	})
}

// arrivingTTL sends a UDP datagram with the given TTL (hop limit) from
// ns to dst in peer and returns the TTL it arrives with.
func arrivingTTL(t *testing.T, ns, peer *netlab.NS, dst netip.Addr, ttl int) int {
	t.Helper()
	addr := netip.AddrPortFrom(dst, 7301).String()
	var ln, c net.PacketConn
	var err error
	peer.Do(t, func() { ln, err = net.ListenPacket("udp", addr) })
	netlab.Must(t, err)
	defer ln.Close()
	ns.Do(t, func() { c, err = net.ListenPacket("udp", ":0") })
	netlab.Must(t, err)
	defer c.Close()
	to := net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 7301))
	buf := make([]byte, 64)
	ln.SetReadDeadline(time.Now().Add(2 * time.Second))
	if dst.Is4() {
		p, q := ipv4.NewPacketConn(ln), ipv4.NewPacketConn(c)
		netlab.Must(t, p.SetControlMessage(ipv4.FlagTTL, true))
		netlab.Must(t, q.SetTTL(ttl))
		_, err = q.WriteTo([]byte("ttl"), nil, to)
		netlab.Must(t, err)
		_, cm, _, err := p.ReadFrom(buf)
		if err != nil || cm == nil {
			t.Fatalf("datagram to %v: %v", dst, err)
		}
		return cm.TTL
	}
	p, q := ipv6.NewPacketConn(ln), ipv6.NewPacketConn(c)
	netlab.Must(t, p.SetControlMessage(ipv6.FlagHopLimit, true))
	netlab.Must(t, q.SetHopLimit(ttl))
	_, err = q.WriteTo([]byte("ttl"), nil, to)
	netlab.Must(t, err)
	_, cm, _, err := p.ReadFrom(buf)
	if err != nil || cm == nil {
		t.Fatalf("datagram to %v: %v", dst, err)
	}
	return cm.HopLimit
}

// TestIngressSmallMSS moves SHA-256-checked TCP streams at MSS 100 both
// ways between C and B through a gateway in ingress mode, on each port.
// An AF_PACKET port receives what the kernel's GRO merged, super-packets
// that WireSource gives gso_size 100: more than 128 segments, which the
// gateway cuts BurstSegments at a time. None is refused or dropped.
func TestIngressSmallMSS(t *testing.T) {
	forPorts(t, func(t *testing.T, port labPort) {
		lab := newIngressLab(t, port, 1, 1)
		for i, toC := range []bool{false, true} {
			netlab.TCPTransferMSS(t, lab.C, lab.B, netip.AddrPortFrom(netlab.Srv4, uint16(5201+i)), 8<<20, toC, 100)
		}
		st := lab.g.Stats()
		t.Logf("segments per read: toward the NIC %v, toward the ingress device %v; wire %+v", st.Forward.SegmentsPerRead, st.Reverse.SegmentsPerRead, st.Wire)
		if lost(st.Forward.Drops) != 0 || lost(st.Reverse.Drops) != 0 || st.Wire.Invalid != 0 {
			t.Errorf("the gateway dropped: toward the NIC %v, toward the ingress device %v, %d invalid", st.Forward.Drops, st.Reverse.Drops, st.Wire.Invalid)
		}
		over := st.Forward.SegmentsPerRead[len(pipeline.SegmentBounds)] + st.Reverse.SegmentsPerRead[len(pipeline.SegmentBounds)]
		if port.kind == PortPacket && over == 0 {
			t.Errorf("no super-packet of more than %d segments: the path is not tested", pipeline.SegmentBounds[len(pipeline.SegmentBounds)-1])
		}
	})
}
