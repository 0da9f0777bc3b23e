package dataplane

import (
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
	"github.com/gsoplane/gsoplane/internal/testing/syncbuf"
)

// bigTCPSize is the gso_max_size (and gro_max_size) of BIG TCP in
// TestGatewayBigTCP: super-packets of up to about 180 KB.
const bigTCPSize = 185000

// TestGatewayBigTCP moves SHA-256-checked TCP streams from B to A, IPv6
// and IPv4, through packets longer than 64 KiB, and checks that the
// port's sockets lost none (truncated, malformed, passed to the kernel
// as oversize) and the return path dropped none:
//   - packet/gso: gw-b, with gso_max_size and gso_ipv4_max_size 185000,
//     does TSO (tx on), and the veth hands its BIG TCP packets over
//     whole, as a peer's;
//   - packet/gro: gw-b cuts them into segments in software (tx off), in
//     bursts of 185000 bytes, and gw-a's GRO (gro on, gro_max_size and
//     gro_ipv4_max_size 185000) merges them into BIG TCP packets, as a
//     NIC's GRO does.
//
// Behind AF_PACKET the sockets receive them whole and the return path
// cuts them into TSO super-packets the TUN takes (counted as BigTCP).
// Behind AF_XDP (xdp/gso) none arrives: gw-b checksums in software, as a
// veth peer of that port must (netlab.Topology), so it has no TSO, and
// the XDP program takes TSO away from it anyway (package xsk); the
// streams go through all the same.
func TestGatewayBigTCP(t *testing.T) {
	netlab.RequireRoot(t)
	for _, c := range []struct {
		port labPort
		big  string // "gso": gw-b sends BIG TCP; "gro": gw-a's GRO makes it
	}{
		{portXDP, "gso"},
		{portPacket, "gso"},
		{portPacket, "gro"},
	} {
		t.Run(c.port.name+"/"+c.big, func(t *testing.T) { gatewayBigTCP(t, c.port, c.big == "gro") })
	}
}

func gatewayBigTCP(t *testing.T, port labPort, gro bool) {
	lab := newGwLabWith(t, port.config(GatewayConfig{}), func(tp *netlab.Topology) {
		nl, l := tp.B.Netlink(), tp.B.LinkT(t, netlab.NICB)
		netlab.Must(t, nl.LinkSetGSOMaxSize(l, bigTCPSize))
		netlab.Must(t, nl.LinkSetGSOIPv4MaxSize(l, bigTCPSize))
		switch {
		case gro:
			nl, l := tp.A.Netlink(), tp.A.LinkT(t, netlab.NICA)
			netlab.Must(t, tp.A.SetFeatures(netlab.NICA, map[string]bool{"gro": true}))
			netlab.Must(t, nl.LinkSetGROMaxSize(l, bigTCPSize))
			netlab.Must(t, nl.LinkSetGROIPv4MaxSize(l, bigTCPSize))
		case port.kind == PortPacket:
			netlab.Must(t, tp.B.SetFeatures(netlab.NICB, map[string]bool{"tx": true}))
		}
	})
	for _, c := range []struct {
		name string
		srv  netip.Addr
	}{{"v6", labSrv6}, {"v4", labSrv4}} {
		t.Run(c.name, func(t *testing.T) {
			const size = 32 << 20
			d := tcpTransfer(t, lab, c.srv, size, true)
			t.Logf("%d MiB in %v: %.0f Mbit/s", size>>20, d.Round(time.Millisecond), float64(size)*8/d.Seconds()/1e6)
		})
	}
	st := lab.settledStats()
	t.Logf("return %+v", st.Return)
	if st.Return.Drops.Total() != 0 {
		t.Errorf("the return path dropped %v", st.Return.Drops)
	}
	var truncated, malformed, oversize uint64
	for _, s := range st.Port.Sockets {
		truncated, oversize = truncated+s.Counter("rx_truncated"), oversize+s.Counter("pass_oversize")
		if port.kind == PortPacket { // AF_XDP's rx_invalid counts bad descriptors
			malformed += s.Counter("rx_invalid")
		}
	}
	if truncated != 0 || malformed != 0 || oversize != 0 {
		t.Errorf("the port's sockets: %d frames truncated, %d malformed, %d passed to the kernel as oversize", truncated, malformed, oversize)
	}
	if port.kind == PortPacket && st.Return.BigTCP == 0 {
		t.Errorf("AF_PACKET: no BIG TCP super-packet received")
	}
}

// TestIngressBigTCP: with an ingress device, BIG TCP super-packets from
// the NIC side (gw-b with TSO and gso_max_size 185000, behind the
// AF_PACKET port) cannot go on whole: they are dropped, counted
// (Wire.BigTCP) and logged once, naming the device and the remedy.
func TestIngressBigTCP(t *testing.T) {
	tp := newIngressTopology(t, 2, 2)
	nl, l := tp.B.Netlink(), tp.B.LinkT(t, netlab.NICB)
	netlab.Must(t, tp.B.SetFeatures(netlab.NICB, map[string]bool{"tx": true}))
	netlab.Must(t, nl.LinkSetGSOMaxSize(l, bigTCPSize))
	var log syncbuf.Buffer
	g, _ := startIngressWith(t, tp, portPacket.config(GatewayConfig{Log: slog.New(slog.NewTextHandler(&log, nil))}))

	// B sends to C until the gateway has dropped a BIG TCP super-packet;
	// the stream itself crawls, its large packets lost.
	addr := netip.AddrPortFrom(netlab.Srv6, 5201)
	var ln net.Listener
	var err error
	tp.B.Do(t, func() { ln, err = net.Listen("tcp", addr.String()) })
	netlab.Must(t, err)
	defer ln.Close()
	var c net.Conn
	tp.C.Do(t, func() { c, err = net.DialTimeout("tcp", addr.String(), 5*time.Second) })
	netlab.Must(t, err)
	defer c.Close()
	go io.Copy(io.Discard, c)
	s, err := ln.Accept()
	netlab.Must(t, err)
	defer s.Close()
	go func() {
		s.SetWriteDeadline(time.Now().Add(time.Minute))
		s.Write(make([]byte, 64<<20))
	}()
	deadline := time.Now().Add(30 * time.Second)
	for g.Stats().Wire.BigTCP == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := g.Stats().Wire.BigTCP; n == 0 {
		t.Fatal("no BIG TCP super-packet counted")
	}
	if n := strings.Count(log.String(), "BIG TCP super-packets (over 64 KiB) from "+netlab.NICA); n != 1 {
		t.Errorf("%d log lines about BIG TCP from %s, want 1:\n%s", n, netlab.NICA, log.String())
	}
}
