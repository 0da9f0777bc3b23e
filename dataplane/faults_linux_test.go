package dataplane

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/dataplane/afpacket"
	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/xsk"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// TestGatewayLinkFlap takes the NIC down and up again under a TCP stream,
// on each port: the gateway keeps running (a down link is not an error),
// holds what it cannot send, and the stream finishes with every byte
// intact.
func TestGatewayLinkFlap(t *testing.T) { forPorts(t, gatewayLinkFlap) }

func gatewayLinkFlap(t *testing.T, port labPort) {
	lab := newGwLab(t, port.config(GatewayConfig{}))
	nic := lab.A.LinkT(t, netlab.NICA)
	flapped := make(chan error, 1)
	go func() {
		time.Sleep(150 * time.Millisecond) // the stream is under way
		err := lab.A.Netlink().LinkSetDown(nic)
		time.Sleep(300 * time.Millisecond)
		flapped <- errors.Join(err, lab.A.Netlink().LinkSetUp(nic))
	}()
	tcpTransfer(t, lab, labSrv4, 256<<20, false)
	netlab.Must(t, <-flapped)
	st := lab.g.Stats()
	var retried uint64
	for _, s := range st.Port.Sockets {
		retried += s.Counter("kick_retry") + s.Counter("tx_busy")
	}
	t.Logf("NIC %+v, forward drops %v, kicks or sends retried %d, %d of %d super-packets offloaded in place", st.NIC, st.Forward.Drops, retried, st.Forward.InPlace, st.Forward.Offloaded)
	if st.NIC.Downs != 1 || !st.NIC.Up {
		t.Errorf("NIC stats %+v: want one down, and up now", st.NIC)
	}
	if lost(st.Forward.Drops) != 0 {
		t.Errorf("the gateway dropped %v while the link was down", st.Forward.Drops)
	}
	if err := lab.stop(); err != nil {
		t.Fatalf("the gateway failed: %v", err)
	}
}

// TestGatewayDetached detaches the gateway's XDP program from outside (as
// bpftool link detach does): by default the gateway attaches it again
// and traffic from the NIC flows; with DetachStop, Run stops with an
// error saying so.
func TestGatewayDetached(t *testing.T) {
	t.Run("reattach", func(t *testing.T) {
		lab := newGwLab(t, GatewayConfig{Port: PortXDP})
		detachOutside(t, lab)
		deadline := time.Now().Add(3 * attachCheckEvery)
		for lab.g.Stats().NIC.Reattaches == 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		tcpTransfer(t, lab, labSrv4, 8<<20, true) // B to A: through the XDP program
		if st := lab.g.Stats().NIC; st.Detaches != 1 || st.Reattaches != 1 || !st.Attached {
			t.Errorf("NIC stats %+v: want one detach, one reattach", st)
		}
	})
	t.Run("reattach/packet-clsact", func(t *testing.T) {
		lab := newGwLab(t, portClsact.config(GatewayConfig{}))
		deleteFilterOutside(t, lab)
		deadline := time.Now().Add(3 * attachCheckEvery)
		for lab.g.Stats().NIC.Reattaches == 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		tcpTransfer(t, lab, labSrv4, 8<<20, true) // B to A: through the sockets, past the filter
		if st := lab.g.Stats().NIC; st.Detaches != 1 || st.Reattaches != 1 || !st.Attached {
			t.Errorf("NIC stats %+v: want one detach, one reattach", st)
		}
		checkHostFilter(t, lab, afpacket.HostFilterClsact)
	})
	t.Run("stop", func(t *testing.T) {
		lab := newGwLab(t, GatewayConfig{Port: PortXDP, DisableGRO: true, OnDetach: DetachStop})
		detachOutside(t, lab)
		select {
		case err := <-lab.done:
			if !errors.Is(err, xsk.ErrDetached) {
				t.Errorf("Run = %v, want an error wrapping ErrDetached", err)
			}
			lab.done <- nil // for the cleanup's stop
		case <-time.After(3 * attachCheckEvery):
			t.Fatal("the gateway did not stop")
		}
	})
}

// detachOutside detaches the gateway's XDP link by its ID, from another
// handle, as another tool would.
func detachOutside(t *testing.T, lab *gwLab) {
	t.Helper()
	netlab.Must(t, lab.A.DetachXDP(netlab.NICA))
}

// deleteFilterOutside deletes the AF_PACKET port's cls_bpf filter from
// gw-a's ingress, as tc filter del would.
func deleteFilterOutside(t *testing.T, lab *gwLab) {
	t.Helper()
	nl := lab.A.Netlink()
	fs, err := nl.FilterList(lab.A.LinkT(t, netlab.NICA), netlink.HANDLE_MIN_INGRESS)
	netlab.Must(t, err)
	for _, f := range fs {
		if b, ok := f.(*netlink.BpfFilter); ok && b.Name == "gsoplane-afpacket" {
			netlab.Must(t, nl.FilterDel(f))
			return
		}
	}
	t.Fatalf("no gsoplane-afpacket filter on %s's ingress: %v", netlab.NICA, fs)
}

// labRouters are the gateway's addresses on the TUN's link in the lab:
// the source of its ICMP errors.
var labRouters = []netip.Addr{netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("2001:2:0:1::2")}

// TestGatewayUnresolved sends to a destination whose neighbour never
// answers beside a TCP transfer: the frames to it are dropped and
// counted as unresolved, not as sent, and once the kernel gives up its
// sender gets ICMP host unreachable, as from a router (what the other
// traffic does meanwhile is TestGatewayNeighbours').
func TestGatewayUnresolved(t *testing.T) {
	lab := newGwLab(t, GatewayConfig{Port: PortXDP, RouterAddrs: labRouters})
	netlab.Must(t, lab.A.AddRoute("198.19.5.0/24", labTUN, "")) // into the TUN; on gw-a nobody answers for it
	dead := lab.dial(t, "udp", netip.MustParseAddr("198.19.5.7"), 9)
	defer dead.Close()
	// Host unreachable is a soft error: a UDP socket hears of it only
	// with IP_RECVERR, as from a kernel router.
	setSockopt(t, dead.(*net.UDPConn), unix.IPPROTO_IP, unix.IP_RECVERR, 1)
	unreachable := make(chan time.Duration, 1)
	stop := make(chan struct{})
	go func() { // one datagram every 20 ms until the ICMP error comes back
		start := time.Now()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := dead.Write(make([]byte, 100)); errors.Is(err, syscall.EHOSTUNREACH) {
				unreachable <- time.Since(start)
				return
			}
		}
	}()
	tcpTransfer(t, lab, labSrv4, 256<<20, false)
	defer close(stop)
	var took time.Duration
	select {
	case took = <-unreachable:
	case <-time.After(10 * time.Second):
		st := lab.g.Stats()
		t.Fatalf("the sender to the dead destination got no host unreachable: drops %v, ICMP %+v", st.Forward.Drops, st.Replies)
	}
	st := lab.g.Stats()
	t.Logf("host unreachable after %v; drops %v, ICMP %+v", took, st.Forward.Drops, st.Replies)
	if st.Forward.Drops[frame.DropUnresolved] == 0 || st.Replies.Sent == 0 {
		t.Errorf("drops %v, ICMP %+v: want unresolved drops and host unreachable sent", st.Forward.Drops, st.Replies)
	}
	netlab.Must(t, lab.stop())
	checkSinkBalance(t, lab.g.Stats())
}

// checkSinkBalance checks, once the gateway is stopped, that every frame
// the sinks took was sent or dropped by them, once.
func checkSinkBalance(t *testing.T, st GatewayStats) {
	t.Helper()
	sinkDrops := st.Forward.Drops[frame.DropUnresolved] + st.Forward.Drops[frame.DropNotRouted] + st.Forward.HostControl
	if st.Port.Sent+sinkDrops != st.Forward.Transmitted {
		t.Errorf("sent %d + dropped or discarded by the sinks %d != taken by the sinks %d: a frame lost or counted twice", st.Port.Sent, sinkDrops, st.Forward.Transmitted)
	}
}

// TestGatewayMTU lowers the NIC's MTU under the gateway: the TUN device's
// MTU follows it down and back up, TCP streams go on intact, and a packet
// that no longer fits is dropped and answered with fragmentation needed
// (IPv4, DF set) or packet too big (IPv6), which the sender's kernel
// learns the path MTU from.
func TestGatewayMTU(t *testing.T) { forPorts(t, gatewayMTU) }

func gatewayMTU(t *testing.T, port labPort) {
	lab := newGwLab(t, port.config(GatewayConfig{RouterAddrs: labRouters}))
	setMTU := func(ns *netlab.NS, name string, mtu int) {
		t.Helper()
		netlab.Must(t, ns.Netlink().LinkSetMTU(ns.LinkT(t, name), mtu))
	}
	waitTUN := func(mtu int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for lab.g.Stats().NIC.TUNMTU != mtu && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if st := lab.g.Stats().NIC; st.TUNMTU != mtu || lab.A.LinkT(t, labTUN).Attrs().MTU != mtu {
			t.Fatalf("NIC %+v, TUN device's MTU %d: want %d", st, lab.A.LinkT(t, labTUN).Attrs().MTU, mtu)
		}
	}
	setMTU(lab.B, netlab.NICB, 1280)
	setMTU(lab.A, netlab.NICA, 1280)
	waitTUN(1280)
	tcpTransfer(t, lab, labSrv4, 32<<20, false)
	tcpTransfer(t, lab, labSrv6, 32<<20, false)

	// Undo the TUN device's MTU by hand: the host sends what the NIC
	// cannot take, and the gateway answers as a router.
	setMTU(lab.A, labTUN, 1500)
	for _, srv := range []netip.Addr{labSrv4, labSrv6} {
		if got := learnedMTU(t, lab, srv, 1400); got != 1280 {
			t.Errorf("%v: the sender's path MTU is %d after a 1400-byte datagram, want 1280", srv, got)
		}
	}
	st := lab.g.Stats()
	t.Logf("NIC %+v, drops %v, ICMP %+v", st.NIC, st.Forward.Drops, st.Replies)
	if st.Forward.Drops[frame.DropTooBig] < 2 || st.Replies.Sent < 2 {
		t.Errorf("drops %v, ICMP %+v: want the datagrams dropped as too big and answered", st.Forward.Drops, st.Replies)
	}
	setMTU(lab.A, netlab.NICA, 1500)
	waitTUN(1500)
	if st := lab.g.Stats().NIC; st.MTUChanges != 2 || st.MTU != 1500 {
		t.Errorf("NIC %+v: want two MTU changes, back at 1500", st)
	}
}

// learnedMTU sends IP packets of size bytes, UDP datagrams that must not
// be fragmented, from A to srv until A's kernel has a path MTU below
// size for srv, and returns it.
func learnedMTU(t *testing.T, lab *gwLab, srv netip.Addr, size int) int {
	t.Helper()
	c := lab.dial(t, "udp", srv, 9).(*net.UDPConn)
	defer c.Close()
	level, opt, mtuOpt, do := unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_MTU, unix.IP_PMTUDISC_DO
	if srv.Is6() {
		level, opt, mtuOpt, do = unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_MTU, unix.IPV6_PMTUDISC_DO
	}
	setSockopt(t, c, level, opt, do)
	raw, err := c.SyscallConn()
	netlab.Must(t, err)
	mtu := 0
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		c.Write(make([]byte, size-ipUDPLen(srv))) // EMSGSIZE once the kernel knows
		raw.Control(func(fd uintptr) { mtu, err = unix.GetsockoptInt(int(fd), level, mtuOpt) })
		netlab.Must(t, err)
		if mtu < size {
			break
		}
	}
	return mtu
}

// ipUDPLen is the length of the IP and UDP headers of a datagram to dst.
func ipUDPLen(dst netip.Addr) int {
	if dst.Is4() {
		return 20 + 8
	}
	return 40 + 8
}

// TestGatewayMACChange changes the NIC's MAC address under a TCP stream,
// as ip link set dev NIC address does, on each port, and the peer learns
// the new address (as from a gratuitous ARP or an unsolicited neighbour
// advertisement). The gateway follows it: the AF_XDP port's program is
// loaded again for the new address, the frames leave with it as their
// source, the change is counted, and the streams both ways go on through
// the gateway, every byte intact: its return path receives them rather
// than the host's stack past it.
func TestGatewayMACChange(t *testing.T) { forPorts(t, gatewayMACChange) }

func gatewayMACChange(t *testing.T, port labPort) {
	lab := newGwLab(t, port.config(GatewayConfig{}))
	mac := net.HardwareAddr{0x02, 0x00, 0x5e, 0x47, 0x53, 0x4f}
	changed := make(chan error, 1)
	go func() {
		time.Sleep(150 * time.Millisecond) // the stream is under way
		changed <- setNICMAC(lab, mac)
	}()
	tcpTransfer(t, lab, labSrv4, 64<<20, false)
	netlab.Must(t, <-changed)
	for _, srv := range []netip.Addr{labSrv4, labSrv6} {
		before := lab.g.Stats().Return.Bytes
		tcpTransfer(t, lab, srv, 16<<20, true)
		if got := lab.g.Stats().Return.Bytes - before; got < 16<<20 {
			t.Errorf("%v: the gateway received %d bytes of a 16 MiB stream to A: the rest went past it", srv, got)
		}
		tcpTransfer(t, lab, srv, 16<<20, false)
	}
	c := newCapture(t, lab.B, netlab.NICB)
	tcpTransfer(t, lab, labSrv4, 1<<20, false)
	tcpTransfer(t, lab, labSrv6, 1<<20, false)
	frames := c.frames(t)
	fromGateway := 0
	for _, f := range frames {
		if !bytes.Equal(f.src, mac) {
			t.Fatalf("a frame of EtherType %#04x left gw-a from %v, want %v", f.typ, f.src, mac)
		}
		if f.app {
			fromGateway++
		}
	}
	st := lab.g.Stats().NIC
	t.Logf("NIC %+v; %d frames captured, %d from the application", st, len(frames), fromGateway)
	if fromGateway == 0 {
		t.Error("no frame of the gateway reached gw-b")
	}
	if st.MACChanges != 1 || !bytes.Equal(st.MAC, mac) || !st.Attached {
		t.Errorf("NIC stats %+v: want one MAC change, to %v, and the program attached", st, mac)
	}
}

// setNICMAC sets the MAC address of gw-a in A and teaches B's neighbour
// table the new address of gw-a's IPv4 and IPv6 addresses.
func setNICMAC(lab *gwLab, mac net.HardwareAddr) error {
	nic, err := lab.A.Link(netlab.NICA)
	if err != nil {
		return err
	}
	if err := lab.A.Netlink().LinkSetHardwareAddr(nic, mac); err != nil {
		return err
	}
	peer, err := lab.B.Link(netlab.NICB)
	if err != nil {
		return err
	}
	for _, a := range []netip.Addr{netlab.NICA4, netlab.NICA6} {
		n := &netlink.Neigh{LinkIndex: peer.Attrs().Index, IP: a.AsSlice(), HardwareAddr: mac, State: netlink.NUD_REACHABLE}
		if err := lab.B.Netlink().NeighSet(n); err != nil {
			return fmt.Errorf("neighbour %v: %w", a, err)
		}
	}
	return nil
}

// capture receives the frames arriving on a device from its peer
// (AF_PACKET, PACKET_HOST and the like: not what the device sends).
type capture struct{ fd int }

// capturedFrame is what a test looks at in a captured frame.
type capturedFrame struct {
	src   net.HardwareAddr
	typ   uint16
	app   bool // IP from the application's prefixes, as the gateway forwards it
	ipLen int  // the IP packet's length by its header
}

// newCapture starts capturing on the device called name in ns.
func newCapture(t *testing.T, ns *netlab.NS, name string) *capture {
	t.Helper()
	fd := ns.SocketT(t, unix.AF_PACKET, unix.SOCK_RAW)
	netlab.Must(t, unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20))
	all := uint16(unix.ETH_P_ALL)
	netlab.Must(t, unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: all<<8 | all>>8, Ifindex: ns.LinkT(t, name).Attrs().Index}))
	return &capture{fd: fd}
}

// frames returns the frames captured and not yet read (as many as the
// socket's buffer held).
func (c *capture) frames(t *testing.T) []capturedFrame {
	t.Helper()
	var out []capturedFrame
	buf := make([]byte, 128)
	for {
		n, from, err := unix.Recvfrom(c.fd, buf, unix.MSG_DONTWAIT|unix.MSG_TRUNC)
		if errors.Is(err, unix.EAGAIN) {
			return out
		}
		netlab.Must(t, err)
		if ll, ok := from.(*unix.SockaddrLinklayer); !ok || ll.Pkttype == unix.PACKET_OUTGOING || n < 14 {
			continue
		}
		f := capturedFrame{src: net.HardwareAddr(slices.Clone(buf[6:12])), typ: binary.BigEndian.Uint16(buf[12:14])}
		ip := buf[14:min(n, len(buf))]
		switch {
		case f.typ == unix.ETH_P_IP && len(ip) >= 20:
			f.ipLen = int(binary.BigEndian.Uint16(ip[2:4]))
			f.app = netlab.AppRoutes[0].Contains(netip.AddrFrom4([4]byte(ip[12:16])))
		case f.typ == unix.ETH_P_IPV6 && len(ip) >= 40:
			f.ipLen = 40 + int(binary.BigEndian.Uint16(ip[4:6]))
			f.app = netlab.AppRoutes[1].Contains(netip.AddrFrom16([16]byte(ip[8:24])))
		}
		out = append(out, f)
	}
}

// TestGatewayJumbo runs the gateway on a NIC whose MTU is 9000, with the
// TUN device asked for 9000 too. The AF_XDP port, in generic and in
// native mode, sends each packet in one UMEM frame, so the gateway holds
// its MTU to 4082 bytes (4096 less the Ethernet header; 4058 where 24
// bytes of the frame carry TX metadata, Linux 6.11) and keeps the
// TUN device's within it; TCP flows both ways, intact, in segments of
// that size; and a larger datagram that must not be fragmented is
// answered with fragmentation needed or packet too big carrying 4082,
// from which the sender's kernel learns the path MTU. The AF_PACKET
// port, its frames sized from the NIC's MTU, sends 9000-byte segments.
func TestGatewayJumbo(t *testing.T) {
	netlab.RequireRoot(t)
	for _, mode := range []xsk.Mode{xsk.ModeGeneric, xsk.ModeNative} {
		t.Run("xdp-"+mode.String(), func(t *testing.T) {
			if mode == xsk.ModeNative {
				// A veth takes a native program on a 9000-byte link
				// only with frags, which the port loads only with
				// multi-buffer sockets.
				netlab.SkipWithout(t, netlab.AFXDPMultiBuffer)
			}
			want := UMEMFrameSize - 14
			if netlab.Lacks(t, netlab.AFXDPTXMetadata) == nil {
				want -= 24
			}
			gatewayJumbo(t, GatewayConfig{Port: PortXDP, XDP: XDPOptions{Mode: mode}}, want)
		})
	}
	t.Run("packet", func(t *testing.T) {
		// Segments cut here: whole super-packets would reach B as they are.
		gatewayJumbo(t, GatewayConfig{Port: PortPacket, Packet: PacketOptions{GSO: afpacket.GSOModeFull}}, 9000)
	})
}

// gatewayJumbo runs TestGatewayJumbo on the port cfg describes, which
// sends IP packets of at most want bytes.
func gatewayJumbo(t *testing.T, cfg GatewayConfig, want int) {
	const jumbo = 9000
	cfg.TUN.MTU, cfg.RouterAddrs = jumbo, labRouters
	lab := newGwLabWith(t, cfg, func(tp *netlab.Topology) {
		netlab.Must(t, tp.A.Netlink().LinkSetMTU(tp.A.LinkT(t, netlab.NICA), jumbo))
		netlab.Must(t, tp.B.Netlink().LinkSetMTU(tp.B.LinkT(t, netlab.NICB), jumbo))
		netlab.Must(t, tp.B.SetFeatures(netlab.NICB, map[string]bool{"gro": false})) // B sees the frames as sent
	})
	if x := lab.g.XDP(); x != nil && x.Mode() != cfg.XDP.Mode {
		t.Fatalf("XDP mode %v, want %v", x.Mode(), cfg.XDP.Mode)
	}
	st := lab.g.Stats().NIC
	if st.MTU != jumbo || st.SendMTU != want || st.TUNMTU != want || lab.A.LinkT(t, labTUN).Attrs().MTU != want {
		t.Fatalf("NIC %+v, TUN device's MTU %d: want the NIC's MTU %d, and %d sent and on the TUN device",
			st, lab.A.LinkT(t, labTUN).Attrs().MTU, jumbo, want)
	}
	c := newCapture(t, lab.B, netlab.NICB)
	for _, srv := range []netip.Addr{labSrv4, labSrv6} {
		tcpTransfer(t, lab, srv, 16<<20, false)
		tcpTransfer(t, lab, srv, 16<<20, true)
	}
	longest := 0
	for _, f := range c.frames(t) {
		if f.app {
			longest = max(longest, f.ipLen)
		}
	}
	if longest != want {
		t.Errorf("the longest packet from the application reaching B is %d bytes, want %d", longest, want)
	}
	if want == jumbo {
		return // nothing is too big for the NIC
	}

	// Undo the TUN device's MTU by hand: the host sends what the port
	// cannot, and the gateway answers as a router.
	netlab.Must(t, lab.A.Netlink().LinkSetMTU(lab.A.LinkT(t, labTUN), jumbo))
	for _, srv := range []netip.Addr{labSrv4, labSrv6} {
		if got := learnedMTU(t, lab, srv, 8000); got != want {
			t.Errorf("%v: the sender's path MTU is %d after an 8000-byte datagram, want %d", srv, got, want)
		}
	}
	s := lab.g.Stats()
	t.Logf("NIC %+v, drops %v, ICMP %+v", s.NIC, s.Forward.Drops, s.Replies)
	if s.Forward.Drops[frame.DropTooBig] < 2 || s.Replies.Sent < 2 || s.Forward.Drops[frame.DropOversize] != 0 {
		t.Errorf("drops %v, ICMP %+v: want the datagrams dropped as too big (not oversize) and answered", s.Forward.Drops, s.Replies)
	}
}
