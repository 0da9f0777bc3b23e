package icmperr

import (
	"bytes"
	"fmt"
	"net/netip"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// Test packets, built with gVisor's encoders.

var (
	router4 = netip.MustParseAddr("198.18.0.254")
	router6 = netip.MustParseAddr("2001:2:0:1::fe")
	host4a  = "198.18.0.1"
	host4b  = "198.19.0.2"
	host6a  = "2001:2:0:1::1"
	host6b  = "2001:2:0:19::2"
)

// pkt4 describes an IPv4 packet.
type pkt4 struct {
	src, dst   string
	tos, flags uint8
	fragOff    uint16 // in bytes
	proto      tcpip.TransportProtocolNumber
	options    header.IPv4OptionsSerializer
	payload    []byte
}

// bytes encodes the packet with a valid header checksum.
func (p pkt4) bytes() []byte {
	hl := header.IPv4MinimumSize + int(p.options.Length())
	b := make([]byte, hl+len(p.payload))
	ip := header.IPv4(b)
	ip.Encode(&header.IPv4Fields{
		TOS: p.tos, TotalLength: uint16(len(b)), ID: 0x1234, Flags: p.flags, FragmentOffset: p.fragOff,
		TTL: 63, Protocol: uint8(p.proto), Options: p.options,
		SrcAddr: tcpip.AddrFrom4(netip.MustParseAddr(p.src).As4()),
		DstAddr: tcpip.AddrFrom4(netip.MustParseAddr(p.dst).As4()),
	})
	ip.SetChecksum(^ip.CalculateChecksum())
	copy(b[hl:], p.payload)
	return b
}

// pkt6 describes an IPv6 packet.
type pkt6 struct {
	src, dst string
	proto    tcpip.TransportProtocolNumber
	ext      header.IPv6ExtHdrSerializer
	payload  []byte
}

// bytes encodes the packet.
func (p pkt6) bytes() []byte {
	b := make([]byte, header.IPv6MinimumSize+p.ext.Length()+len(p.payload))
	header.IPv6(b).Encode(&header.IPv6Fields{
		TrafficClass: 0xb8, FlowLabel: 0x12345, PayloadLength: uint16(len(b) - header.IPv6MinimumSize),
		TransportProtocol: p.proto, HopLimit: 63, ExtensionHeaders: p.ext,
		SrcAddr: tcpip.AddrFrom16(netip.MustParseAddr(p.src).As16()),
		DstAddr: tcpip.AddrFrom16(netip.MustParseAddr(p.dst).As16()),
	})
	copy(b[header.IPv6MinimumSize+p.ext.Length():], p.payload)
	return b
}

// udp returns a UDP header and n bytes of data (checksum left zero).
func udp(n int) []byte {
	b := make([]byte, header.UDPMinimumSize+n)
	header.UDP(b).Encode(&header.UDPFields{SrcPort: 40000, DstPort: 9, Length: uint16(len(b))})
	for i := range n {
		b[header.UDPMinimumSize+i] = byte(i)
	}
	return b
}

// icmp4 returns an ICMP message of a type with n bytes of data.
func icmp4(typ header.ICMPv4Type, n int) []byte {
	b := make([]byte, header.ICMPv4MinimumSize+n)
	header.ICMPv4(b).SetType(typ)
	return b
}

// icmp6 returns an ICMPv6 message of a type with n bytes of data.
func icmp6(typ header.ICMPv6Type, n int) []byte {
	b := make([]byte, header.ICMPv6MinimumSize+n)
	header.ICMPv6(b).SetType(typ)
	return b
}

// destOpts6 is an 8-byte destination options header (one PadN) followed
// by next, then payload; it goes after the IPv6 header by hand.
func destOpts6(next tcpip.TransportProtocolNumber, payload []byte) []byte {
	return append([]byte{uint8(next), 0, 1, 4, 0, 0, 0, 0}, payload...)
}

// checkError verifies that e is a complete, correctly checksummed error
// from src answering orig with the given type, code and the 32 bits after
// the checksum, quoting the first quote bytes of orig. It returns what is
// wrong, or "".
func checkError(e, orig []byte, src netip.Addr, typ, code uint8, info uint32, quote int) string {
	if len(e) > 0 && e[0]>>4 == header.IPv4Version {
		return checkError4(e, orig, src, typ, code, info, quote)
	}
	return checkError6(e, orig, src, typ, code, info, quote)
}

func checkError4(e, orig []byte, src netip.Addr, typ, code uint8, info uint32, quote int) string {
	ip, o := header.IPv4(e), header.IPv4(orig)
	if !ip.IsValid(len(e)) || int(ip.TotalLength()) != len(e) || ip.HeaderLength() != header.IPv4MinimumSize || len(e) > maxLen4 {
		return fmt.Sprintf("IPv4 header %x, length %d", e[:min(len(e), 20)], len(e))
	}
	otos, _ := o.TOS()
	if tos, _ := ip.TOS(); tos != otos&0x1e|0xc0 {
		return fmt.Sprintf("TOS %#x for %#x", tos, otos)
	}
	if ip.Flags() != 0 || ip.FragmentOffset() != 0 || ip.TTL() != 64 || ip.TransportProtocol() != header.ICMPv4ProtocolNumber || !ip.IsChecksumValid() {
		return fmt.Sprintf("flags %d offset %d TTL %d protocol %d checksum valid %v", ip.Flags(), ip.FragmentOffset(), ip.TTL(), ip.TransportProtocol(), ip.IsChecksumValid())
	}
	if ip.SourceAddress().As4() != src.As4() || ip.DestinationAddress() != o.SourceAddress() {
		return fmt.Sprintf("from %v to %v", ip.SourceAddress(), ip.DestinationAddress())
	}
	icmp := header.ICMPv4(ip.Payload())
	if uint8(icmp.Type()) != typ || uint8(icmp.Code()) != code || checksum.Checksum(icmp, 0) != 0xffff {
		return fmt.Sprintf("ICMP type %d code %d checksum %#x", icmp.Type(), icmp.Code(), icmp.Checksum())
	}
	return checkQuote(icmp[4:], orig, info, quote)
}

func checkError6(e, orig []byte, src netip.Addr, typ, code uint8, info uint32, quote int) string {
	ip, o := header.IPv6(e), header.IPv6(orig)
	if !ip.IsValid(len(e)) || int(ip.PayloadLength())+header.IPv6MinimumSize != len(e) || len(e) > MaxLen {
		return fmt.Sprintf("IPv6 header %x, length %d", e[:min(len(e), 40)], len(e))
	}
	if tc, fl := ip.TOS(); tc != 0 || fl != 0 || ip.HopLimit() != 64 || ip.TransportProtocol() != header.ICMPv6ProtocolNumber {
		return fmt.Sprintf("class %#x flow %#x hop limit %d next header %d", tc, fl, ip.HopLimit(), ip.TransportProtocol())
	}
	if ip.SourceAddress().As16() != src.As16() || ip.DestinationAddress() != o.SourceAddress() {
		return fmt.Sprintf("from %v to %v", ip.SourceAddress(), ip.DestinationAddress())
	}
	icmp := header.ICMPv6(ip.Payload())
	want := header.ICMPv6Checksum(header.ICMPv6ChecksumParams{Header: icmp, Src: ip.SourceAddress(), Dst: ip.DestinationAddress()})
	if uint8(icmp.Type()) != typ || uint8(icmp.Code()) != code || icmp.Checksum() != want {
		return fmt.Sprintf("ICMPv6 type %d code %d checksum %#x, want %#x", icmp.Type(), icmp.Code(), icmp.Checksum(), want)
	}
	return checkQuote(icmp[4:], orig, info, quote)
}

// checkQuote checks the 32 bits after an error's checksum and the quote.
func checkQuote(rest, orig []byte, info uint32, quote int) string {
	if got := uint32(rest[0])<<24 | uint32(rest[1])<<16 | uint32(rest[2])<<8 | uint32(rest[3]); got != info {
		return fmt.Sprintf("info %#x, want %#x", got, info)
	}
	if q := rest[4:]; !bytes.Equal(q, orig[:min(quote, len(orig))]) || len(q) != quote {
		return fmt.Sprintf("quotes %d bytes, want the first %d of the original", len(q), quote)
	}
	return ""
}
