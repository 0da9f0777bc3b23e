//go:build linux

package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
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

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// The kernel as the oracle for UDP-tunnel super-packets (Linux 6.17): a
// TAP device in the lab's gw namespace has the 24-byte virtio-net header
// and the tunnel offloads, so the kernel takes VXLAN and Geneve
// super-packets written to it whole (virtio_net_hdr_tnl_to_skb) and,
// forwarding them out of the veth whose offloads are off, cuts them with
// skb_udp_tunnel_segment. Split must produce the same packets, outer and
// inner headers and checksums included.
//
// A TAP, not a TUN: the kernel wants an Ethernet header's 14 bytes before
// outer_th_offset (outer_th_offset >= ETH_HLEN + the minimal outer IP
// header), which a TUN's IP packets do not have, so Linux 6.18 refuses a
// tunnel super-packet written to a TUN whose outer header has the minimal
// size (TestKernelTunnelTUNWrite). What a TUN reads, the kernel's own
// super-packets, has outer_th_offset 20 or 40.

// The tunnel devices' names, in gw.
const (
	labTunnelTAP = "gtap"
	labTunnelTUN = "gtnl"
)

var labTAPMAC = []byte{0x02, 0x00, 0xc6, 0x12, 0xfc, 0x01}

// TUNSETOFFLOAD flags of UDP-tunnel GSO (include/uapi/linux/if_tun.h).
const (
	tunFUDPTunnel     = 0x80
	tunFUDPTunnelCsum = 0x100
	tunFUSO4          = 0x20
	tunFUSO6          = 0x40
	tunnelOffloads    = unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6 | unix.TUN_F_TSO_ECN | tunFUSO4 | tunFUSO6 | tunFUDPTunnel | tunFUDPTunnelCsum
)

// openTunnelDev adds a TUN or TAP device (mode) with the tunnel header
// and offloads (and USO, which inner UDP needs) to ns and returns its fd.
func openTunnelDev(t *testing.T, ns *netlab.NS, name string, mode uint16) int {
	t.Helper()
	netlab.SkipWithout(t, netlab.VirtioNetTunnel)
	fd := -1
	err := ns.Run(func() error {
		var err error
		if fd, err = openTUN(name, mode, HeaderSizeTunnel); err != nil {
			return err
		}
		return os.NewSyscallError("ioctl TUNSETOFFLOAD", unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, tunnelOffloads))
	})
	if fd >= 0 {
		t.Cleanup(func() { unix.Close(fd) })
	}
	if err != nil {
		t.Fatalf("%s in %s: %v", name, ns.Name, err)
	}
	nl, link := ns.Netlink(), ns.LinkT(t, name)
	if mode == unix.IFF_TAP {
		netlab.Must(t, nl.LinkSetHardwareAddr(link, labTAPMAC))
	}
	netlab.Must(t, nl.LinkSetMTU(link, labMTU))
	netlab.Must(t, ns.LinkUp(name))
	return fd
}

// exchangeTAP is exchange through the tunnel TAP: pkt goes out in an
// Ethernet frame to the TAP's address, the offsets of h moved by the
// Ethernet header.
func (lab *kernelLab) exchangeTAP(t *testing.T, fd int, pkt []byte, h Header) ([][]byte, error) {
	t.Helper()
	frame := make([]byte, header.EthernetMinimumSize+len(pkt))
	copy(frame, labTAPMAC)
	copy(frame[6:], []byte{0x02, 0, 0, 0, 0, 0x99})
	ethType := header.IPv4ProtocolNumber
	if len(pkt) > 0 && pkt[0]>>4 == 6 {
		ethType = header.IPv6ProtocolNumber
	}
	binary.BigEndian.PutUint16(frame[12:], uint16(ethType))
	copy(frame[header.EthernetMinimumSize:], pkt)
	const eth = header.EthernetMinimumSize
	h.OuterTH, h.InnerNH, h.CsumStart, h.HdrLen = h.OuterTH+eth, h.InnerNH+eth, h.CsumStart+eth, h.HdrLen+eth
	return lab.exchangeOn(t, fd, HeaderSizeTunnel, frame, &h)
}

// tunnelCases are the differential's tunnel packets: VXLAN and Geneve,
// outer and inner IPv4 and IPv6, inner TSO and USO, with and without the
// outer checksum, and the edges of cutting.
func tunnelCases() []struct {
	name string
	spec tunnelSpec
} {
	const tcp, udp = uint8(header.TCPProtocolNumber), uint8(header.UDPProtocolNumber)
	type tc = struct {
		name string
		spec tunnelSpec
	}
	var cases []tc
	for _, outer6 := range []bool{false, true} {
		for _, geneve := range []bool{false, true} {
			for _, csum := range []bool{false, true} {
				for _, in := range []struct {
					name string
					s    superSpec
				}{
					{"tcp4", superSpec{proto: tcp, gso: GSOTCPv4, mss: 1398, payload: 1398*9 + 321, needsCsum: true, df: true, id: 0x1000, seq: 1000, tcpFlags: flagACK | flagPSH}},
					{"tcp6", superSpec{v6: true, proto: tcp, gso: GSOTCPv6, mss: 1378, payload: 1378*7 + 5, needsCsum: true, seq: 77, tcpFlags: flagACK}},
					{"uso4", superSpec{proto: udp, gso: GSOUDPL4, mss: 1400, payload: 1400*5 + 99, needsCsum: true, id: 0x2000}},
					{"uso6", superSpec{v6: true, proto: udp, gso: GSOUDPL4, mss: 1380, payload: 1380 * 4, needsCsum: true}},
				} {
					s := tunnelSpec{outer6: outer6, geneve: geneve, csum: csum, outerID: 0x4000, inner: in.s}
					s.inner.seed = uint64(len(cases) + 1)
					cases = append(cases, tc{fmt.Sprintf("%s/%s/%s/csum-%v", tunnelName(s), ipName(outer6), in.name, csum), s})
				}
			}
		}
	}
	tcp4 := tunnelSpec{csum: true, outerID: 0xfffe, inner: superSpec{proto: tcp, gso: GSOTCPv4, mss: 1398, payload: 50000, needsCsum: true, df: true, id: 0xfffd, seq: 0xffffff00, tcpFlags: flagACK, seed: 99}}
	with := func(s tunnelSpec, f func(*tunnelSpec)) tunnelSpec { f(&s); return s }
	return append(cases,
		tc{"vxlan/ipv4/tcp4/64k-ids-wrap", tcp4},
		tc{"vxlan/ipv4/tcp4/mss536", with(tcp4, func(s *tunnelSpec) { s.inner.mss = 536 })},
		tc{"vxlan/ipv4/tcp4/last-1byte-fin", with(tcp4, func(s *tunnelSpec) { s.inner.payload = 1398*3 + 1; s.inner.tcpFlags |= flagFIN | flagPSH })},
		tc{"vxlan/ipv4/tcp4/ecn-cwr", with(tcp4, func(s *tunnelSpec) { s.inner.gso |= GSOECN; s.inner.tcpFlags |= flagCWR | flagECE })},
		tc{"vxlan/ipv4/tcp4/tcp-options", with(tcp4, func(s *tunnelSpec) { s.inner.tcpOpts = []byte{1, 1, 8, 10, 1, 2, 3, 4, 5, 6, 7, 8} })},
		tc{"vxlan/ipv4/tcp4/jumbo", with(tcp4, func(s *tunnelSpec) { s.inner.mss = 8900 })},
		tc{"vxlan/ipv4/tcp4/payload-le-mss", with(tcp4, func(s *tunnelSpec) { s.inner.payload = 1000 })},
		tc{"vxlan/ipv4/tcp4/not-gso", with(tcp4, func(s *tunnelSpec) { s.inner.payload, s.plain, s.csum = 1000, true, false })},
		tc{"vxlan/ipv6/uso6/not-gso", with(tcp4, func(s *tunnelSpec) {
			s.outer6, s.plain, s.csum = true, true, false
			s.inner = superSpec{v6: true, proto: udp, gso: GSOUDPL4, mss: 1300, payload: 1200, needsCsum: true, seed: 8}
		})},
		tc{"geneve-opts/ipv6/tcp6", with(tcp4, func(s *tunnelSpec) {
			s.outer6, s.geneve, s.geneveOpts = true, true, 12
			s.inner = superSpec{v6: true, proto: tcp, gso: GSOTCPv6, mss: 1300, payload: 9000, needsCsum: true, seq: 1, tcpFlags: flagACK, seed: 7}
		})},
	)
}

func TestKernelTunnelDifferential(t *testing.T) {
	lab := newKernelLab(t)
	fd := openTunnelDev(t, lab.gwNS, labTunnelTAP, unix.IFF_TAP)
	for _, c := range tunnelCases() {
		t.Run(c.name, func(t *testing.T) {
			pkt, h := buildTunnel(c.spec)
			kernel, werr := lab.exchangeTAP(t, fd, pkt, h)
			if werr != nil {
				t.Fatalf("the kernel refused the packet: write to TUN: %v", werr)
			}
			t.Logf("kernel: %d packets, sizes %v", len(kernel), sizesOf(kernel))
			_, ours, err := splitFresh(&Segmenter{}, pkt, h)
			if err != nil {
				t.Fatalf("%v\n(the kernel accepted it and emitted %d packets)", err, len(kernel))
			}
			whole := c.spec
			whole.plain = false
			_, th := buildTunnel(whole)
			compareTunnel(t, kernel, ours, int(th.InnerNH), c.spec.csum)
		})
	}
}

// compareTunnel compares the kernel's segments of a tunnel packet with
// ours (which the kernel's forwarding gave one TTL less).
func compareTunnel(t *testing.T, kernel, ours [][]byte, inner int, csum bool) {
	t.Helper()
	if len(kernel) != len(ours) {
		t.Errorf("segment count: kernel %d, ours %d", len(kernel), len(ours))
	}
	for i, k := range kernel {
		if len(k) <= inner {
			t.Fatalf("kernel segment %d: %d bytes", i, len(k))
		}
		if err := checkKernelL4(k[inner:], false); err != nil {
			t.Errorf("kernel segment %d, inner packet: %v", i, err)
		}
		if err := checkKernelL4(k, false); csum && err != nil {
			if len(kernel) > 1 {
				t.Errorf("kernel segment %d, outer UDP: %v", i, err)
			}
			// Not cut: the kernel completes the inner checksum only and
			// sends the outer one partial; Split completes both.
			k = bytes.Clone(k)
			o := header.IPv4MinimumSize
			if k[0]>>4 == 6 {
				o = header.IPv6MinimumSize
			}
			complete(k[o+pbUDPCsumOff:], sum(k[o:], 0))
			t.Logf("the kernel sent the outer UDP checksum partial (%v); compared with it completed", err)
		}
		if i >= len(ours) {
			continue
		}
		want := forwarded(ours[i])
		d := diffPackets(k, want)
		if len(d) > 0 {
			d = append(d, diffPackets(k[inner:], want[inner:])...)
			t.Errorf("segment %d/%d differs (kernel vs ours, ours after TTL-1; outer, then inner):\n\t%s", i, len(ours), strings.Join(d, "\n\t"))
		}
	}
}

// TestKernelTunnelRejects: what the kernel refuses (the TUN write fails,
// or nothing leaves), Validate refuses.
func TestKernelTunnelRejects(t *testing.T) {
	lab := newKernelLab(t)
	fd := openTunnelDev(t, lab.gwNS, labTunnelTAP, unix.IFF_TAP)
	const tcp, udp = uint8(header.TCPProtocolNumber), uint8(header.UDPProtocolNumber)
	tcp4 := tunnelSpec{csum: true, outerID: 1, inner: superSpec{proto: tcp, gso: GSOTCPv4, mss: 1398, payload: 5000, needsCsum: true, df: true, id: 1, seq: 1, seed: 1}}
	uso6 := tunnelSpec{outer6: true, inner: superSpec{v6: true, proto: udp, gso: GSOUDPL4, mss: 1300, payload: 5000, needsCsum: true, seed: 2}}
	set := func(f func(h *Header)) func([]byte, *Header) []byte {
		return func(p []byte, h *Header) []byte { f(h); return p }
	}
	cases := []struct {
		name string
		spec tunnelSpec
		mut  func([]byte, *Header) []byte
	}{
		{"both-tunnel-flags", tcp4, set(func(h *Header) { h.GSOType |= GSOUDPTunnelIPv6 })},
		{"inner-none", tcp4, set(func(h *Header) { h.GSOType = GSOUDPTunnelIPv4 })},
		{"inner-ufo", tcp4, set(func(h *Header) { h.GSOType = GSOUDPTunnelIPv4 | GSOUDP })},
		{"inner-unknown", tcp4, set(func(h *Header) { h.GSOType = GSOUDPTunnelIPv4 | 2 })},
		{"without-needs-csum", tcp4, set(func(h *Header) { h.Flags &^= FlagNeedsCsum })},
		{"gso-size-0", tcp4, set(func(h *Header) { h.GSOSize = 0 })},
		{"inner-nh-inside-outer-udp", tcp4, set(func(h *Header) { h.InnerNH = h.OuterTH + 4 })},
		{"csum-start-inside-inner-ip", tcp4, set(func(h *Header) { h.CsumStart = h.InnerNH + 10 })},
		{"csum-start-inside-inner-ipv6", uso6, set(func(h *Header) { h.CsumStart = h.InnerNH + 30 })},
		{"outer-th-zero", tcp4, set(func(h *Header) { h.OuterTH = 0 })},
		{"inner-csum-offset-6", tcp4, set(func(h *Header) { h.CsumOffset = 6 })},
		{"inner-tcpv6-type-ipv4-packet", tcp4, set(func(h *Header) { h.GSOType = GSOUDPTunnelIPv4 | GSOTCPv6 })},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pkt, h := buildTunnel(c.spec)
			pkt = c.mut(pkt, &h)
			kernel, werr := lab.exchangeTAP(t, fd, pkt, h)
			_, verr := Validate(pkt, h)
			checkRejected(t, kernel, werr, verr)
		})
	}
	// The tunnel fields in a header of the plain sizes are not there: the
	// kernel reads a tunnel flag without them as a bad gso_type.
	t.Run("tunnel-flag-in-10-byte-header", func(t *testing.T) {
		pkt, h := buildTunnel(tcp4)
		kernel, werr := lab.exchange(t, pkt, &h)
		var b [HeaderSize]byte
		netlab.Must(t, h.Encode(b[:], HeaderSize))
		h10, err := DecodeHeader(b[:], HeaderSize)
		netlab.Must(t, err)
		_, verr := Validate(pkt, h10)
		t.Logf("kernel: %s; Validate: %v", kernelReaction(werr, kernel), verr)
		if werr == nil && len(kernel) > 0 {
			t.Errorf("the kernel did not reject it")
		}
		if !errors.Is(verr, ErrInvalid) {
			t.Errorf("Validate accepted a tunnel flag without tunnel offsets (err %v)", verr)
		}
	})
}

// TestKernelTunnelTUNWrite records what the kernel makes of a tunnel
// super-packet written to a TUN (no Ethernet header) with a minimal outer
// IPv4 header, outer_th_offset 20, below the ETH_HLEN + 20 it asks for
// (Linux 6.18: EINVAL), and checks that Validate takes it: it is what a
// TUN reads.
func TestKernelTunnelTUNWrite(t *testing.T) {
	lab := newKernelLab(t)
	fd := openTunnelDev(t, lab.gwNS, labTunnelTUN, unix.IFF_TUN)
	pkt, h := buildTunnel(tunnelSpec{csum: true, outerID: 9, inner: superSpec{proto: uint8(header.TCPProtocolNumber), gso: GSOTCPv4, mss: 1398, payload: 5000, needsCsum: true, df: true, seed: 3}})
	kernel, werr := lab.exchangeOn(t, fd, HeaderSizeTunnel, pkt, &h)
	_, verr := Validate(pkt, h)
	t.Logf("outer_th_offset %d: kernel %s; Validate: %v", h.OuterTH, kernelReaction(werr, kernel), verr)
	if verr != nil {
		t.Errorf("Validate refused a tunnel packet as a TUN reads it: %v", verr)
	}
}

// TestKernelTunnelDevices: what real VXLAN and Geneve devices send
// through a TUN with the tunnel offloads. In namespace kt-ovl, tunnel
// devices (outer IPv4 and IPv6, outer checksums on and off) have their
// underlay routed into the TUN; a UDP socket sends a UDP_SEGMENT
// super-packet over each, inner IPv4 and IPv6. The TUN must hand it over
// whole with the tunnel header, Validate must accept it as read, and the
// lab's TAP kernel must cut it as Split does.
func TestKernelTunnelDevices(t *testing.T) {
	lab := newKernelLab(t)
	tap := openTunnelDev(t, lab.gwNS, labTunnelTAP, unix.IFF_TAP)
	ovl := netlab.NewT(t, "kt-ovl")
	writeSysctls(t, ovl, "net/ipv6/conf/all/accept_dad", "0", "net/ipv6/conf/default/accept_dad", "0")
	tun := openTunnelDev(t, ovl, "otun", unix.IFF_TUN)
	for _, step := range []func() error{
		func() error { return ovl.AddAddr("otun", "198.18.1.1/24") },
		func() error { return ovl.AddAddr("otun", "2001:2:0:1::1/64") },
		func() error { return ovl.AddRoute("198.19.0.0/16", "otun", "") },
		func() error { return ovl.AddRoute("2001:2:0:2::/64", "otun", "") },
	} {
		netlab.Must(t, step())
	}
	ip := net.ParseIP
	local4, local6 := ip("198.18.1.1"), ip("2001:2:0:1::1")
	devs := []netlink.Link{
		&netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: "vx4"}, VxlanId: 41, SrcAddr: local4, Group: ip("198.19.1.1"), Port: vxlanPort},
		&netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: "vx4c"}, VxlanId: 42, SrcAddr: local4, Group: ip("198.19.1.1"), Port: vxlanPort, UDPCSum: true},
		&netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: "vx6"}, VxlanId: 43, SrcAddr: local6, Group: ip("2001:2:0:2::1"), Port: vxlanPort},
		&netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: "vx6z"}, VxlanId: 44, SrcAddr: local6, Group: ip("2001:2:0:2::1"), Port: vxlanPort, UDP6ZeroCSumTx: true},
		&netlink.Geneve{LinkAttrs: netlink.LinkAttrs{Name: "gn4"}, ID: 51, Remote: ip("198.19.1.2"), Dport: genevePort},
		&netlink.Geneve{LinkAttrs: netlink.LinkAttrs{Name: "gn4c"}, ID: 52, Remote: ip("198.19.1.3"), Dport: genevePort, UdpCsum: 1},
		&netlink.Geneve{LinkAttrs: netlink.LinkAttrs{Name: "gn6"}, ID: 53, Remote: ip("2001:2:0:2::2"), Dport: genevePort},
	}
	for i, dev := range devs {
		name := dev.Attrs().Name
		if err := ovl.Netlink().LinkAdd(dev); errors.Is(err, unix.EOPNOTSUPP) {
			t.Run(name, func(t *testing.T) { t.Skipf("this kernel has no %s devices: %v", dev.Type(), err) })
			continue
		} else if err != nil {
			t.Fatalf("add %s: %v", name, err)
		}
		netlab.Must(t, ovl.LinkUp(name))
		for _, v6 := range []bool{false, true} {
			self, peer := overlayAddrs(i, v6)
			netlab.Must(t, ovl.AddAddr(name, self))
			permanentNeigh(t, ovl, name, peer, "02:00:00:00:01:02")
			t.Run(fmt.Sprintf("%s/inner-%s", name, ipName(v6)), func(t *testing.T) {
				pkt, h := sendOverTunnel(t, ovl, tun, peer, v6)
				l, ours, err := splitFresh(&Segmenter{}, pkt, h)
				if err != nil {
					t.Fatalf("Validate refused what the kernel sent: %v (header %+v)", err, h)
				}
				kernel, werr := lab.exchangeTAP(t, tap, pkt, h)
				if werr != nil {
					t.Fatalf("the TAP refused the packet its TUN sibling gave: %v", werr)
				}
				t.Logf("header %+v: %d segments, kernel %d", h, len(ours), len(kernel))
				compareTunnel(t, kernel, ours, l.inner, h.Flags&FlagUDPTunnelCsum != 0)
			})
		}
	}
}

// overlayAddrs are the address (CIDR) of tunnel device i and its peer's.
func overlayAddrs(i int, v6 bool) (self, peer string) {
	if v6 {
		return fmt.Sprintf("2001:2:0:%x::1/64", 0x100+i), fmt.Sprintf("2001:2:0:%x::2", 0x100+i)
	}
	return fmt.Sprintf("198.18.%d.1/24", 100+i), fmt.Sprintf("198.18.%d.2", 100+i)
}

// sendOverTunnel sends a UDP_SEGMENT super-packet from ns to peer and
// returns the tunnel super-packet the TUN reads, and its header.
func sendOverTunnel(t *testing.T, ns *netlab.NS, tun int, peer string, v6 bool) ([]byte, Header) {
	t.Helper()
	a := netip.MustParseAddr(peer)
	family, sa := unix.AF_INET6, unix.Sockaddr(&unix.SockaddrInet6{Port: 9999, Addr: a.As16()})
	if !v6 {
		family, sa = unix.AF_INET, &unix.SockaddrInet4{Port: 9999, Addr: a.As4()}
	}
	fd := ns.SocketT(t, family, unix.SOCK_DGRAM)
	netlab.Must(t, unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_SEGMENT, 1300))
	payload := make([]byte, 1300*12+77)
	fillPayload(payload, 5)
	netlab.Must(t, unix.Sendto(fd, payload, 0, sa))
	buf := make([]byte, 1<<17)
	var others []string
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		pfd := []unix.PollFd{{Fd: int32(tun), Events: unix.POLLIN}}
		if n, _ := unix.Poll(pfd, 100); n <= 0 {
			continue
		}
		n, err := unix.Read(tun, buf)
		netlab.Must(t, err)
		h, err := DecodeHeader(buf[:n], HeaderSizeTunnel)
		netlab.Must(t, err)
		if h.GSOType&gsoTunnel == 0 {
			others = append(others, fmt.Sprintf("%d bytes, %v", n-HeaderSizeTunnel, h.GSOType))
			continue
		}
		return bytes.Clone(buf[HeaderSizeTunnel:n]), h
	}
	t.Fatalf("no tunnel super-packet from the TUN; other packets: %v", others)
	return nil, Header{}
}
