package dataplane

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// Destinations beside the server on its link (198.19.0.0/24, on link
// through gw-a): nobody has the dead ones; the late one is given to the
// server's host a second after traffic to it starts, so that the
// kernel's second or third solicitation is answered.
var (
	deadEcho4 = netip.MustParseAddr("198.19.0.71") // a 5000-byte echo: 4 fragments
	deadPing4 = netip.MustParseAddr("198.19.0.72") // a small echo
	deadUDP4  = netip.MustParseAddr("198.19.0.73") // UDP datagrams
	deadEcho6 = netip.MustParseAddr("2001:2:0:19::71")
	late4     = netip.MustParseAddr("198.19.0.9")
)

// deadFrames is how many frames go to the dead addresses: 4 fragments
// of each 5000-byte echo (the TUN device's MTU is the NIC's, 1500), a
// small echo and 3 datagrams.
const deadFrames = 4 + 1 + 4 + 3

// streamRate is TestGatewayNeighbours' stream's pace, in bytes per
// second (400 Mbit/s).
const streamRate = 50 << 20

// TestGatewayNeighbours: a destination whose neighbour never answers, or
// answers late, costs the other traffic nothing. Beside a TCP stream to
// the server, echoes (of 5000 bytes, which the host sends as fragments,
// and small ones) and UDP datagrams go to addresses on the server's link
// that nobody has, and datagrams and an echo to one that its host takes
// a second later. The stream's sender retransmits nothing the gateway
// held or dropped, the gateway drops nothing but what went to the dead
// addresses, their senders get host unreachable (address unreachable for
// IPv6) once the kernel gives up, and what was sent to the late host
// arrives once it answers. The stream is paced at a rate a loaded
// machine sustains: at full rate, its ACKs delayed in the scheduler make
// its sender retransmit now and then.
func TestGatewayNeighbours(t *testing.T) {
	forPorts(t, func(t *testing.T, p labPort) {
		lab := newGwLab(t, p.config(GatewayConfig{RouterAddrs: labRouters}))
		gatewayNeighbours(t, lab, lab.A)
	})
}

// TestIngressNeighbours is TestGatewayNeighbours between two wires: the
// application in C sends through the ingress device.
func TestIngressNeighbours(t *testing.T) {
	forPorts(t, func(t *testing.T, p labPort) {
		lab := &gwLab{Topology: newIngressTopology(t, 2, 2)}
		cfg := p.config(GatewayConfig{
			NIC: netlab.NICA, Routes: netlab.AppRoutes, Ingress: IngressOptions{Device: netlab.Ingress, Routes: netlab.SrvRoutes},
		})
		lab.A.Do(t, func() {
			var err error
			if lab.g, err = OpenGateway(cfg); err != nil {
				t.Fatalf("OpenGateway: %v", err)
			}
		})
		lab.run()
		t.Cleanup(func() {
			if err := lab.stop(); err != nil {
				t.Errorf("gateway: %v", err)
			}
		})
		gatewayNeighbours(t, lab, lab.C)
	})
}

// gatewayNeighbours runs TestGatewayNeighbours' traffic from app, the
// application's namespace, through lab's gateway.
func gatewayNeighbours(t *testing.T, lab *gwLab, app *netlab.NS) {
	dial := func(network string, dst netip.Addr, port int) net.Conn {
		var c net.Conn
		app.Do(t, func() {
			var err error
			if c, err = net.DialTimeout(network, netip.AddrPortFrom(dst, uint16(port)).String(), 5*time.Second); err != nil {
				t.Fatalf("dial %s %v: %v", network, dst, err)
			}
		})
		return c
	}
	ln, _ := lab.listen(t, "tcp", labSrv4, 5204)
	defer ln.Close()
	_, lateSrv := lab.listen(t, "udp", netip.IPv4Unspecified(), 7009)
	defer lateSrv.Close()
	conn := dial("tcp", labSrv4, 5204)
	defer conn.Close()
	peer, err := ln.Accept()
	netlab.Must(t, err)
	defer peer.Close()

	// The stream runs until every check below is done.
	raw, err := conn.(*net.TCPConn).SyscallConn()
	netlab.Must(t, err)
	netlab.Must(t, raw.Control(func(fd uintptr) {
		err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MAX_PACING_RATE, streamRate)
	}))
	netlab.Must(t, err)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		buf := make([]byte, 1<<20)
		for {
			if _, err := peer.Read(buf); err != nil {
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		defer conn.(*net.TCPConn).CloseWrite()
		buf := make([]byte, 256<<10)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := conn.Write(buf); err != nil {
				t.Errorf("stream: %v", err)
				return
			}
		}
	}()
	time.Sleep(500 * time.Millisecond) // the stream is under way
	backlog0 := backlogDrops(t)

	ping4, ping6 := icmpConn(t, app, "ip4:icmp"), icmpConn(t, app, "ip6:ipv6-icmp")
	defer ping4.Close()
	defer ping6.Close()
	udpDead := dial("udp", deadUDP4, 9).(*net.UDPConn)
	defer udpDead.Close()
	setSockopt(t, udpDead, unix.IPPROTO_IP, unix.IP_RECVERR, 1) // host unreachable is a soft error
	udpLate := dial("udp", late4, 7009).(*net.UDPConn)
	defer udpLate.Close()

	start := time.Now()
	sendEcho(t, ping4, deadEcho4, 1, 5000)
	sendEcho(t, ping4, deadPing4, 2, 56)
	sendEcho(t, ping6, deadEcho6, 3, 5000)
	sendEcho(t, ping4, late4, 4, 5000)
	const lateDatagrams = 3
	for i := range lateDatagrams {
		_, err := udpLate.Write([]byte{byte(i)})
		netlab.Must(t, err)
		_, err = udpDead.Write([]byte{byte(i)})
		netlab.Must(t, err)
	}
	time.Sleep(time.Second)
	netlab.Must(t, lab.B.AddAddr(netlab.NICB, late4.String()+"/32"))

	// What the senders hear back.
	var udpUnreachable, lateArrived bool
	answers4, answers6 := map[int]string{}, map[int]string{}
	var heard sync.WaitGroup
	heard.Go(func() {
		udpDead.SetReadDeadline(start.Add(15 * time.Second))
		_, err := udpDead.Read(make([]byte, 16))
		udpUnreachable = errors.Is(err, syscall.EHOSTUNREACH)
	})
	heard.Go(func() {
		var seen [lateDatagrams]bool
		buf := make([]byte, 16)
		lateSrv.SetReadDeadline(start.Add(15 * time.Second))
		for n := 0; n < lateDatagrams; n++ {
			if k, _, err := lateSrv.ReadFrom(buf); err != nil || k != 1 || int(buf[0]) >= lateDatagrams || seen[buf[0]] {
				return
			}
			seen[buf[0]] = true
		}
		lateArrived = true
	})
	heard.Go(func() {
		awaitICMP(ping4, unix.IPPROTO_ICMP, start.Add(15*time.Second), answers4, func() bool {
			return answers4[1] != "" && answers4[2] != "" && answers4[4] != ""
		})
	})
	heard.Go(func() {
		awaitICMP(ping6, unix.IPPROTO_ICMPV6, start.Add(15*time.Second), answers6, func() bool { return answers6[3] != "" })
	})
	heard.Wait()
	close(stop)
	wg.Wait()
	info := netlab.TCPInfo(conn.(*net.TCPConn))
	st := lab.g.Stats()
	tcp := app.Counters(t) // the stream's sender is app's only TCP socket
	t.Logf("after %v: ICMP %v, ICMPv6 %v, UDP unreachable %v, late datagrams arrived %v; drops %v, replies %+v",
		time.Since(start), answers4, answers6, udpUnreachable, lateArrived, st.Forward.Drops, st.Replies)
	t.Logf("stream: %d bytes acked, %d retransmitted (timeouts %d, fast retransmits %d, tail loss probes %d), RTO %v",
		info.Bytes_acked, info.Total_retrans, tcp["TcpExt:TCPTimeouts"], tcp["TcpExt:TCPFastRetrans"], tcp["TcpExt:TCPLossProbes"], time.Duration(info.Rto)*time.Microsecond)
	starved := kernelDrops(t, st, backlogDrops(t)-backlog0, lab.A, lab.B, lab.C)
	t.Logf("the kernel dropped %d packets on the way for want of CPU time (the sockets' rings, the links, the backlog)", starved)
	// A segment the gateway held while another destination was resolved
	// (a second or more) would show as a retransmission timeout; one it
	// dropped is counted in Forward.Drops (checked below), and one it
	// lost otherwise would be retransmitted fast. On a loaded machine an
	// ACK a few milliseconds late makes the sender probe the tail of its
	// flight, which may retransmit a segment, and a thread kept off the
	// CPU for a few milliseconds makes the kernel drop what its ring or
	// backlog cannot hold, which the sender retransmits fast: the
	// scheduler's doing, not the gateway's, and counted as such.
	if lost := int64(info.Total_retrans) - tcp["TcpExt:TCPLossProbes"]; tcp["TcpExt:TCPTimeouts"] != 0 || lost > 0 && starved == 0 {
		t.Errorf("the stream's sender retransmitted %d segments, %d after timeouts, %d fast, with nothing dropped for want of CPU: the gateway held or lost its segments",
			info.Total_retrans, tcp["TcpExt:TCPTimeouts"], tcp["TcpExt:TCPFastRetrans"])
	}
	if n := st.Forward.Drops[frame.DropUnresolved]; n != deadFrames {
		t.Errorf("%d frames dropped as unresolved, want the %d to the dead addresses", n, deadFrames)
	}
	for r, n := range st.Forward.Drops {
		if n != 0 && r != int(frame.DropUnresolved) && r != int(frame.DropNotRouted) {
			t.Errorf("%d dropped as %v", n, frame.DropReason(r))
		}
	}
	if answers4[1] != unreachable || answers4[2] != unreachable || answers6[3] != unreachable || !udpUnreachable {
		t.Errorf("the senders to the dead addresses: IPv4 echoes %v, IPv6 %v, UDP unreachable %v; want echoes 1, 2 and 3 unreachable, and UDP", answers4, answers6, udpUnreachable)
	}
	if answers4[4] != "reply" || !lateArrived {
		t.Errorf("the late host: echo %q, datagrams arrived %v; want a reply to echo 4 and every datagram", answers4[4], lateArrived)
	}
	if f := lab.settledStats().Forward; f.Completed != f.Transmitted {
		t.Errorf("%d frames completed of %d taken by the sinks", f.Completed, f.Transmitted)
	}
	netlab.Must(t, lab.stop())
	checkSinkBalance(t, lab.g.Stats())
}

// icmpConn opens a raw ICMP socket in ns.
func icmpConn(t *testing.T, ns *netlab.NS, network string) *icmp.PacketConn {
	t.Helper()
	var c *icmp.PacketConn
	var err error
	ns.Do(t, func() { c, err = icmp.ListenPacket(network, "") })
	netlab.Must(t, err)
	return c
}

// sendEcho sends an echo request of size bytes of data with identifier
// id to dst.
func sendEcho(t *testing.T, c *icmp.PacketConn, dst netip.Addr, id, size int) {
	t.Helper()
	var typ icmp.Type = ipv4.ICMPTypeEcho
	if dst.Is6() {
		typ = ipv6.ICMPTypeEchoRequest
	}
	msg := icmp.Message{Type: typ, Body: &icmp.Echo{ID: id, Seq: 1, Data: make([]byte, size)}}
	b, err := msg.Marshal(nil)
	netlab.Must(t, err)
	if _, err := c.WriteTo(b, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
		t.Fatalf("echo request to %v: %v", dst, err)
	}
}

// unreachable is what awaitICMP records for host unreachable (IPv4) or
// address unreachable (IPv6).
const unreachable = "unreachable"

// unreachableCode reports whether m, a destination unreachable message,
// says host (IPv4) or address (IPv6) unreachable.
func unreachableCode(m *icmp.Message) bool {
	if m.Type == ipv4.ICMPTypeDestinationUnreachable {
		return m.Code == 1
	}
	return m.Code == 3
}

// awaitICMP reads ICMP messages (protocol proto) until deadline or until
// done, and records for each of our echoes (by identifier) the answer:
// "reply", or unreachable for an error that quotes it.
func awaitICMP(c *icmp.PacketConn, proto int, deadline time.Time, answers map[int]string, done func() bool) {
	c.SetReadDeadline(deadline)
	buf := make([]byte, 9000)
	for !done() {
		n, _, err := c.ReadFrom(buf)
		if err != nil {
			return
		}
		m, err := icmp.ParseMessage(proto, buf[:n])
		if err != nil {
			continue
		}
		switch body := m.Body.(type) {
		case *icmp.Echo:
			if m.Type == ipv4.ICMPTypeEchoReply || m.Type == ipv6.ICMPTypeEchoReply {
				answers[body.ID] = "reply"
			}
		case *icmp.DstUnreach:
			if id, ok := quotedEcho(body.Data, proto); ok && unreachableCode(m) {
				answers[id] = unreachable
			}
		}
	}
}

// quotedEcho returns the identifier of the echo request an ICMP error
// quotes, the first fragment of one included.
func quotedEcho(q []byte, proto int) (int, bool) {
	var off int
	var next byte
	switch {
	case proto == unix.IPPROTO_ICMP && len(q) >= 20:
		off, next = int(q[0]&0x0f)*4, q[9]
	case proto == unix.IPPROTO_ICMPV6 && len(q) >= 48 && q[6] == unix.IPPROTO_FRAGMENT:
		off, next = 48, q[40]
	case proto == unix.IPPROTO_ICMPV6 && len(q) >= 40:
		off, next = 40, q[6]
	}
	if int(next) != proto || len(q) < off+8 {
		return 0, false
	}
	return int(q[off+4])<<8 | int(q[off+5]), true
}

// kernelDrops counts the packets the kernel dropped on the lab's paths
// for want of CPU time: those the ports' sockets say it dropped before
// they read them (AF_PACKET's rx_kernel_drop; AF_XDP's rx_dropped,
// rx_ring_full, rx_fill_ring_empty), the links' drops in the lab's
// namespaces (nil ones skipped), and backlog, the host's backlog drops
// meanwhile.
func kernelDrops(t *testing.T, st GatewayStats, backlog uint64, nss ...*netlab.NS) uint64 {
	n := backlog
	for _, s := range append(st.Port.Sockets, st.Ingress.Sockets...) {
		n += s.Counter("rx_kernel_drop") + s.Counter("rx_dropped") + s.Counter("rx_ring_full") + s.Counter("rx_fill_ring_empty")
	}
	for _, ns := range nss {
		if ns != nil {
			n += ns.LinkDrops(t)
		}
	}
	return n
}

// backlogDrops returns the packets the host's CPUs dropped with their
// backlog full (/proc/net/softnet_stat's second column, summed).
func backlogDrops(t *testing.T) uint64 {
	b, err := os.ReadFile("/proc/net/softnet_stat")
	netlab.Must(t, err)
	var n uint64
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			v, err := strconv.ParseUint(f[1], 16, 64)
			netlab.Must(t, err)
			n += v
		}
	}
	return n
}
