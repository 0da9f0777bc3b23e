package icmp

import (
	"errors"
	"net/netip"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/internal/testing/dirtybuf"
	"github.com/gsoplane/gsoplane/segment"
)

var (
	src4, dst4 = tcpip.AddrFrom4([4]byte{198, 18, 0, 1}), tcpip.AddrFrom4([4]byte{198, 19, 0, 2})
	src6, dst6 = tcpip.AddrFrom16([16]byte{0x20, 0x01, 0, 2, 0, 1, 15: 1}), tcpip.AddrFrom16([16]byte{0x20, 0x01, 0, 2, 0, 0x19, 15: 2})
)

// ipv4 returns an IPv4 packet of protocol proto with room for l4 bytes
// after its header, DF set or not.
func ipv4(proto tcpip.TransportProtocolNumber, l4 int, df bool) header.IPv4 {
	ip := header.IPv4(make([]byte, header.IPv4MinimumSize+l4))
	var flags uint8
	if df {
		flags = header.IPv4FlagDontFragment
	}
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(ip)), TTL: 64, Protocol: uint8(proto), SrcAddr: src4, DstAddr: dst4, Flags: flags})
	ip.SetChecksum(^ip.CalculateChecksum())
	return ip
}

// tcp4 returns a TCP/IPv4 packet with payload bytes.
func tcp4(payload int, df bool) []byte {
	ip := ipv4(header.TCPProtocolNumber, header.TCPMinimumSize+payload, df)
	tcp := header.TCP(ip.Payload())
	tcp.Encode(&header.TCPFields{SrcPort: 40000, DstPort: 5201, SeqNum: 1, AckNum: 1, DataOffset: header.TCPMinimumSize, Flags: header.TCPFlagAck, WindowSize: 512})
	tcp.SetChecksum(^tcp.CalculateChecksum(header.PseudoHeaderChecksum(header.TCPProtocolNumber, src4, dst4, uint16(len(tcp)))))
	return ip
}

// udp4 returns a UDP/IPv4 datagram with payload bytes.
func udp4(payload int, df bool) []byte {
	ip := ipv4(header.UDPProtocolNumber, header.UDPMinimumSize+payload, df)
	setUDP(header.UDP(ip.Payload()), src4, dst4)
	return ip
}

// udp6 returns a UDP/IPv6 datagram with payload bytes and hop limit hops.
func udp6(payload int, hops uint8) []byte {
	ip := header.IPv6(make([]byte, header.IPv6MinimumSize+header.UDPMinimumSize+payload))
	ip.Encode(&header.IPv6Fields{PayloadLength: uint16(len(ip) - header.IPv6MinimumSize), TransportProtocol: header.UDPProtocolNumber, HopLimit: hops, SrcAddr: src6, DstAddr: dst6})
	setUDP(header.UDP(ip.Payload()), src6, dst6)
	return ip
}

func setUDP(u header.UDP, src, dst tcpip.Address) {
	u.Encode(&header.UDPFields{SrcPort: 4000, DstPort: 9, Length: uint16(len(u))})
	u.SetChecksum(^u.CalculateChecksum(checksum.Checksum(u.Payload(), header.PseudoHeaderChecksum(header.UDPProtocolNumber, src, dst, uint16(len(u))))))
}

// packetWriter records what is written to it.
type packetWriter struct {
	pkts [][]byte
	err  error
}

func (w *packetWriter) Write(bufs [][]byte, offset int) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	for _, b := range bufs {
		w.pkts = append(w.pkts, append([]byte(nil), b[offset:]...))
	}
	return len(bufs), nil
}

// TestReplier writes errors behind a zeroed virtio-net header, from
// the router address of the packet's IP version, within the kernel's
// rate limits, and stays silent where a router must.
func TestReplier(t *testing.T) {
	w := &packetWriter{}
	router := netip.MustParseAddr("198.18.0.2")
	r := NewReplier(w, segment.HeaderSize, router, netip.Addr{})
	pkt := tcp4(1000, true)
	r.Unreachable(pkt)
	r.TooBig(pkt, 1280)
	if len(w.pkts) != 2 {
		t.Fatalf("%d packets written, want 2", len(w.pkts))
	}
	for i, want := range []header.ICMPv4Code{header.ICMPv4HostUnreachable, header.ICMPv4FragmentationNeeded} {
		b := w.pkts[i]
		if h, err := segment.DecodeHeader(b, segment.HeaderSize); err != nil || h != (segment.Header{}) {
			t.Errorf("error %d: virtio-net header %+v (%v), want zero", i, h, err)
		}
		ip := header.IPv4(b[segment.HeaderSize:])
		icmp := header.ICMPv4(ip.Payload())
		if ip.SourceAddress().String() != router.String() || ip.DestinationAddress().String() != "198.18.0.1" ||
			icmp.Type() != header.ICMPv4DstUnreachable || icmp.Code() != want {
			t.Errorf("error %d: %v → %v type %d code %d, want %v → 198.18.0.1 code %d", i, ip.SourceAddress(), ip.DestinationAddress(), icmp.Type(), icmp.Code(), router, want)
		}
	}
	if mtu := header.ICMPv4(header.IPv4(w.pkts[1][segment.HeaderSize:]).Payload()).MTU(); mtu != 1280 {
		t.Errorf("fragmentation needed carries MTU %d, want 1280", mtu)
	}
	r.Unreachable(w.pkts[0][segment.HeaderSize:]) // an ICMP error: never answered
	noDF := tcp4(1000, false)
	r.TooBig(noDF, 1280) // a router fragments it
	v6 := make([]byte, 48)
	v6[0], v6[6], v6[7] = 0x60, 17, 64
	r.Unreachable(v6) // no IPv6 router address
	for range 10 {
		r.Unreachable(pkt) // the destination's bucket: 6, then one a second
	}
	st := r.Stats()
	if st.Sent < 6 || st.Sent > 7 || st.Limited == 0 || st.Silent != 3 || st.Failed != 0 {
		t.Errorf("stats %+v: want about 6 sent, the rest limited, 3 silent", st)
	}
	w.err = errors.New("gone")
	NewReplier(w, 0, router, netip.Addr{}).Unreachable(pkt)
}

// TestReplierDirtyBuffer: an error is the same whatever its buffer held
// before (stale: a longer error), virtio-net header included. Packet too
// big, which has no IP ID and no per-destination limit, gives the same
// bytes every time.
func TestReplierDirtyBuffer(t *testing.T) {
	w := &packetWriter{}
	r := NewReplier(w, segment.HeaderSizeMrg, netip.Addr{}, netip.MustParseAddr("2001:2:0:1::2"))
	longer := func([][]byte) [][]byte {
		r.TooBig(udp6(1400, 64), 1280)
		return nil
	}
	out := dirtybuf.Check(t, [][]byte{r.buf}, longer, func([][]byte) [][]byte {
		w.pkts = nil
		r.TooBig(udp6(100, 64), 1280)
		return w.pkts
	})
	if want := segment.HeaderSizeMrg + 48 + len(udp6(100, 64)); len(out) != 1 || len(out[0]) != want {
		t.Fatalf("%d errors written, want one of %d bytes", len(out), want)
	}
}

// TestReplierTimeExceeded: the Replier answers a packet whose TTL ran
// out with time exceeded, TTL exceeded in transit (ICMPv6: hop limit
// exceeded in transit), from the router's address of the packet's
// family, behind a zero virtio-net header for a TUN device.
func TestReplierTimeExceeded(t *testing.T) {
	w := &packetWriter{}
	router4, router6 := netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("2001:2:0:1::2")
	r := NewReplier(w, segment.HeaderSize, router4, router6)
	r.TimeExceeded(udp4(100, true))
	r.TimeExceeded(udp6(100, 1))
	if len(w.pkts) != 2 || r.Stats().Sent != 2 {
		t.Fatalf("%d packets written (stats %+v), want 2", len(w.pkts), r.Stats())
	}
	if h, err := segment.DecodeHeader(w.pkts[0], segment.HeaderSize); err != nil || h != (segment.Header{}) {
		t.Errorf("virtio-net header %+v (%v), want zero", h, err)
	}
	ip4 := header.IPv4(w.pkts[0][segment.HeaderSize:])
	if icmp := header.ICMPv4(ip4.Payload()); ip4.SourceAddress().String() != router4.String() ||
		icmp.Type() != header.ICMPv4TimeExceeded || icmp.Code() != header.ICMPv4TTLExceeded {
		t.Errorf("IPv4: from %v type %d code %d, want time exceeded (11/0) from %v", ip4.SourceAddress(), icmp.Type(), icmp.Code(), router4)
	}
	ip6 := header.IPv6(w.pkts[1][segment.HeaderSize:])
	if icmp := header.ICMPv6(ip6.Payload()); ip6.SourceAddress().String() != router6.String() ||
		icmp.Type() != header.ICMPv6TimeExceeded || icmp.Code() != header.ICMPv6HopLimitExceeded {
		t.Errorf("IPv6: from %v type %d code %d, want time exceeded (3/0) from %v", ip6.SourceAddress(), icmp.Type(), icmp.Code(), router6)
	}
}
