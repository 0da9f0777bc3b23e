package xsk

// The lab of the XDP program's tests (prog_*_test.go): a namespace pair
// joined by a veth with four queues, a port on one end, and frames built
// with gVisor's header encoders.

import (
	"net"
	"net/netip"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

const (
	progIfA, progIfB = "pv-a", "pv-b"
	progQueues       = 4 // RX queues of each veth end
	progNIC4         = "198.18.100.1"
	progPeer4        = "198.18.100.2"
	progNIC6         = "2001:2:0:100::1"
	progPeer6        = "2001:2:0:100::2"
)

// The veth ends' MAC addresses (locally administered, unicast).
var (
	progMACA = net.HardwareAddr{0x02, 0x00, 0x5e, 0x00, 0x53, 0x0a}
	progMACB = net.HardwareAddr{0x02, 0x00, 0x5e, 0x00, 0x53, 0x0b}
)

// Endpoints of test frames: from the peer to the redirect prefixes.
var (
	progSrc4 = netip.MustParseAddrPort(progPeer4 + ":1000")
	progSrc6 = netip.MustParseAddrPort("[" + progPeer6 + "]:1000")
	progDst4 = netip.MustParseAddrPort("198.18.200.9:53")
	progDst6 = netip.MustParseAddrPort("[2001:2:0:200::9]:53")
)

// progRedirect are the prefixes the tests redirect.
var progRedirect = []netip.Prefix{netip.MustParsePrefix("198.18.200.0/24"), netip.MustParsePrefix("2001:2:0:200::/64")}

// progLab is the gateway namespace (gw, with progIfA) and its peer.
type progLab struct {
	gw, peer   *netlab.NS
	macA, macB net.HardwareAddr
	ifindexA   int
}

// newProgLab builds the two namespaces and the veth pair with addresses;
// the peer routes the redirect prefixes through progIfA. Everything goes
// in t.Cleanup. It skips unless root.
func newProgLab(t testing.TB) *progLab {
	t.Helper()
	l := &progLab{gw: netlab.NewT(t, "xdpprog"), peer: netlab.NewT(t, "xdpprog")}
	for _, err := range []error{
		netlab.AddVeth(l.gw, progIfA, l.peer, progIfB, progQueues),
		l.gw.AddAddr(progIfA, progNIC4+"/24"),
		l.gw.AddAddr(progIfA, progNIC6+"/64"),
		l.peer.AddAddr(progIfB, progPeer4+"/24"),
		l.peer.AddAddr(progIfB, progPeer6+"/64"),
		l.peer.AddRoute(progRedirect[0].String(), progIfB, progNIC4),
		l.peer.AddRoute(progRedirect[1].String(), progIfB, progNIC6),
		// A veth hands partial checksums to its peer in memory, which
		// AF_XDP does not see: the peer checksums in software.
		l.peer.SetFeatures(progIfB, map[string]bool{"tx": false}),
	} {
		netlab.Must(t, err)
	}
	// Fixed MAC addresses, so that the fuzz corpus can name them.
	a, b := l.gw.LinkT(t, progIfA), l.peer.LinkT(t, progIfB)
	netlab.Must(t, l.gw.Netlink().LinkSetHardwareAddr(a, progMACA))
	netlab.Must(t, l.peer.Netlink().LinkSetHardwareAddr(b, progMACB))
	l.macA, l.macB, l.ifindexA = progMACA, progMACB, a.Attrs().Index
	return l
}

// open opens a port on progIfA, closed in t.Cleanup.
func (l *progLab) open(t testing.TB, cfg Config) *Port {
	t.Helper()
	p, err := l.tryOpen(t, cfg)
	netlab.Must(t, err)
	return p
}

// tryOpen opens a port on progIfA and returns the error; a port it did
// open is closed in t.Cleanup.
func (l *progLab) tryOpen(t testing.TB, cfg Config) (*Port, error) {
	t.Helper()
	cfg.Ifname = progIfA
	var p *Port
	var err error
	l.gw.Do(t, func() { p, err = Open(cfg) })
	if err == nil {
		t.Cleanup(func() {
			if err := p.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	return p, err
}

// progUDP builds an Ethernet frame carrying a UDP datagram from src to
// dst with hop limit ttl and payload, checksums complete.
func progUDP(dstMAC, srcMAC net.HardwareAddr, src, dst netip.AddrPort, ttl uint8, payload []byte) []byte {
	ipLen, proto := header.IPv4MinimumSize, header.IPv4ProtocolNumber
	if src.Addr().Is6() {
		ipLen, proto = header.IPv6MinimumSize, header.IPv6ProtocolNumber
	}
	udpLen := header.UDPMinimumSize + len(payload)
	b := make([]byte, header.EthernetMinimumSize+ipLen+udpLen)
	header.Ethernet(b).Encode(&header.EthernetFields{
		SrcAddr: tcpip.LinkAddress(srcMAC), DstAddr: tcpip.LinkAddress(dstMAC), Type: proto})
	ipb := b[header.EthernetMinimumSize:]
	s, d := tcpip.AddrFromSlice(src.Addr().AsSlice()), tcpip.AddrFromSlice(dst.Addr().AsSlice())
	if proto == header.IPv4ProtocolNumber {
		ip := header.IPv4(ipb)
		ip.Encode(&header.IPv4Fields{TotalLength: uint16(ipLen + udpLen), TTL: ttl,
			Protocol: uint8(header.UDPProtocolNumber), SrcAddr: s, DstAddr: d})
		ip.SetChecksum(^ip.CalculateChecksum())
	} else {
		header.IPv6(ipb).Encode(&header.IPv6Fields{PayloadLength: uint16(udpLen),
			TransportProtocol: header.UDPProtocolNumber, HopLimit: ttl, SrcAddr: s, DstAddr: d})
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
	return b
}
