package ethernet

import (
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// The constants are the kernel's (and gVisor's).
func TestConstants(t *testing.T) {
	if HeaderLen != header.EthernetMinimumSize || TypeIPv4 != uint16(header.IPv4ProtocolNumber) || TypeIPv6 != uint16(header.IPv6ProtocolNumber) {
		t.Errorf("HeaderLen %d, TypeIPv4 %#x, TypeIPv6 %#x; gVisor says %d, %#x, %#x", HeaderLen, TypeIPv4, TypeIPv6,
			header.EthernetMinimumSize, header.IPv4ProtocolNumber, header.IPv6ProtocolNumber)
	}
}

// frame builds an Ethernet frame of type typ around pkt.
func frame(typ tcpip.NetworkProtocolNumber, pkt []byte) []byte {
	f := make([]byte, header.EthernetMinimumSize+len(pkt))
	header.Ethernet(f).Encode(&header.EthernetFields{
		SrcAddr: tcpip.LinkAddress("\x02\x00\x00\x00\x00\x01"), DstAddr: tcpip.LinkAddress("\x02\x00\x00\x00\x00\x02"), Type: typ,
	})
	copy(f[header.EthernetMinimumSize:], pkt)
	return f
}

func ipv4() []byte {
	p := make([]byte, header.IPv4MinimumSize)
	header.IPv4(p).Encode(&header.IPv4Fields{TotalLength: header.IPv4MinimumSize, TTL: 64, Protocol: uint8(header.UDPProtocolNumber),
		SrcAddr: tcpip.AddrFrom4([4]byte{198, 18, 0, 1}), DstAddr: tcpip.AddrFrom4([4]byte{198, 19, 0, 1})})
	return p
}

func ipv6() []byte {
	p := make([]byte, header.IPv6MinimumSize)
	header.IPv6(p).Encode(&header.IPv6Fields{TransportProtocol: header.UDPProtocolNumber, HopLimit: 64,
		SrcAddr: tcpip.AddrFrom16([16]byte{0x20, 0x01, 0, 2, 15: 1}), DstAddr: tcpip.AddrFrom16([16]byte{0x20, 0x01, 0, 2, 15: 2})})
	return p
}

func TestIsIP(t *testing.T) {
	for _, c := range []struct {
		name  string
		frame []byte
		want  bool
	}{
		{"IPv4", frame(header.IPv4ProtocolNumber, ipv4()), true},
		{"IPv6", frame(header.IPv6ProtocolNumber, ipv6()), true},
		{"IPv4, first byte only", frame(header.IPv4ProtocolNumber, ipv4()[:1]), true},
		{"IPv6 behind EtherType IPv4", frame(header.IPv4ProtocolNumber, ipv6()), false},
		{"IPv4 behind EtherType IPv6", frame(header.IPv6ProtocolNumber, ipv4()), false},
		{"ARP", frame(header.ARPProtocolNumber, make([]byte, header.ARPSize)), false},
		{"header only", frame(header.IPv4ProtocolNumber, nil), false},
		{"cut short", frame(header.IPv4ProtocolNumber, nil)[:13], false},
		{"empty", nil, false},
	} {
		if got := IsIP(c.frame); got != c.want {
			t.Errorf("%s: IsIP %v, want %v", c.name, got, c.want)
		}
	}
}

// FuzzIsIP checks IsIP against its definition, written with gVisor's
// header views: an Ethernet frame with at least one byte after the
// header, whose EtherType is IPv4 or IPv6 and whose IP version nibble
// says the same. It also checks that only the first 15 bytes matter.
func FuzzIsIP(f *testing.F) {
	for _, s := range [][]byte{
		nil,
		make([]byte, HeaderLen),
		frame(header.IPv4ProtocolNumber, ipv4()),
		frame(header.IPv6ProtocolNumber, ipv6()),
		frame(header.IPv6ProtocolNumber, ipv4()),
		{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x08, 0x00, 0x45},
		{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x08, 0x00, 0x65},
		{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x86, 0xdd, 0x60},
		{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x86, 0xdd, 0x45},
		{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x81, 0x00, 0, 5, 0x08, 0x00, 0x45}, // a VLAN tag: not IP
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := false
		if len(b) > header.EthernetMinimumSize {
			v := header.IPVersion(b[header.EthernetMinimumSize:])
			switch header.Ethernet(b).Type() {
			case header.IPv4ProtocolNumber:
				want = v == header.IPv4Version
			case header.IPv6ProtocolNumber:
				want = v == header.IPv6Version
			}
		}
		got := IsIP(b)
		if got != want {
			t.Fatalf("IsIP(% x) = %v, want %v", b, got, want)
		}
		if len(b) > HeaderLen+1 && IsIP(b[:HeaderLen+1]) != got {
			t.Fatalf("IsIP(% x) depends on more than %d bytes", b, HeaderLen+1)
		}
	})
}
