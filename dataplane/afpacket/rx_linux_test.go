package afpacket

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
	"github.com/gsoplane/gsoplane/segment"
)

// sendUDP sends count datagrams "tag i" from B to dst.
func (l *lab) sendUDP(t *testing.T, dst netip.AddrPort, srcPort, count int, tag string) {
	t.Helper()
	var c *net.UDPConn
	l.B.Do(t, func() {
		var err error
		var laddr *net.UDPAddr
		if srcPort != 0 {
			laddr = &net.UDPAddr{Port: srcPort}
		}
		if c, err = net.DialUDP("udp", laddr, net.UDPAddrFromAddrPort(dst)); err != nil {
			t.Fatalf("dial %v: %v", dst, err)
		}
	})
	defer c.Close()
	for i := range count {
		if _, err := fmt.Fprintf(c, "%s %d", tag, i); err != nil {
			t.Fatalf("send to %v: %v", dst, err)
		}
	}
}

// received is one datagram a receiver returned.
type received struct {
	socket  int
	dst     netip.Addr
	srcPort uint16
	payload string
}

// collect receives on every socket of p until want datagrams came or
// wait passed.
func collect(t *testing.T, p *Port, want int, wait time.Duration) []received {
	t.Helper()
	var got []received
	socks := p.Sockets()
	recvs := make([]*receiverAndSocket, len(socks))
	for i, s := range socks {
		recvs[i] = &receiverAndSocket{s: s, r: s.Receiver()}
	}
	frames := make([][]byte, rxBatch)
	for deadline := time.Now().Add(wait); len(got) < want && time.Now().Before(deadline); {
		for _, rs := range recvs {
			n, err := rs.r.Receive(frames)
			netlab.Must(t, err)
			for i, f := range frames[:n] {
				if h := rs.r.Header(i); h.GSOType != segment.GSONone {
					t.Errorf("a datagram with GSO header %+v", h)
				}
				got = append(got, parseUDP(t, rs.s.Index(), f))
			}
		}
	}
	return got
}

type receiverAndSocket struct {
	s *Socket
	r interface {
		Receive([][]byte) (int, error)
		Header(int) segment.Header
	}
}

// parseUDP takes a received frame apart.
func parseUDP(t *testing.T, socket int, f []byte) received {
	t.Helper()
	pkt := f[Headroom:]
	var dst netip.Addr
	var udp header.UDP
	switch {
	case len(pkt) >= header.IPv4MinimumSize && pkt[0]>>4 == 4:
		ip := header.IPv4(pkt)
		dst, udp = netip.AddrFrom4(ip.DestinationAddress().As4()), header.UDP(ip.Payload())
	case len(pkt) >= header.IPv6MinimumSize && pkt[0]>>4 == 6:
		ip := header.IPv6(pkt)
		dst, udp = netip.AddrFrom16(ip.DestinationAddress().As16()), header.UDP(ip.Payload())
	default:
		t.Fatalf("socket %d: not an IP packet: % x", socket, f[:min(len(f), 64)])
	}
	return received{socket: socket, dst: dst, srcPort: udp.SourcePort(), payload: string(udp.Payload())}
}

// snmpField reads a field of a line pair of /proc/net/snmp in ns.
func snmpField(t *testing.T, ns *netlab.NS, proto, field string) string {
	t.Helper()
	var v string
	ns.Do(t, func() {
		b, err := os.ReadFile("/proc/thread-self/net/snmp")
		netlab.Must(t, err)
		var names []string
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 || f[0] != proto+":" {
				continue
			}
			if names == nil {
				names = f
				continue
			}
			for i, n := range names {
				if n == field && i < len(f) {
					v = f[i]
				}
			}
		}
	})
	return v
}

// TestReceiveRedirect: datagrams from the peer to the redirected
// prefixes reach the port's receivers, one copy each, and the host's
// stack neither delivers them (it has the destination addresses and
// listens on them) nor forwards them (forwarding is on and it has a
// route); ARP, ND and traffic for the NIC's own addresses still work, and
// the receivers see none of it. In either mode: the taps have their copy
// before tcx and before a clsact qdisc's filters.
func TestReceiveRedirect(t *testing.T) {
	for _, mode := range hostFilters {
		t.Run(mode.String(), func(t *testing.T) {
			skipWithoutHostFilter(t, mode)
			testReceiveRedirect(t, mode)
		})
	}
}

func testReceiveRedirect(t *testing.T, mode HostFilter) {
	l := newLab(t, false)
	other := netip.MustParsePrefix("198.18.50.0/24") // redirected, not local in A: A would forward it
	otherDst := netip.MustParseAddr("198.18.50.1")
	netlab.Must(t, l.A.AddAddr("lo", netlab.App4.String()+"/32"))
	netlab.Must(t, l.A.AddAddr("lo", netlab.App6.String()+"/128"))
	netlab.Must(t, l.A.Sysctl("net/ipv4/ip_forward", "1"))
	netlab.Must(t, l.A.AddRoute(other.String(), netlab.NICA, netlab.NICB4.String()))
	netlab.Must(t, l.B.AddRoute(other.String(), netlab.NICB, netlab.NICA4.String()))
	p := l.open(t, Config{Redirect: append([]netip.Prefix{other}, netlab.AppRoutes...), HostFilter: mode})

	heard := make(chan string, 1000)
	for _, a := range []netip.Addr{netlab.App4, netlab.App6} {
		var c *net.UDPConn
		l.A.Do(t, func() {
			var err error
			c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 9000)))
			netlab.Must(t, err)
		})
		t.Cleanup(func() { c.Close() })
		go func() {
			buf := make([]byte, 2048)
			for {
				n, err := c.Read(buf)
				if err != nil {
					return
				}
				heard <- string(buf[:n])
			}
		}()
	}
	forwarded := snmpField(t, l.A, "Ip", "ForwDatagrams")

	const count = 50
	dsts := []netip.Addr{netlab.App4, netlab.App6, otherDst}
	for _, d := range dsts {
		l.sendUDP(t, netip.AddrPortFrom(d, 9000), 0, count, d.String())
	}
	got := collect(t, p, count*len(dsts), labWait)
	seen := map[string]int{}
	for _, r := range got {
		seen[r.payload]++
		if !strings.HasPrefix(r.payload, r.dst.String()+" ") {
			t.Errorf("datagram %q to %v", r.payload, r.dst)
		}
	}
	for _, d := range dsts {
		for i := range count {
			if k := seen[fmt.Sprintf("%s %d", d, i)]; k != 1 {
				t.Errorf("datagram %d to %v received %d times", i, d, k)
			}
		}
	}
	time.Sleep(100 * time.Millisecond)
	if n := len(heard); n != 0 {
		t.Errorf("the host's stack delivered %d of the redirected datagrams, such as %q", n, <-heard)
	}
	if f := snmpField(t, l.A, "Ip", "ForwDatagrams"); f != forwarded {
		t.Errorf("the host's stack forwarded redirected datagrams: ForwDatagrams %s -> %s", forwarded, f)
	}

	// The host still answers on its own addresses (B resolved them with
	// ARP and ND through the port), and none of it reaches the sockets.
	for _, a := range []netip.Addr{netlab.NICA4, netlab.NICA6} {
		netlab.Echo(t, l.A, l.B, a, labWait)
	}
	if more := collect(t, p, 1, 300*time.Millisecond); len(more) != 0 {
		t.Errorf("the receivers got host traffic: %+v", more)
	}
	st := l.sumStats()
	if st.RX != uint64(count*len(dsts)) || st.Drops.Total() != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestReceiveGRO: with GRO on the NIC, TCP streams from the peer reach
// the receivers as the kernel's super-packets (a GSO type, a partial
// checksum from the transport header, more than an MTU), which the return
// path writes into the TUN whole; the streams arrive intact.
func TestReceiveGRO(t *testing.T) {
	l := newLab(t, true)
	l.gateway(t, Config{}, GSOModeAuto)
	for _, srv := range []netip.Addr{netlab.Srv4, netlab.Srv6} {
		netlab.TCPTransfer(t, l.A, l.B, netip.AddrPortFrom(srv, 5201), 32<<20, true)
	}
	types := map[segment.GSOType]int{}
	var frames, maxSize int
	for _, r := range l.recvs {
		r.mu.Lock() // the return path still receives (an ACK, a retransmit)
		frames, maxSize = frames+r.gsoFrames, max(maxSize, r.maxSize)
		for k, v := range r.gsoTypes {
			types[k] += v
		}
		if len(r.bad) > 0 {
			t.Errorf("%d super-packets with a bad header, such as %s", len(r.bad), r.bad[0])
		}
		r.mu.Unlock()
	}
	st := l.sumStats()
	t.Logf("received %v (largest %d bytes); port %+v", types, maxSize, st)
	if types[segment.GSOTCPv4] == 0 || types[segment.GSOTCPv6] == 0 || maxSize <= 1500 || st.RXSuper == 0 {
		t.Errorf("no GRO super-packets: %v, largest %d", types, maxSize)
	}
	var ret uint64
	for _, r := range l.rets {
		ret += r.Stats().Drops.Total()
	}
	if ret != 0 || st.Drops.Total() != st.Drops.NotRouted {
		t.Errorf("drops: port %+v, return path %d", st.Drops, ret)
	}
}

// TestFanout: the port's sockets form one fanout group whose ID the
// kernel chose (another port gets another), hashing flows: every
// datagram of a flow reaches the same socket.
func TestFanout(t *testing.T) {
	l := newLab(t, false)
	p := l.open(t, Config{Queues: 3})
	if len(p.Sockets()) != 3 {
		t.Fatalf("%d sockets", len(p.Sockets()))
	}
	for _, s := range p.Sockets() {
		var v int
		s.rc.Control(func(fd uintptr) {
			var err error
			v, err = unix.GetsockoptInt(int(fd), unix.SOL_PACKET, unix.PACKET_FANOUT)
			netlab.Must(t, err)
		})
		id, typ, flags := uint16(v), v>>16&0xff, v>>24&0xff
		if id != p.FanoutID() || typ != unix.PACKET_FANOUT_HASH || flags != unix.PACKET_FANOUT_FLAG_IGNORE_OUTGOING>>8 {
			t.Errorf("socket %d: fanout %#x, want group %d, hash, ignore outgoing", s.Index(), v, p.FanoutID())
		}
	}
	const flows, perFlow = 16, 10
	for f := range flows {
		l.sendUDP(t, netip.AddrPortFrom(netlab.App4, 9000), 20000+f, perFlow, "flow")
	}
	got := collect(t, p, flows*perFlow, labWait)
	if len(got) != flows*perFlow {
		t.Fatalf("received %d of %d", len(got), flows*perFlow)
	}
	socketOf := map[uint16]int{}
	used := map[int]bool{}
	for _, r := range got {
		if s, ok := socketOf[r.srcPort]; ok && s != r.socket {
			t.Errorf("flow from port %d on sockets %d and %d", r.srcPort, s, r.socket)
		}
		socketOf[r.srcPort] = r.socket
		used[r.socket] = true
	}
	if len(used) < 2 {
		t.Errorf("16 flows all on one socket of 3")
	}
	var second *Port
	var err error
	l.A.Do(t, func() { second, err = Open(Config{Ifname: netlab.NICA, Queues: 2, Redirect: netlab.AppRoutes}) })
	netlab.Must(t, err)
	defer second.Close()
	if second.FanoutID() == p.FanoutID() {
		t.Errorf("two ports share fanout group %d", p.FanoutID())
	}
}

// TestReceiveInvalid: a frame whose EtherType says IPv4 but whose packet
// is not (the filter takes it: its destination bytes are redirected)
// comes back with an empty packet and is counted.
func TestReceiveInvalid(t *testing.T) {
	l := newLab(t, false)
	p := l.open(t, Config{Queues: 1})
	gwA, gwB := l.A.LinkT(t, netlab.NICA), l.B.LinkT(t, netlab.NICB)
	frame := udpFrame(gwA.Attrs().HardwareAddr, gwB.Attrs().HardwareAddr,
		netip.AddrPortFrom(netlab.Srv4, 1000), netip.AddrPortFrom(netlab.App4, 9), 200)
	frame[Headroom] = 0x65 // IP version 6 behind EtherType IPv4
	var fd int
	l.B.Do(t, func() { fd = rawTXSocket(t, gwB.Attrs().Index) })
	if _, err := unix.Write(fd, frame); err != nil {
		t.Fatal(err)
	}
	r := p.Sockets()[0].Receiver()
	frames := make([][]byte, rxBatch)
	n := 0
	var err error
	for deadline := time.Now().Add(labWait); n == 0 && time.Now().Before(deadline); {
		n, err = r.Receive(frames)
		netlab.Must(t, err)
	}
	if n != 1 || len(frames[0]) != Headroom || r.Header(0) != (segment.Header{}) {
		t.Fatalf("received %d frames, the first %d bytes with header %+v; want one empty", n, len(frames[0]), r.Header(0))
	}
	if st := p.Sockets()[0].Stats(); st.Drops.Invalid != 1 || st.RX != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestRxSizeFor: a receive buffer holds 64 KiB, or the largest packet
// the device's GRO makes or its tso_max_size allows (a veth: 512 KiB),
// never more than the kernel's 512 KiB.
func TestRxSizeFor(t *testing.T) {
	for _, c := range []struct {
		name           string
		gro, gro4, tso uint32
		want           int
	}{
		{"NIC without BIG TCP", 65536, 65536, 65536, rxBufSize},
		{"NIC with gro_max_size 185000", 185000, 65536, 65536, Headroom + 185000},
		{"NIC with gro_ipv4_max_size 185000", 65536, 185000, 65536, Headroom + 185000},
		{"veth", 65536, 65536, 524280, Headroom + 524280},
		{"beyond the kernel", 1 << 20, 0, 0, Headroom + maxBigLen},
		{"unknown", 0, 0, 0, rxBufSize},
	} {
		a := &netlink.LinkAttrs{GROMaxSize: c.gro, GROIPv4MaxSize: c.gro4, TSOMaxSize: c.tso}
		if got := rxSizeFor(a); got < c.want || got >= c.want+128 || got%128 != 0 {
			t.Errorf("%s: rxSizeFor = %d, want %d rounded up to 128", c.name, got, c.want)
		}
	}
}

// TestReceiveInto: ReceiveInto receives each frame into the caller's
// buffer (the frame a view of it, the packet at Headroom, whatever the
// buffer held), one longer than its buffer comes back nil and counts as
// truncated, and a Receive after it receives into the socket's own
// memory again.
func TestReceiveInto(t *testing.T) {
	l := newLab(t, false)
	p := l.open(t, Config{Queues: 1})
	r := p.Sockets()[0].Receiver().(frame.IntoReceiver)
	dst := netip.AddrPortFrom(netlab.App4, 9000)
	const size = Headroom + 28 + 100 // room for 100 bytes of UDP payload
	bufs := make([][]byte, rxBatch)
	for i := range bufs {
		bufs[i] = bytes.Repeat([]byte{0xa5}, size)
	}
	l.sendUDP(t, dst, 0, 3, "into")
	l.sendUDP(t, dst, 0, 1, strings.Repeat("long ", 40))
	frames := make([][]byte, rxBatch)
	var got []string
	cut := 0
	for deadline := time.Now().Add(labWait); len(got)+cut < 4 && time.Now().Before(deadline); {
		n, err := r.ReceiveInto(bufs, frames)
		netlab.Must(t, err)
		for i, f := range frames[:n] {
			switch {
			case f == nil:
				cut++
			case &f[0] != &bufs[i][0]:
				t.Fatalf("frame %d is not in the buffer it was received into", i)
			default:
				got = append(got, parseUDP(t, 0, f).payload)
			}
		}
	}
	if strings.Join(got, ",") != "into 0,into 1,into 2" || cut != 1 {
		t.Fatalf("received %q and %d cut short; want the three short datagrams and the long one cut", got, cut)
	}
	if st := l.sumStats(); st.Drops.Truncated != 1 {
		t.Errorf("%d truncated, want 1", st.Drops.Truncated)
	}
	l.sendUDP(t, dst, 0, 1, "own")
	for deadline := time.Now().Add(labWait); time.Now().Before(deadline); {
		n, err := r.Receive(frames)
		netlab.Must(t, err)
		if n == 0 {
			continue
		}
		if pl := parseUDP(t, 0, frames[0]).payload; pl != "own 0" || &frames[0][0] == &bufs[0][0] {
			t.Fatalf("Receive after ReceiveInto: %q, in the caller's buffer %v", pl, &frames[0][0] == &bufs[0][0])
		}
		return
	}
	t.Fatal("nothing received after ReceiveInto")
}
