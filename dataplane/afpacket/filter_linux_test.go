package afpacket

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/internal/ethernet"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// The programs' return codes (bpf/filter.c).
const (
	tcxNext    = -1 // TCX_NEXT: the next program (or the stack) decides
	tcxDrop    = 2  // TCX_DROP
	filterKeep = -1 // a socket filter's snap length: the whole packet
	filterDrop = 0
)

// ethFrame puts an Ethernet header addressed to 00:00:00:00:00:00 (the
// test run's loopback device: PACKET_HOST) in front of pkt.
func ethFrame(etherType uint16, pkt []byte) []byte {
	f := make([]byte, ethernet.HeaderLen+len(pkt))
	f[6] = 2 // a source MAC
	binary.BigEndian.PutUint16(f[12:], etherType)
	copy(f[ethernet.HeaderLen:], pkt)
	return f
}

// icmpv6 builds an IPv6 packet with an ICMPv6 message of the given type.
func icmpv6(dst netip.Addr, typ header.ICMPv6Type) []byte {
	p := make([]byte, header.IPv6MinimumSize+header.ICMPv6MinimumSize)
	header.IPv6(p).Encode(&header.IPv6Fields{PayloadLength: header.ICMPv6MinimumSize, TransportProtocol: header.ICMPv6ProtocolNumber,
		HopLimit: 255, SrcAddr: tcpip.AddrFrom16(testSrc6.As16()), DstAddr: tcpip.AddrFrom16(dst.As16())})
	header.ICMPv6(p[header.IPv6MinimumSize:]).SetType(typ)
	return p
}

// TestFilterPrograms runs both programs (BPF_PROG_TEST_RUN) on packets
// the port must take and packets it must leave to the host: the socket
// filter keeps exactly what the tcx program drops.
func TestFilterPrograms(t *testing.T) {
	ns := netlab.NewT(t, "afpf")
	var f *filter
	ns.Do(t, func() {
		var err error
		f, err = newFilter(HostFilterAuto)
		netlab.Must(t, err)
	})
	t.Cleanup(func() { f.close() })
	netlab.Must(t, f.setPrefixes([]netip.Prefix{netip.MustParsePrefix("198.19.0.0/24"), netip.MustParsePrefix("2001:2:0:19::/64")}))
	tcp4, _ := superPacket(false, uint8(header.TCPProtocolNumber), 100, 1400, false) // to 198.19.0.2
	tcp6, _ := superPacket(true, uint8(header.TCPProtocolNumber), 100, 1400, false)  // to 2001:2:0:19::2
	other4 := append([]byte(nil), tcp4...)
	copy(other4[16:20], netip.MustParseAddr("198.18.100.1").AsSlice())
	other6 := append([]byte(nil), tcp6...)
	copy(other6[24:40], netip.MustParseAddr("2001:2:0:100::1").AsSlice())
	for _, c := range []struct {
		name  string
		frame []byte
		take  bool
	}{
		{"IPv4 to a redirected prefix", ethFrame(ethernet.TypeIPv4, tcp4), true},
		{"IPv6 to a redirected prefix", ethFrame(ethernet.TypeIPv6, tcp6), true},
		{"IPv4 elsewhere", ethFrame(ethernet.TypeIPv4, other4), false},
		{"IPv6 elsewhere", ethFrame(ethernet.TypeIPv6, other6), false},
		{"ICMPv6 echo to a redirected prefix", ethFrame(ethernet.TypeIPv6, icmpv6(testDst6, header.ICMPv6EchoRequest)), true},
		{"neighbour solicitation to a redirected address", ethFrame(ethernet.TypeIPv6, icmpv6(testDst6, header.ICMPv6NeighborSolicit)), false},
		{"neighbour advertisement to a redirected address", ethFrame(ethernet.TypeIPv6, icmpv6(testDst6, header.ICMPv6NeighborAdvert)), false},
		{"ARP", ethFrame(0x0806, make([]byte, 28)), false},
		{"802.1Q", ethFrame(0x8100, append([]byte{0, 1, 8, 0}, tcp4...)), false},
		{"IPv4 cut short", ethFrame(ethernet.TypeIPv4, tcp4[:12]), false},
		{"IPv6 cut short", ethFrame(ethernet.TypeIPv6, tcp6[:30]), false},
	} {
		for _, p := range []struct {
			prog      *ebpf.Program
			yes, no   uint32
			whichProg string
		}{{f.sock, filterKeep & 0xffffffff, filterDrop, "socket filter"}, {f.drop, tcxDrop, tcxNext & 0xffffffff, "tcx"}} {
			if p.prog == f.drop && strings.HasSuffix(c.name, "cut short") {
				continue // a test run refuses to build an skb shorter than its IP header for tc
			}
			data := c.frame
			if p.prog == f.sock {
				// A test run pulls the Ethernet header before a socket
				// filter runs; packet_rcv pushes it back for a SOCK_RAW
				// socket. A second copy in front stands for that.
				data = append(append([]byte(nil), c.frame[:ethernet.HeaderLen]...), c.frame...)
			}
			var ret uint32
			var err error
			ns.Do(t, func() { ret, err = p.prog.Run(&ebpf.RunOptions{Data: data}) })
			if err != nil {
				t.Fatalf("%s, %s: %v", c.name, p.whichProg, err)
			}
			want := p.no
			if c.take {
				want = p.yes
			}
			if ret != want {
				t.Errorf("%s, %s: returned %#x, want %#x", c.name, p.whichProg, ret, want)
			}
		}
	}
}

// TestFilterLoadsWithBPFCaps loads both programs from a thread whose
// only capabilities are CAP_NET_ADMIN and CAP_BPF, as a binary with file
// capabilities gets them: without CAP_PERFMON (or CAP_SYS_ADMIN) the
// verifier refuses a helper's read of stack the program has not written,
// which it allows root.
func TestFilterLoadsWithBPFCaps(t *testing.T) {
	netlab.RequireRoot(t)
	err := netlab.WithCaps(1<<unix.CAP_NET_ADMIN|1<<unix.CAP_BPF, func() error {
		f, err := newFilter(HostFilterAuto)
		if err != nil {
			return err
		}
		return f.close()
	})
	if err != nil {
		t.Error(err)
	}
}
