package xsk

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

func TestMain(m *testing.M) { os.Exit(netlab.Main(m)) }

// AF_XDP test topology: gw netns with veth-a (XDP port), peer netns with
// veth-b; the peer routes the redirect prefixes via veth-a's addresses.
const (
	xdpIfA     = "veth-a"
	xdpIfB     = "veth-b"
	xdpGW4     = "198.18.100.1"
	xdpPeer4   = "198.18.100.2"
	xdpGW6     = "2001:2:0:100::1"
	xdpPeer6   = "2001:2:0:100::2"
	xdpRedir4  = "198.18.200.0/24"
	xdpRedir6  = "2001:2:0:200::/64"
	xdpWait    = 5 * time.Second
	xdpFrames  = 1024
	xdpRing    = 512
	xdpUDPPort = 9000
)

var xdpRedirect = []netip.Prefix{netip.MustParsePrefix(xdpRedir4), netip.MustParsePrefix(xdpRedir6)}

type xdpNet struct {
	gw, peer   *netlab.NS
	macA, macB net.HardwareAddr
}

// newXDPNet builds the topology; everything goes in t.Cleanup.
func newXDPNet(t *testing.T) *xdpNet {
	t.Helper()
	n := &xdpNet{gw: netlab.NewT(t, "xsk"), peer: netlab.NewT(t, "xsk")}
	for _, err := range []error{
		netlab.AddVeth(n.gw, xdpIfA, n.peer, xdpIfB, 2),
		n.gw.AddAddr(xdpIfA, xdpGW4+"/24"),
		n.gw.AddAddr(xdpIfA, xdpGW6+"/64"),
		n.peer.AddAddr(xdpIfB, xdpPeer4+"/24"),
		n.peer.AddAddr(xdpIfB, xdpPeer6+"/64"),
		n.peer.AddRoute(xdpRedir4, xdpIfB, xdpGW4),
		n.peer.AddRoute(xdpRedir6, xdpIfB, xdpGW6),
	} {
		netlab.Must(t, err)
	}
	n.macA = n.gw.LinkT(t, xdpIfA).Attrs().HardwareAddr
	n.macB = n.peer.LinkT(t, xdpIfB).Attrs().HardwareAddr
	return n
}

// xdpTestConfig is a small port config on veth-a.
func xdpTestConfig() Config {
	return Config{Ifname: xdpIfA, NumFrames: xdpFrames, RingSize: xdpRing, Redirect: xdpRedirect}
}

// open opens a port in the gw netns, closed in t.Cleanup (from outside
// the netns, which Close must handle).
func (n *xdpNet) open(t *testing.T, cfg Config) *Port {
	t.Helper()
	p, err := n.tryOpen(t, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

func (n *xdpNet) tryOpen(t *testing.T, cfg Config) (p *Port, err error) {
	t.Helper()
	n.gw.Do(t, func() { p, err = Open(cfg) })
	return p, err
}

// xdpAttached returns whether veth-a has an XDP program, and its ID.
func (n *xdpNet) xdpAttached(t *testing.T) (bool, uint32) {
	t.Helper()
	return attachedXDP(n.gw.LinkT(t, xdpIfA))
}

// dialUDP opens a UDP socket in ns connected to dst.
func xdpDialUDP(t *testing.T, ns *netlab.NS, dst netip.AddrPort) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	var err error
	ns.Do(t, func() { c, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst)) })
	if err != nil {
		t.Fatalf("dial %v: %v", dst, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// xdpListenUDP opens a UDP socket in ns bound to addr with a large buffer.
func xdpListenUDP(t *testing.T, ns *netlab.NS, addr netip.AddrPort) *net.UDPConn {
	t.Helper()
	c := ns.ListenUDP(t, addr)
	raw, err := c.SyscallConn()
	if err == nil {
		err = raw.Control(func(fd uintptr) {
			err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20)
		})
	}
	if err != nil {
		t.Fatalf("SO_RCVBUFFORCE: %v", err)
	}
	return c
}

// echo checks that veth-a's own addresses answer over UDP and TCP from the
// peer while the port runs (so ARP and ND went to the kernel).
func (n *xdpNet) echo(t *testing.T) {
	t.Helper()
	for _, a := range []string{xdpGW4, xdpGW6} {
		netlab.Echo(t, n.gw, n.peer, netip.MustParseAddr(a), xdpWait)
	}
}

func TestXDPConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Ifname: "this-name-is-too-long"},
		{Ifname: "x", FrameSize: 1000},
		{Ifname: "x", FrameSize: 8192},
		{Ifname: "x", NumFrames: 3},
		{Ifname: "x", RingSize: 1000},
		{Ifname: "x", Mode: 7},
		{Ifname: "x", Queues: []int{0, 0}},
		{Ifname: "x", Queues: []int{-1}},
		{Ifname: "x", Redirect: []netip.Prefix{{}}},
		{Ifname: "x", MultiBuffer: 3},
		{Ifname: "x", MaxChain: 1},
		{Ifname: "x", MaxChain: MaxChainLimit + 1},
		{Ifname: "x", MaxChain: 9, RingSize: 8},
		{Ifname: "x", MaxChain: 9, NumFrames: 16},
		{Ifname: "x", NumFrames: 2, MultiBuffer: MultiBufferOn},
	} {
		if _, err := Open(cfg); !errors.Is(err, frame.ErrInvalidConfig) {
			t.Errorf("Open(%+v) = %v, want frame.ErrInvalidConfig", cfg, err)
		}
	}
}

func TestXDPModeString(t *testing.T) {
	for m, want := range map[Mode]string{ModeAuto: "auto", ModeNative: "native", ModeGeneric: "generic", 9: "Mode(9)"} {
		if m.String() != want {
			t.Errorf("%d: %q, want %q", int(m), m.String(), want)
		}
	}
	for m, want := range map[MultiBuffer]string{MultiBufferAuto: "auto", MultiBufferOn: "on", MultiBufferOff: "off", 9: "MultiBuffer(9)"} {
		if m.String() != want {
			t.Errorf("%d: %q, want %q", int(m), m.String(), want)
		}
	}
}

// TestXSKMaxChainDefault: the default chain takes the largest IP packet
// (an IPv6 header and 65535 bytes of payload behind Ethernet) in frames
// of FrameSize-256 bytes, within the ring and the RX frames.
func TestXSKMaxChainDefault(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want int
	}{
		{Config{Ifname: "x"}, 18},
		{Config{Ifname: "x", FrameSize: 2048}, 37},
		{Config{Ifname: "x", RingSize: 16}, 16},
		{Config{Ifname: "x", NumFrames: 20}, 10},
		{Config{Ifname: "x", MaxChain: 5}, 5},
		{Config{Ifname: "x", NumFrames: 2}, 1}, // and multi-buffer off
	} {
		cfg, err := c.cfg.withDefaults()
		if err != nil || cfg.MaxChain != c.want || (cfg.MultiBuffer == MultiBufferOff) != (c.want < 2) {
			t.Errorf("%+v: MaxChain %d, multi-buffer %v, %v; want %d", c.cfg, cfg.MaxChain, cfg.MultiBuffer, err, c.want)
		}
	}
}

func TestXDPMissingInterface(t *testing.T) {
	ns := netlab.NewT(t, "xsk")
	var err error
	ns.Do(t, func() { _, err = Open(Config{Ifname: "nosuch0"}) })
	if err == nil || !strings.Contains(err.Error(), `"nosuch0"`) {
		t.Fatalf("Open on a missing interface: %v", err)
	}
	t.Log(err)
}

// TestXDPProgram runs the XDP program on crafted packets (BPF_PROG_TEST_RUN,
// rx queue 0, whose socket is registered) and checks its verdicts.
func TestXDPProgram(t *testing.T) {
	n := newXDPNet(t)
	p := n.open(t, Config{Ifname: xdpIfA, Queues: []int{0}, NumFrames: 64, RingSize: 32, Redirect: xdpRedirect})
	const pass, redirect = 2, 4
	src4, src6 := netip.MustParseAddrPort(xdpPeer4+":1000"), netip.MustParseAddrPort("["+xdpPeer6+"]:1000")
	in4, out4 := netip.MustParseAddrPort("198.18.200.9:53"), netip.MustParseAddrPort("198.18.201.9:53")
	in6, out6 := netip.MustParseAddrPort("[2001:2:0:200::9]:53"), netip.MustParseAddrPort("[2001:2:0:201::9]:53")
	udp4 := xdpUDPFrame(n.macA, n.macB, src4, in4, []byte("x"))
	vlan := append(append(append([]byte{}, udp4[:12]...), 0x81, 0, 0, 5), udp4[12:]...)
	ns := xdpUDPFrame(n.macA, n.macB, src6, in6, []byte("xxxxxxxx"))
	ns[xdpEthLen+6], ns[xdpEthLen+40] = xdpICMPv6Proto, 135 // an NS to an address in the prefix
	echo6 := append([]byte{}, ns...)
	echo6[xdpEthLen+40] = 128 // echo request: forwarded traffic
	arp := append(append([]byte{}, udp4[:12]...), 0x08, 0x06)
	arp = append(arp, make([]byte, 28)...)
	for _, c := range []struct {
		name string
		pkt  []byte
		want uint32
	}{
		{"udp4 in prefix", udp4, redirect},
		{"udp4 outside", xdpUDPFrame(n.macA, n.macB, src4, out4, nil), pass},
		{"udp4 to gw", xdpUDPFrame(n.macA, n.macB, src4, netip.MustParseAddrPort(xdpGW4+":53"), nil), pass},
		{"udp6 in prefix", xdpUDPFrame(n.macA, n.macB, src6, in6, nil), redirect},
		{"udp6 outside", xdpUDPFrame(n.macA, n.macB, src6, out6, nil), pass},
		{"icmp6 nd", ns, pass},
		{"icmp6 echo", echo6, redirect},
		{"arp", arp, pass},
		{"vlan", vlan, pass},
		{"truncated ipv4", udp4[:xdpEthLen+19], pass},
		{"truncated ipv6", ns[:xdpEthLen+39], pass},
		{"icmp6 without type", ns[:xdpEthLen+40], pass},
	} {
		got, err := p.prog.asv.Program.Run(&ebpf.RunOptions{Data: c.pkt})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got != c.want {
			t.Errorf("%s: verdict %d, want %d", c.name, got, c.want)
		}
	}
	// SetRedirect replaces the prefixes.
	if err := p.SetRedirect([]netip.Prefix{netip.MustParsePrefix("198.18.201.0/24")}); err != nil {
		t.Fatal(err)
	}
	if got, _ := p.prog.asv.Program.Run(&ebpf.RunOptions{Data: udp4}); got != pass {
		t.Errorf("after SetRedirect, old prefix: verdict %d, want %d", got, pass)
	}
	if got, _ := p.prog.asv.Program.Run(&ebpf.RunOptions{Data: xdpUDPFrame(n.macA, n.macB, src4, out4, nil)}); got != redirect {
		t.Errorf("after SetRedirect, new prefix: verdict %d, want %d", got, redirect)
	}
}

// xdpUDPFrame builds an Ethernet frame from src (MAC srcMAC) to dst with a
// UDP datagram carrying payload, checksums complete.
func xdpUDPFrame(dstMAC, srcMAC net.HardwareAddr, src, dst netip.AddrPort, payload []byte) []byte {
	b := make([]byte, 128+len(payload))
	return b[:xdpPutUDPFrame(b, dstMAC, srcMAC, src, dst, payload)]
}

// xdpPutUDPFrame writes the frame into b and returns its length.
func xdpPutUDPFrame(b []byte, dstMAC, srcMAC net.HardwareAddr, src, dst netip.AddrPort, payload []byte) int {
	ipLen, proto := header.IPv4MinimumSize, header.IPv4ProtocolNumber
	if src.Addr().Is6() {
		ipLen, proto = header.IPv6MinimumSize, header.IPv6ProtocolNumber
	}
	header.Ethernet(b).Encode(&header.EthernetFields{
		SrcAddr: tcpip.LinkAddress(srcMAC), DstAddr: tcpip.LinkAddress(dstMAC), Type: proto})
	ipb := b[header.EthernetMinimumSize:]
	udpLen := header.UDPMinimumSize + len(payload)
	s, d := tcpip.AddrFromSlice(src.Addr().AsSlice()), tcpip.AddrFromSlice(dst.Addr().AsSlice())
	if proto == header.IPv4ProtocolNumber {
		ip := header.IPv4(ipb)
		ip.Encode(&header.IPv4Fields{TotalLength: uint16(ipLen + udpLen), TTL: 64,
			Protocol: uint8(header.UDPProtocolNumber), SrcAddr: s, DstAddr: d})
		ip.SetChecksum(^ip.CalculateChecksum())
	} else {
		header.IPv6(ipb).Encode(&header.IPv6Fields{PayloadLength: uint16(udpLen),
			TransportProtocol: header.UDPProtocolNumber, HopLimit: 64, SrcAddr: s, DstAddr: d})
	}
	udp := header.UDP(ipb[ipLen:])
	udp.Encode(&header.UDPFields{SrcPort: src.Port(), DstPort: dst.Port(), Length: uint16(udpLen)})
	copy(udp.Payload(), payload)
	xsum := header.PseudoHeaderChecksum(header.UDPProtocolNumber, s, d, uint16(udpLen))
	c := ^udp.CalculateChecksum(checksum.Checksum(payload, xsum))
	if c == 0 {
		c = 0xffff
	}
	udp.SetChecksum(c)
	return header.EthernetMinimumSize + ipLen + udpLen
}

// xdpParseUDP returns the destination and payload of a UDP frame.
func xdpParseUDP(frame []byte) (netip.AddrPort, []byte, bool) {
	if len(frame) < header.EthernetMinimumSize {
		return netip.AddrPort{}, nil, false
	}
	eth := header.Ethernet(frame)
	ipb := frame[header.EthernetMinimumSize:]
	var dst netip.Addr
	var l4 []byte
	switch eth.Type() {
	case header.IPv4ProtocolNumber:
		ip := header.IPv4(ipb)
		if !ip.IsValid(len(ipb)) || ip.TransportProtocol() != header.UDPProtocolNumber {
			return netip.AddrPort{}, nil, false
		}
		dst, l4 = netip.AddrFrom4(ip.DestinationAddress().As4()), ip.Payload()
	case header.IPv6ProtocolNumber:
		ip := header.IPv6(ipb)
		if !ip.IsValid(len(ipb)) || ip.TransportProtocol() != header.UDPProtocolNumber {
			return netip.AddrPort{}, nil, false
		}
		dst, l4 = netip.AddrFrom16(ip.DestinationAddress().As16()), ip.Payload()
	default:
		return netip.AddrPort{}, nil, false
	}
	if len(l4) < header.UDPMinimumSize {
		return netip.AddrPort{}, nil, false
	}
	udp := header.UDP(l4)
	return netip.AddrPortFrom(dst, udp.DestinationPort()), udp.Payload(), true
}

// TestXSKReceive: UDP from the peer to the redirect prefixes, over many
// flows, arrives on the sockets intact, IPv4 and IPv6.
func TestXSKReceive(t *testing.T) {
	for _, mode := range []Mode{ModeNative, ModeGeneric} {
		t.Run(mode.String(), func(t *testing.T) {
			n := newXDPNet(t)
			cfg := xdpTestConfig()
			cfg.Mode = mode
			p := n.open(t, cfg)
			n.echo(t) // resolves the peer's neighbours through the kernel
			for _, fam := range []struct {
				name, dst string
			}{{"ipv4", "198.18.200.%d"}, {"ipv6", "2001:2:0:200::%d"}} {
				const flows, perFlow = 16, 64
				var conns []*net.UDPConn
				for f := range flows {
					dst := netip.MustParseAddr(fmt.Sprintf(fam.dst, f+1))
					conns = append(conns, xdpDialUDP(t, n.peer, netip.AddrPortFrom(dst, uint16(xdpUDPPort+f))))
				}
				perQueue := xdpCollect(t, p, conns, perFlow)
				t.Logf("%v %s: %d queues, received per queue %v", p.Mode(), fam.name, len(p.Sockets()), perQueue)
				if len(perQueue) != len(p.Sockets()) {
					t.Logf("(not every queue got a flow)")
				}
			}
			c := xdpDialUDP(t, n.peer, netip.MustParseAddrPort("198.18.200.77:9999"))
			xdpCheckRXAllocs(t, p, func() { c.Write([]byte("allocs")) })
		})
	}
}

// xdpCheckRXAllocs asserts that receive+recycle does not allocate while
// send, called on another goroutine, keeps packets coming; it returns
// how many packets it received.
func xdpCheckRXAllocs(t *testing.T, p *Port, send func()) int {
	t.Helper()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				send()
				time.Sleep(20 * time.Microsecond)
			}
		}
	}()
	bufs, addrs := make([][]byte, 16), make([]uint64, 16)
	socks := p.Sockets()
	got := 0
	allocs := testing.AllocsPerRun(500, func() {
		for _, x := range socks {
			k, m := x.receive(bufs, addrs, 0)
			x.recycle(addrs[:m])
			got += k
		}
		time.Sleep(10 * time.Microsecond)
	})
	close(stop)
	<-done
	if allocs != 0 || got == 0 {
		t.Errorf("receive+recycle: %v allocations per call (%d packets)", allocs, got)
	}
	return got
}

// xdpCollect sends perFlow datagrams on each conn (paced by what has
// arrived) and receives them all from the port's sockets, checking each.
// It returns how many arrived per queue.
func xdpCollect(t *testing.T, p *Port, conns []*net.UDPConn, perFlow int) map[int]int {
	t.Helper()
	total := len(conns) * perFlow
	var got atomic.Int64
	sendErr := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(xdpWait)
		for seq := range perFlow {
			for f, c := range conns {
				if _, err := c.Write([]byte(fmt.Sprintf("xsk flow %d seq %d", f, seq))); err != nil {
					sendErr <- err
					return
				}
			}
			for int64((seq+1)*len(conns))-got.Load() > xdpRing/2 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Microsecond)
			}
		}
		sendErr <- nil
	}()
	seen := make(map[string]bool, total)
	perQueue := map[int]int{}
	bufs, addrs := make([][]byte, 64), make([]uint64, 64)
	deadline := time.Now().Add(xdpWait)
	for len(seen) < total && time.Now().Before(deadline) {
		idle := true
		for _, x := range p.Sockets() {
			k, m := x.receive(bufs, addrs, 0)
			for i := range k {
				xdpCheckRX(t, bufs[i], seen, conns)
			}
			x.recycle(addrs[:m])
			perQueue[x.queueID] += k
			got.Add(int64(k))
			idle = idle && k == 0
		}
		if idle {
			time.Sleep(100 * time.Microsecond)
		}
	}
	if err := <-sendErr; err != nil {
		t.Fatalf("send: %v", err)
	}
	if len(seen) != total {
		for _, x := range p.Sockets() {
			t.Logf("queue %d: %+v", x.queueID, x.Stats())
		}
		t.Fatalf("received %d distinct datagrams, want %d", len(seen), total)
	}
	return perQueue
}

// xdpCheckRX checks a received frame against what the conns sent.
func xdpCheckRX(t *testing.T, frame []byte, seen map[string]bool, conns []*net.UDPConn) {
	t.Helper()
	dst, payload, ok := xdpParseUDP(frame)
	var f, seq int
	if ok {
		_, err := fmt.Sscanf(string(payload), "xsk flow %d seq %d", &f, &seq)
		ok = err == nil && f >= 0 && f < len(conns)
	}
	if !ok || conns[f].RemoteAddr().(*net.UDPAddr).AddrPort() != dst {
		t.Fatalf("unexpected frame (%d bytes) to %v: %q", len(frame), dst, payload)
	}
	if seen[string(payload)] {
		t.Fatalf("duplicate %q", payload)
	}
	seen[string(payload)] = true
}

// TestXDPHostReachable: the kernel keeps answering for veth-a's addresses
// (ARP, ND, UDP, TCP) while the program is attached, and the neighbour
// entries were learnt, not static.
func TestXDPHostReachable(t *testing.T) {
	n := newXDPNet(t)
	n.open(t, xdpTestConfig())
	n.echo(t)
	link := n.peer.LinkT(t, xdpIfB)
	for fam, gw := range map[int]string{netlink.FAMILY_V4: xdpGW4, netlink.FAMILY_V6: xdpGW6} {
		neighs, err := n.peer.Netlink().NeighList(link.Attrs().Index, fam)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, ne := range neighs {
			if ne.IP.Equal(net.ParseIP(gw)) {
				found = true
				if ne.State&(netlink.NUD_PERMANENT|netlink.NUD_NOARP) != 0 || ne.HardwareAddr.String() != n.macA.String() {
					t.Errorf("neighbour %s: state %#x lladdr %v", gw, ne.State, ne.HardwareAddr)
				}
			}
		}
		if !found {
			t.Errorf("no neighbour entry for %s in the peer", gw)
		}
	}
}

// TestXSKTransmit: thousands of frames built in UMEM reach a UDP socket in
// the peer; every frame completes and returns to the free list.
func TestXSKTransmit(t *testing.T) {
	n := newXDPNet(t)
	p := n.open(t, xdpTestConfig())
	dst := netip.MustParseAddrPort(xdpPeer4 + ":9100")
	rcv := xdpListenUDP(t, n.peer, dst)
	const total = 6000
	var got atomic.Int64
	rcvDone := make(chan map[uint32]bool, 1)
	go func() {
		seen := map[uint32]bool{}
		buf := make([]byte, 2048)
		rcv.SetReadDeadline(time.Now().Add(xdpWait))
		for len(seen) < total {
			k, err := rcv.Read(buf)
			if err != nil {
				break
			}
			if k == 8 && binary.BigEndian.Uint32(buf) == 0x78736b21 {
				seen[binary.BigEndian.Uint32(buf[4:])] = true
				got.Store(int64(len(seen)))
			}
		}
		rcvDone <- seen
	}()
	src := netip.MustParseAddrPort(xdpGW4 + ":9200")
	frame := func(b []byte, seq uint32) int {
		var payload [8]byte
		binary.BigEndian.PutUint32(payload[:], 0x78736b21) // "xsk!"
		binary.BigEndian.PutUint32(payload[4:], seq)
		return xdpPutUDPFrame(b, n.macB, n.macA, src, dst, payload[:])
	}
	socks := p.Sockets()
	addrs, lens := make([]uint64, 64), make([]int, 64)
	seq := uint32(0)
	deadline := time.Now().Add(xdpWait)
	for seq < total && time.Now().Before(deadline) {
		for _, x := range socks {
			k := x.alloc(addrs[:min(len(addrs), total-int(seq))])
			for i := range k {
				lens[i] = frame(x.frame(addrs[i]), seq+uint32(i))
			}
			m, err := x.transmit(addrs[:k], lens[:k], nil, false)
			if err != nil {
				t.Fatalf("Transmit: %v", err)
			}
			x.free(addrs[m:k])
			seq += uint32(m)
			x.complete()
		}
		for int64(seq)-got.Load() > 1024 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Microsecond)
		}
	}
	// Every frame completes and the free lists are whole again.
	for _, x := range socks {
		for x.Stats().Completed < x.Stats().TX && time.Now().Before(deadline) {
			if x.complete() == 0 {
				time.Sleep(100 * time.Microsecond)
			}
		}
		s := x.Stats()
		t.Logf("queue %d: %+v; %d frames per kick at most (%.1f per kick)", x.queueID, s, x.TxBudget(), float64(s.TX)/float64(max(s.Kicks, 1)))
		if s.Completed != s.TX || x.txFreeCount() != xdpFrames/2 || s.BadFrames != 0 || s.KickErrors != 0 {
			t.Errorf("queue %d: tx %d completed %d, %d of %d frames free, %d bad frames",
				x.queueID, s.TX, s.Completed, x.txFreeCount(), xdpFrames/2, s.BadFrames)
		}
	}
	seen := <-rcvDone
	if seq != total || len(seen) != total {
		t.Fatalf("transmitted %d, peer received %d distinct of %d", seq, len(seen), total)
	}
	xdpCheckAllocs(t, socks[0], frame)
}

// xdpCheckAllocs asserts that the data path does not allocate.
func xdpCheckAllocs(t *testing.T, x *Socket, frame func([]byte, uint32) int) {
	addrs, lens := make([]uint64, 16), make([]int, 16)
	// Write a valid packet into every TX frame first.
	owned := make([]uint64, x.txFreeCount())
	owned = owned[:x.alloc(owned)]
	size := 0
	for _, a := range owned {
		size = frame(x.frame(a), 1<<31)
	}
	x.free(owned)
	txAllocs := testing.AllocsPerRun(200, func() {
		k := x.alloc(addrs)
		for i := range k {
			lens[i] = size
		}
		m, _ := x.transmit(addrs[:k], lens[:k], nil, false)
		x.free(addrs[m:k])
		x.complete()
	})
	waitAllocs := testing.AllocsPerRun(50, func() { x.waitCompletions(time.Microsecond) })
	if txAllocs != 0 || waitAllocs != 0 {
		t.Errorf("allocations per call: Alloc+Transmit+Complete %v, Wait %v", txAllocs, waitAllocs)
	}
}

// TestXDPAlreadyAttached: another XDP program makes Open fail clearly,
// and stays attached.
func TestXDPAlreadyAttached(t *testing.T) {
	n := newXDPNet(t)
	other, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "other_pass", Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, xdpPass), asm.Return()},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	n.gw.Do(t, func() {
		err = netlink.LinkSetXdpFdWithFlags(n.gw.LinkT(t, xdpIfA), other.FD(), unix.XDP_FLAGS_SKB_MODE)
	})
	if err != nil {
		t.Fatalf("attach the other program: %v", err)
	}
	_, id := n.xdpAttached(t)
	for _, mode := range []Mode{ModeAuto, ModeNative, ModeGeneric} {
		cfg := xdpTestConfig()
		cfg.Mode = mode
		_, err := n.tryOpen(t, cfg)
		if !errors.Is(err, ErrAttached) {
			t.Fatalf("Open (%v) with another program attached: %v", mode, err)
		}
		t.Logf("%v: %v", mode, err)
	}
	// The NOEXIST guard itself (the race Open's first check cannot see).
	prog, err := newXDPProgram(1)
	if err != nil {
		t.Fatal(err)
	}
	defer prog.close()
	for _, mode := range []Mode{ModeNative, ModeGeneric} {
		n.gw.Do(t, func() { _, err = prog.attach(n.gw.LinkT(t, xdpIfA), mode) })
		if !errors.Is(err, ErrAttached) {
			t.Errorf("attach (%v) over another program: %v", mode, err)
		}
		if err := prog.detach(); err != nil {
			t.Errorf("detach (%v) with another program attached: %v", mode, err)
		}
	}
	if attached, now := n.xdpAttached(t); !attached || now != id {
		t.Fatalf("the other program (ID %d) was removed or replaced: attached %v, ID %d", id, attached, now)
	}
}

// TestXDPCloseReopen: Close detaches (from outside the netns too), is
// idempotent, and the interface can be opened again, in every mode.
func TestXDPCloseReopen(t *testing.T) {
	n := newXDPNet(t)
	for _, mode := range []Mode{ModeAuto, ModeNative, ModeGeneric, ModeAuto} {
		cfg := xdpTestConfig()
		cfg.Mode = mode
		start := time.Now()
		p, err := n.tryOpen(t, cfg)
		if err != nil {
			t.Fatalf("Open (%v): %v", mode, err)
		}
		t.Logf("Open took %v", time.Since(start))
		attached, id := n.xdpAttached(t)
		if !attached || id != uint32(p.prog.id) {
			t.Fatalf("%v: our program (ID %d) is not attached: %v %d", mode, p.prog.id, attached, id)
		}
		t.Logf("asked %v, got %v, %d queues", mode, p.Mode(), len(p.Sockets()))
		if mode != ModeAuto && p.Mode() != mode {
			t.Errorf("asked %v, got %v", mode, p.Mode())
		}
		if err := p.Close(); err != nil { // not in the gw netns
			t.Fatalf("Close: %v", err)
		}
		if err := p.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if attached, id := n.xdpAttached(t); attached {
			t.Fatalf("%v: XDP program %d still attached after Close", mode, id)
		}
	}
}

// TestXSKAfterClose: every method is safe after Close.
func TestXSKAfterClose(t *testing.T) {
	n := newXDPNet(t)
	p, err := n.tryOpen(t, xdpTestConfig())
	if err != nil {
		t.Fatal(err)
	}
	x := p.Sockets()[0]
	addrs := make([]uint64, 4)
	k := x.alloc(addrs)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if m, err := x.transmit(addrs[:k], []int{60, 60, 60, 60}, nil, false); m != 0 || !errors.Is(err, ErrClosed) || !errors.Is(err, net.ErrClosed) {
		t.Errorf("Transmit after Close: %d, %v", m, err)
	}
	rn, rm := x.receive(make([][]byte, 4), addrs, 0)
	if x.alloc(addrs) != 0 || x.complete() != 0 || rn != 0 || rm != 0 || x.frame(0) != nil || x.fd != -1 || x.txFreeCount() != 0 {
		t.Error("a method did something after Close")
	}
	x.recycle(addrs)
	x.free(addrs)
	if err := x.waitRX(); !errors.Is(err, ErrClosed) {
		t.Errorf("waitRX after Close: %v", err)
	}
	if err := x.waitCompletions(time.Millisecond); !errors.Is(err, ErrClosed) {
		t.Errorf("waitCompletions after Close: %v", err)
	}
	_ = x.Stats()
	if err := p.SetRedirect(nil); !errors.Is(err, ErrClosed) {
		t.Errorf("SetRedirect after Close: %v", err)
	}
}

// TestXSKBadFrames: addresses that are not the caller's are refused and
// counted, never corrupting the rings.
func TestXSKBadFrames(t *testing.T) {
	n := newXDPNet(t)
	p := n.open(t, xdpTestConfig())
	x := p.Sockets()[0]
	fs := uint64(x.FrameSize())
	for _, c := range []struct {
		addr uint64
		len  int
	}{
		{0, 60},                  // an RX frame
		{xdpFrames * fs, 60},     // past the UMEM
		{xdpFrames/2*fs + 1, 60}, // not frame-aligned
		{xdpFrames / 2 * fs, 60}, // a free TX frame, not allocated
	} {
		if m, err := x.transmit([]uint64{c.addr}, []int{c.len}, nil, false); m != 0 || !errors.Is(err, ErrBadFrame) {
			t.Errorf("Transmit(%#x): %d, %v", c.addr, m, err)
		}
	}
	var a [1]uint64
	x.alloc(a[:])
	for _, l := range []int{0, -1, x.MaxTXFrame() + 1} {
		if m, err := x.transmit(a[:], []int{l}, nil, false); m != 0 || !errors.Is(err, ErrBadFrame) {
			t.Errorf("Transmit length %d: %d, %v", l, m, err)
		}
	}
	x.free(a[:])
	x.free(a[:])                 // twice: refused
	x.recycle([]uint64{0, 4096}) // RX frames the kernel owns: refused
	if s := x.Stats(); s.BadFrames != 10 || x.txFreeCount() != xdpFrames/2 {
		t.Errorf("bad frames %d, free %d", s.BadFrames, x.txFreeCount())
	}
	if x.frame(xdpFrames*fs) != nil || len(x.frame(fs)) != x.MaxTXFrame() {
		t.Error("Frame bounds")
	}
}

// TestXDPZeroCopyRefused: veth has no zero-copy; the error says so,
// naming the driver, and nothing stays attached.
func TestXDPZeroCopyRefused(t *testing.T) {
	n := newXDPNet(t)
	cfg := xdpTestConfig()
	cfg.ZeroCopy = true
	p, err := n.tryOpen(t, cfg)
	if err == nil {
		p.Close()
		t.Skip("this veth accepted zero-copy")
	}
	if !errors.Is(err, ErrZeroCopy) || !strings.Contains(err.Error(), "driver veth") {
		t.Fatalf("Open zero-copy on veth: %v, want ErrZeroCopy naming the driver (veth)", err)
	}
	t.Log(err)
	if attached, id := n.xdpAttached(t); attached {
		t.Fatalf("XDP program %d left attached", id)
	}
}

// TestXDPDetachOnKill: a gateway killed with SIGKILL leaves no XDP
// program behind, because the program hangs on a BPF link that the
// kernel closes with the process.
func TestXDPDetachOnKill(t *testing.T) {
	if os.Getenv(xdpHoldEnv) == "1" {
		xdpHold() // the child: never returns
	}
	n := newXDPNet(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestXDPDetachOnKill$")
	cmd.Env = append(os.Environ(), xdpHoldEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.gw.Start(cmd); err != nil { // the child lives in gw
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "attached\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child: %q, %v", line, err)
	}
	if attached, _ := n.xdpAttached(t); !attached {
		t.Fatal("the child's program is not attached")
	}
	cmd.Process.Kill()
	cmd.Wait()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if attached, id := n.xdpAttached(t); !attached {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("program %d still attached after the process was killed", id)
		}
	}
}

const xdpHoldEnv = "GSOPLANE_TEST_XDP_HOLD"

// xdpHold opens the AF_XDP port in its namespace, says so and waits to
// be killed.
func xdpHold() {
	if _, err := Open(xdpTestConfig()); err != nil {
		fmt.Println("Open:", err)
		os.Exit(1)
	}
	fmt.Println("attached")
	select {}
}
