package icmperr

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// Kind is the error to send.
type Kind uint8

const (
	// Unreachable says that the next hop did not resolve, as Linux says
	// it when a neighbour fails (arp_error_report, ndisc_error_report):
	// ICMP destination unreachable, host unreachable (type 3, code 1),
	// or ICMPv6 destination unreachable, address unreachable (type 1,
	// code 3).
	Unreachable Kind = iota + 1
	// TooBig says that the packet exceeds the egress MTU: ICMP
	// destination unreachable, fragmentation needed (type 3, code 4,
	// with the next-hop MTU, RFC 1191), for IPv4 packets with DF set
	// only (a router fragments the others), or ICMPv6 packet too big
	// (type 2, with the MTU).
	TooBig
	// TimeExceeded says that the packet's TTL (hop limit) ran out, as a
	// router says it for a packet that arrives with 1 or less (RFC 1812
	// 5.3.1, RFC 4443 3.3): ICMP time exceeded, TTL exceeded in transit
	// (type 11, code 0), or ICMPv6 time exceeded, hop limit exceeded in
	// transit (type 3, code 0).
	TimeExceeded
)

// MaxLen is the longest error Build writes: an ICMPv6 error fills the
// IPv6 minimum MTU. An ICMP (IPv4) error is at most 576 bytes.
const MaxLen = header.IPv6MinimumMTU

const (
	maxLen4    = 576  // RFC 1812 4.3.2.3; __icmp_send: room = 576 - headers
	minMTU4    = 68   // RFC 791: every IPv4 link carries 68 bytes
	hopLimit   = 64   // the kernel's ip_default_ttl and IPv6 hop_limit
	tosMask    = 0x1e // RT_TOS: an error keeps the original's TOS bits...
	tosControl = 0xc0 // ...under precedence internetwork control (RFC 1812 4.3.2.5)
	hdrs4      = header.IPv4MinimumSize + header.ICMPv4MinimumSize
	hdrs6      = header.IPv6MinimumSize + header.ICMPv6ErrorHeaderSize
	protoAH    = 51 // IPPROTO_AH, skipped like the kernel's ipv6_skip_exthdr
)

// ipID numbers the IPv4 errors. They are sent with DF clear, as the
// kernel's ICMP socket sends them (IP_PMTUDISC_DONT), so the
// identification must vary.
var ipID atomic.Uint32

func init() { ipID.Store(rand.Uint32()) }

// message is an error's type, code and the 32 bits that follow the
// checksum (the MTU of a fragmentation needed or packet too big).
type message struct {
	typ, code uint8
	info      uint32
}

// Build writes into b the error of kind k answering orig, an IPv4 or IPv6
// packet that could not be forwarded, and returns its length. The error
// goes from src, the router's address toward orig's source (of orig's
// family), to orig's source and quotes as much of orig as the RFCs allow:
// up to a 576-byte error for IPv4 (RFC 1812 4.3.2.3, as Linux), up to a
// 1280-byte error for IPv6 (RFC 4443 2.4 (c)), less if b is shorter but
// never less than orig's IP header and 8 more bytes. mtu is the egress
// MTU for TooBig. b must not overlap orig.
//
// Build returns 0, and writes nothing, when orig must not be answered
// (RFC 1812 4.3.2.7, RFC 4443 2.4 (e), and the kernel's __icmp_send and
// icmp6_send): it is not a valid IPv4 packet (header checksum included)
// or IPv6 packet; it is an ICMP error, or an ICMP message too short to
// tell; it is a fragment other than the first (for IPv6 too, where the
// kernel would answer: the first fragment tells the sender the same); its
// destination is a
// multicast or broadcast address (an IPv6 packet too big excepted); its
// source is not a single host (unspecified, this network, loopback,
// multicast, class E or broadcast). It also returns 0 for TooBig on an
// IPv4 packet without DF, for an mtu below 68 (IPv4) or 1280 (IPv6) (mtu
// matters for TooBig only), for
// a src that is not a unicast address of orig's family, and when b is
// too short.
func Build(b, orig []byte, src netip.Addr, k Kind, mtu int) int {
	switch {
	case len(orig) > 0 && orig[0]>>4 == header.IPv4Version:
		return build4(b, orig, src, k, mtu)
	case len(orig) > 0 && orig[0]>>4 == header.IPv6Version:
		return build6(b, orig, src, k, mtu)
	}
	return 0
}

// build4 answers an IPv4 packet.
func build4(b, orig []byte, src netip.Addr, k Kind, mtu int) int {
	end, ok := answerable4(orig)
	if !ok || !src.Is4() || !host4(src) {
		return 0
	}
	ip := header.IPv4(orig)
	m := message{typ: uint8(header.ICMPv4DstUnreachable), code: uint8(header.ICMPv4HostUnreachable)}
	switch {
	case k == TooBig && ip.Flags()&header.IPv4FlagDontFragment != 0 && mtu >= minMTU4 && mtu <= math.MaxUint16:
		m.code, m.info = uint8(header.ICMPv4FragmentationNeeded), uint32(mtu)
	case k == TimeExceeded:
		m = message{typ: uint8(header.ICMPv4TimeExceeded), code: uint8(header.ICMPv4TTLExceeded)}
	case k != Unreachable:
		return 0
	}
	n := quoteLen(end, int(ip.HeaderLength())+8, maxLen4-hdrs4, len(b)-hdrs4)
	if n < 0 {
		return 0
	}
	return write4(b, ip, src, m, orig[:n])
}

// build6 answers an IPv6 packet.
func build6(b, orig []byte, src netip.Addr, k Kind, mtu int) int {
	if !src.Is6() || src.Is4In6() || !host6(src) {
		return 0
	}
	m := message{typ: uint8(header.ICMPv6DstUnreachable), code: uint8(header.ICMPv6AddressUnreachable)}
	switch {
	case k == TooBig && mtu >= header.IPv6MinimumMTU && uint64(mtu) <= math.MaxUint32:
		m = message{typ: uint8(header.ICMPv6PacketTooBig), info: uint32(mtu)}
	case k == TimeExceeded:
		m = message{typ: uint8(header.ICMPv6TimeExceeded), code: uint8(header.ICMPv6HopLimitExceeded)}
	case k != Unreachable:
		return 0
	}
	end, ok := answerable6(orig, k == TooBig)
	if !ok {
		return 0
	}
	n := quoteLen(end, header.IPv6MinimumSize+8, MaxLen-hdrs6, len(b)-hdrs6)
	if n < 0 {
		return 0
	}
	return write6(b, header.IPv6(orig), src, m, orig[:n])
}

// quoteLen returns how many bytes of a packet of length end to quote:
// all, or as many as room and the free space in the buffer allow, or -1
// if that is less than need bytes (or than the whole packet).
func quoteLen(end, need, room, free int) int {
	n := min(end, room, free)
	if n < min(end, need) {
		return -1
	}
	return n
}

// answerable4 returns the length of an IPv4 packet a router may answer
// with an error, or false.
func answerable4(p []byte) (int, bool) {
	if len(p) < header.IPv4MinimumSize {
		return 0, false
	}
	ip := header.IPv4(p)
	hl, end := int(ip.HeaderLength()), int(ip.TotalLength())
	if hl < header.IPv4MinimumSize || hl > end || end > len(p) || !ip.IsChecksumValid() || ip.FragmentOffset() != 0 {
		return 0, false
	}
	src, dst := ip.SourceAddress(), ip.DestinationAddress()
	if !host4(netip.AddrFrom4(src.As4())) || !unicast4(netip.AddrFrom4(dst.As4())) {
		return 0, false
	}
	if ip.TransportProtocol() == header.ICMPv4ProtocolNumber && (hl == end || isError4(p[hl])) {
		return 0, false
	}
	return end, true
}

// answerable6 returns the length of an IPv6 packet a router may answer
// with an error (a packet too big if tooBig), or false.
func answerable6(p []byte, tooBig bool) (int, bool) {
	if len(p) < header.IPv6MinimumSize {
		return 0, false
	}
	ip := header.IPv6(p)
	end := header.IPv6MinimumSize + int(ip.PayloadLength())
	if ip.PayloadLength() == 0 && ip.NextHeader() == uint8(header.IPv6HopByHopOptionsExtHdrIdentifier) {
		end = len(p) // a jumbogram (RFC 2675): the kernel quotes what there is
	}
	src, dst := ip.SourceAddress(), ip.DestinationAddress()
	if end > len(p) || !host6(netip.AddrFrom16(src.As16())) || (netip.AddrFrom16(dst.As16()).IsMulticast() && !tooBig) {
		return 0, false
	}
	proto, off, first := upper6(p[:end])
	if !first || (proto == uint8(header.ICMPv6ProtocolNumber) && (off >= end || !isInfo6(p[off]))) {
		return 0, false
	}
	return end, true
}

// upper6 walks an IPv6 packet's extension headers as the kernel's
// ipv6_skip_exthdr does and returns the upper-layer protocol, its offset
// and false if the packet is a fragment other than the first. A chain cut
// short yields "no next header".
func upper6(p []byte) (proto uint8, off int, first bool) {
	proto, off = header.IPv6(p).NextHeader(), header.IPv6MinimumSize
	for {
		switch header.IPv6ExtensionHeaderIdentifier(proto) {
		case header.IPv6HopByHopOptionsExtHdrIdentifier, header.IPv6RoutingExtHdrIdentifier,
			header.IPv6DestinationOptionsExtHdrIdentifier, protoAH:
			if off+2 > len(p) {
				return uint8(header.IPv6NoNextHeaderIdentifier), off, true
			}
			n := (int(p[off+1]) + 1) * 8
			if proto == protoAH {
				n = (int(p[off+1]) + 2) * 4
			}
			proto, off = p[off], off+n
		case header.IPv6FragmentExtHdrIdentifier:
			if off+header.IPv6FragmentExtHdrLength > len(p) {
				return uint8(header.IPv6NoNextHeaderIdentifier), off, true
			}
			if binary.BigEndian.Uint16(p[off+2:])>>3 != 0 {
				return p[off], off + header.IPv6FragmentExtHdrLength, false
			}
			proto, off = p[off], off+header.IPv6FragmentExtHdrLength
		default:
			return proto, off, true
		}
	}
}

// isError4 reports whether an ICMP type is an error to the kernel
// (icmp_pointers): every type but echo, timestamp, information and
// address mask requests and replies, unknown types included.
func isError4(t uint8) bool {
	switch header.ICMPv4Type(t) {
	case header.ICMPv4EchoReply, header.ICMPv4Echo, header.ICMPv4Timestamp, header.ICMPv4TimestampReply,
		header.ICMPv4InfoRequest, header.ICMPv4InfoReply, 17, 18: // address mask request and reply
		return false
	}
	return true
}

// isInfo6 reports whether an ICMPv6 type is informational (RFC 4443 2.1).
func isInfo6(t uint8) bool { return !header.ICMPv6Type(t).IsErrorType() }

// host4 reports whether an IPv4 address names a single host: not this
// network (0/8), loopback, multicast, class E or the broadcast address.
func host4(a netip.Addr) bool {
	first := a.As4()[0]
	return first != 0 && first != 127 && first < 224
}

// unicast4 reports whether an IPv4 destination is neither this network,
// multicast nor the limited broadcast address.
func unicast4(a netip.Addr) bool {
	return a.As4()[0] != 0 && !a.IsMulticast() && a != netip.AddrFrom4([4]byte{255, 255, 255, 255})
}

// host6 reports whether an IPv6 address names a single node: not
// unspecified, loopback or multicast.
func host6(a netip.Addr) bool {
	return !a.IsUnspecified() && !a.IsLoopback() && !a.IsMulticast()
}

// write4 writes an ICMP error quoting q in an IPv4 packet answering ip.
func write4(b []byte, ip header.IPv4, src netip.Addr, m message, q []byte) int {
	total := hdrs4 + len(q)
	tos, _ := ip.TOS()
	h := header.IPv4(b[:total])
	h.Encode(&header.IPv4Fields{
		TOS:         tos&tosMask | tosControl,
		TotalLength: uint16(total),
		ID:          uint16(ipID.Add(1)),
		TTL:         hopLimit,
		Protocol:    uint8(header.ICMPv4ProtocolNumber),
		SrcAddr:     tcpip.AddrFrom4(src.As4()),
		DstAddr:     ip.SourceAddress(),
	})
	h.SetChecksum(^h.CalculateChecksum())
	icmp := header.ICMPv4(h[header.IPv4MinimumSize:])
	icmp.SetType(header.ICMPv4Type(m.typ))
	icmp.SetCode(header.ICMPv4Code(m.code))
	binary.BigEndian.PutUint32(icmp[4:], m.info)
	copy(icmp[header.ICMPv4MinimumSize:], q)
	icmp.SetChecksum(header.ICMPv4Checksum(icmp[:header.ICMPv4MinimumSize], checksum.Checksum(q, 0)))
	return total
}

// write6 writes an ICMPv6 error quoting q in an IPv6 packet answering ip.
func write6(b []byte, ip header.IPv6, src netip.Addr, m message, q []byte) int {
	total := hdrs6 + len(q)
	from, to := tcpip.AddrFrom16(src.As16()), ip.SourceAddress()
	h := header.IPv6(b[:total])
	h.Encode(&header.IPv6Fields{
		PayloadLength:     uint16(total - header.IPv6MinimumSize),
		TransportProtocol: header.ICMPv6ProtocolNumber,
		HopLimit:          hopLimit,
		SrcAddr:           from,
		DstAddr:           to,
	})
	icmp := header.ICMPv6(h[header.IPv6MinimumSize:])
	icmp.SetType(header.ICMPv6Type(m.typ))
	icmp.SetCode(header.ICMPv6Code(m.code))
	icmp.SetTypeSpecific(m.info)
	copy(icmp[header.ICMPv6ErrorHeaderSize:], q)
	icmp.SetChecksum(header.ICMPv6Checksum(header.ICMPv6ChecksumParams{
		Header:      icmp[:header.ICMPv6ErrorHeaderSize],
		Src:         from,
		Dst:         to,
		PayloadCsum: checksum.Checksum(q, 0),
		PayloadLen:  len(q),
	}))
	return total
}
