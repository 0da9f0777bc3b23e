package main

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// ingressArgs run udpfwd between gw-c (the ingress device, C behind it)
// and gw-a (B behind it), on AF_XDP ports.
var ingressArgs = []string{"-port", "xdp", "-nic", labNIC, "-ingress", netlab.Ingress,
	"-redirect", "198.18.0.0/24,2001:2:0:1::/64", "-ingress-redirect", "198.19.0.0/24,2001:2:0:19::/64",
	"-next-hop", netlab.NICB4.String(), "-log-format", "json"}

// startIngress builds the topology with C behind a veth of the given MTU
// and starts udpfwd with -ingress in A, with more flags.
func startIngress(t *testing.T, mtu int, flags ...string) *netlab.Topology {
	t.Helper()
	requireRoot(t)
	tp := netlab.NewTopologyT(t, "ingress")
	netlab.Must(t, tp.AddIngress(mtu, 2))
	p := startUdpfwd(t, tp.A, nil, slices.Concat(ingressArgs, flags)...) // flags after: the last -port wins
	waitReady(t, p, tp.A)
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		if code := p.wait(5 * time.Second); code != 0 {
			t.Errorf("exit %d:\n%s", code, p.out.String())
		}
	})
	return tp
}

// TestIngress forwards between a container's veth (TSO on, as veths
// have it) and the NIC: SHA-256-checked TCP both ways over IPv4 and IPv6.
// (A native XDP program on a veth turns off the peer's TSO: C segments
// itself; see TestIngressGSO.)
func TestIngress(t *testing.T) {
	tp := startIngress(t, 1500)
	tcpStream(t, tp.C, tp.B, net.JoinHostPort(srv4, "5201"), 32<<20)
	tcpStream(t, tp.C, tp.B, net.JoinHostPort(srv6, "5202"), 8<<20)
	tcpStream(t, tp.B, tp.C, net.JoinHostPort(netlab.App4.String(), "5203"), 32<<20)
	m := scrapeIdle(t, tp.A, "127.0.0.1:9464")
	for _, dir := range []string{"ingress_to_nic", "nic_to_ingress"} {
		if m[`udpfwd_segments_total{direction="`+dir+`",port="xdp"}`] == 0 {
			t.Errorf("no segments %s", dir)
		}
	}
	t.Logf("wire: received %v, cut %v, clamped %v", m[`udpfwd_wire_packets_total{event="received"}`],
		m[`udpfwd_wire_packets_total{event="cut"}`], m[`udpfwd_wire_packets_total{event="clamped"}`])
}

// TestIngressGSO runs the XDP programs in generic mode, where the veth
// keeps C's TSO: C's 64 KiB super-packets arrive whole (multi-buffer),
// with their partial checksums, and the gateway cuts them to the NIC's
// MTU; the stream arrives intact.
func TestIngressGSO(t *testing.T) {
	netlab.SkipWithout(t, netlab.AFXDPMultiBuffer) // the super-packets arrive as chains of frames
	tp := startIngress(t, 1500, "-xdp-mode", "generic")
	tcpStream(t, tp.C, tp.B, net.JoinHostPort(srv4, "5201"), 32<<20)
	tcpStream(t, tp.C, tp.B, net.JoinHostPort(srv6, "5202"), 8<<20)
	m := scrapeIdle(t, tp.A, "127.0.0.1:9464")
	cut := m[`udpfwd_wire_packets_total{event="cut"}`]
	multi := m[`udpfwd_xsk_events_total{device="ingress",event="rx_multi_buffer",queue="0"}`] + m[`udpfwd_xsk_events_total{device="ingress",event="rx_multi_buffer",queue="1"}`]
	t.Logf("wire: received %v, cut %v; multi-buffer packets %v", m[`udpfwd_wire_packets_total{event="received"}`], cut, multi)
	if cut == 0 || multi == 0 {
		t.Error("nothing was cut: the super-packets did not arrive whole")
	}
}

// TestIngressWhole runs both ports on AF_PACKET: C's super-packets
// arrive whole (the kernel's, with their virtio-net headers) and leave
// gw-a whole, which does TSO; none is cut here, and the stream arrives
// intact.
func TestIngressWhole(t *testing.T) {
	tp := startIngress(t, 1500, "-port", "packet")
	tcpStream(t, tp.C, tp.B, net.JoinHostPort(srv4, "5201"), 32<<20)
	tcpStream(t, tp.C, tp.B, net.JoinHostPort(srv6, "5202"), 8<<20)
	m := scrapeIdle(t, tp.A, "127.0.0.1:9464")
	out := `udpfwd_super_packets_out_total{direction="ingress_to_nic",how=`
	whole, cut := m[out+`"whole"}`], m[out+`"cut"}`]
	t.Logf("super-packets toward the NIC: %v whole, %v cut; wire: %v larger than the MTU", whole, cut, m[`udpfwd_wire_packets_total{event="cut"}`])
	if whole == 0 || cut != 0 {
		t.Errorf("%v super-packets left whole, %v were cut; want some whole and none cut", whole, cut)
	}
}

// TestIngressJumbo forwards from a jumbo-frame link (MTU 9000) to the
// 1500-byte NIC: TCP's SYNs are clamped to MSS 1460 and the stream goes
// through intact; an 8000-byte UDP datagram without DF arrives whole, cut
// into IP fragments on the way; a datagram with DF that does not fit is
// refused with
// ICMP fragmentation needed (IPv4) or packet too big (IPv6), from which
// the sender's kernel learns the path MTU.
func TestIngressJumbo(t *testing.T) {
	for _, port := range []string{"xdp", "packet"} {
		t.Run(port, func(t *testing.T) {
			if port == "xdp" { // without multi-buffer the XDP program hands frames over 4 KiB to the host
				netlab.SkipWithout(t, netlab.AFXDPMultiBuffer)
			}
			ingressJumbo(t, port)
		})
	}
}

func ingressJumbo(t *testing.T, port string) {
	tp := startIngress(t, 9000, "-port", port)
	tcpStream(t, tp.C, tp.B, net.JoinHostPort(srv4, "5201"), 16<<20)
	jumboDatagram(t, tp)
	for _, srv := range []netip.Addr{netlab.Srv4, netlab.Srv6} {
		if mtu := pathMTU(t, tp.C, srv, 3000); mtu != 1500 {
			t.Errorf("%v: path MTU %d after a 3000-byte datagram, want 1500", srv, mtu)
		}
	}
	m := scrapeIdle(t, tp.A, "127.0.0.1:9464")
	if m[`udpfwd_wire_packets_total{event="clamped"}`] == 0 || m[`udpfwd_wire_packets_total{event="too_big"}`] < 2 ||
		m[`udpfwd_icmp_errors_total{outcome="sent"}`] < 2 {
		t.Errorf("clamped %v SYNs, %v too big, %v ICMP errors sent: want the SYNs clamped and both datagrams answered",
			m[`udpfwd_wire_packets_total{event="clamped"}`], m[`udpfwd_wire_packets_total{event="too_big"}`], m[`udpfwd_icmp_errors_total{outcome="sent"}`])
	}
}

// pathMTU sends a UDP datagram of size bytes (IP) that must not be
// fragmented from ns to srv, until the kernel knows a smaller path MTU,
// and returns it.
func pathMTU(t *testing.T, ns *netlab.NS, srv netip.Addr, size int) int {
	t.Helper()
	c, err := dial(ns, "udp", net.JoinHostPort(srv.String(), "9"))
	netlab.Must(t, err)
	defer c.Close()
	level, opt, mtuOpt, do, hdrs := unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_MTU, unix.IP_PMTUDISC_DO, 28
	if srv.Is6() {
		level, opt, mtuOpt, do, hdrs = unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_MTU, unix.IPV6_PMTUDISC_DO, 48
	}
	raw, err := c.(*net.UDPConn).SyscallConn()
	netlab.Must(t, err)
	var serr error
	raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), level, opt, do) })
	netlab.Must(t, serr)
	mtu := 0
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err := c.Write(make([]byte, size-hdrs)); err != nil && !errors.Is(err, unix.EMSGSIZE) {
			t.Fatalf("send: %v", err)
		}
		raw.Control(func(fd uintptr) { mtu, serr = unix.GetsockoptInt(int(fd), level, mtuOpt) })
		netlab.Must(t, serr)
		if mtu < size {
			break
		}
	}
	return mtu
}

// jumboDatagram sends an 8000-byte UDP datagram without DF from C to the
// server and checks that it arrives whole.
func jumboDatagram(t *testing.T, tp *netlab.Topology) {
	t.Helper()
	var srv net.PacketConn
	netlab.Must(t, tp.B.Run(func() (err error) { srv, err = net.ListenPacket("udp", net.JoinHostPort(srv4, "9100")); return err }))
	defer srv.Close()
	c, err := dial(tp.C, "udp", net.JoinHostPort(srv4, "9100"))
	netlab.Must(t, err)
	defer c.Close()
	raw, err := c.(*net.UDPConn).SyscallConn()
	netlab.Must(t, err)
	var serr error
	raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DONT)
	})
	netlab.Must(t, serr)
	msg := make([]byte, 8000-28)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	buf := make([]byte, 9000)
	srv.SetReadDeadline(time.Now().Add(5 * time.Second))
	for range 3 { // the first may meet an unresolved next hop
		c.Write(msg)
		if n, _, err := srv.ReadFrom(buf); err == nil {
			if n != len(msg) || string(buf[:n]) != string(msg) {
				t.Fatalf("received %d bytes, want the %d sent", n, len(msg))
			}
			return
		}
	}
	t.Fatal("the jumbo datagram did not arrive")
}

// TestIngressTTL: a datagram from the container with TTL 1 (IPv4) and
// hop limit 1 (IPv6) is not forwarded but counted as ttl_exceeded and
// answered with ICMP time exceeded.
func TestIngressTTL(t *testing.T) {
	tp := startIngress(t, 1500)
	for _, srv := range []string{srv4, srv6} {
		c, err := dial(tp.C, "udp", net.JoinHostPort(srv, "9"))
		netlab.Must(t, err)
		raw, err := c.(*net.UDPConn).SyscallConn()
		netlab.Must(t, err)
		level, opt := unix.IPPROTO_IP, unix.IP_TTL
		if netip.MustParseAddr(srv).Is6() {
			level, opt = unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS
		}
		var serr error
		raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), level, opt, 1) })
		netlab.Must(t, serr)
		if _, err := c.Write([]byte("ttl 1")); err != nil {
			t.Fatalf("send to %s: %v", srv, err)
		}
		c.Close()
	}
	// The datagrams reach the gateway once C has resolved its address.
	var m map[string]float64
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var err error
		if m, err = scrape(tp.A, "127.0.0.1:9464"); err != nil {
			t.Fatal(err)
		}
		if m[`udpfwd_wire_packets_total{event="ttl_exceeded"}`] >= 2 || time.Now().After(deadline) {
			break
		}
	}
	if m[`udpfwd_wire_packets_total{event="ttl_exceeded"}`] != 2 || m[`udpfwd_icmp_errors_total{outcome="sent"}`] < 2 {
		t.Errorf("%v packets with their TTL run out, %v ICMP errors sent; want 2 and 2",
			m[`udpfwd_wire_packets_total{event="ttl_exceeded"}`], m[`udpfwd_icmp_errors_total{outcome="sent"}`])
	}
}
