// Package iphdr reads the fixed header at the front of an IPv4 or IPv6
// packet: the version, the header and packet lengths the header gives,
// the addresses, and whether the packet is the host's own link
// signalling (LinkControl). It trusts nothing: every function checks
// that the bytes it reads are there. It is pure Go, builds everywhere and
// does not allocate.
package iphdr

import (
	"encoding/binary"
	"net/netip"
)

// Lengths of the fixed headers.
const (
	IPv4Len = 20 // without options
	IPv6Len = 40 // without extension headers
)

// Version returns the IP version in the first byte of b, or 0 if b is
// empty.
func Version(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	return int(b[0] >> 4)
}

// fixed returns the length of b's fixed header, or 0 if b is neither
// IPv4 nor IPv6 or is shorter than its fixed header.
func fixed(b []byte) int {
	switch v := Version(b); {
	case v == 4 && len(b) >= IPv4Len:
		return IPv4Len
	case v == 6 && len(b) >= IPv6Len:
		return IPv6Len
	}
	return 0
}

// Len returns the length of the packet as its header gives it: the IPv4
// total length, or IPv6Len plus the IPv6 payload length. ok is false if b
// is neither IPv4 nor IPv6 or ends before the length field (4 bytes for
// IPv4, 6 for IPv6); the rest of the fixed header need not be there.
func Len(b []byte) (n int, ok bool) {
	switch v := Version(b); {
	case v == 4 && len(b) >= 4:
		return int(binary.BigEndian.Uint16(b[2:])), true
	case v == 6 && len(b) >= 6:
		return IPv6Len + int(binary.BigEndian.Uint16(b[4:])), true
	}
	return 0, false
}

// HeaderLen returns the length of the IP header as the header gives it:
// the IPv4 IHL in bytes (options included, unchecked), or IPv6Len. It is
// 0 if b does not hold a whole fixed header.
func HeaderLen(b []byte) int {
	if fixed(b) == IPv4Len {
		return int(b[0]&0xf) * 4
	}
	return fixed(b)
}

// Whole reports whether b is exactly one IP packet as far as its fixed
// header tells: b holds the fixed header, the length the header gives is
// len(b), and an IPv4 header is at least IPv4Len bytes long.
func Whole(b []byte) bool {
	n, _ := Len(b)
	f := fixed(b)
	return f > 0 && n == len(b) && HeaderLen(b) >= f && HeaderLen(b) <= n
}

// Addrs returns the source and destination addresses, 8 bytes for IPv4
// or 32 for IPv6, or nil if b does not hold a whole fixed header.
func Addrs(b []byte) []byte {
	switch fixed(b) {
	case IPv4Len:
		return b[12:20]
	case IPv6Len:
		return b[8:40]
	}
	return nil
}

// Src returns the source address. ok is false if b does not hold a whole
// fixed header.
func Src(b []byte) (addr netip.Addr, ok bool) {
	switch a := Addrs(b); len(a) {
	case 8:
		return netip.AddrFrom4([4]byte(a[:4])), true
	case 32:
		return netip.AddrFrom16([16]byte(a[:16])), true
	}
	return netip.Addr{}, false
}

// Dst returns the destination address. ok is false if b does not hold a
// whole fixed header.
func Dst(b []byte) (addr netip.Addr, ok bool) {
	switch a := Addrs(b); len(a) {
	case 8:
		return netip.AddrFrom4([4]byte(a[4:])), true
	case 32:
		return netip.AddrFrom16([16]byte(a[16:])), true
	}
	return netip.Addr{}, false
}

// LinkControl reports whether b is one of the messages a host sends to
// its link itself, for no one beyond it: IGMP (IPv4), or ICMPv6, behind
// at most a hop-by-hop options header, of neighbour discovery (router
// and neighbour solicitations and advertisements, redirects) or MLD
// (queries, reports, done).
func LinkControl(b []byte) bool {
	switch fixed(b) {
	case IPv4Len:
		return b[9] == protoIGMP
	case IPv6Len:
		next, off := b[6], IPv6Len
		if next == protoHopByHop && len(b) >= off+2 {
			next, off = b[off], off+(int(b[off+1])+1)*8
		}
		if next != protoICMPv6 || len(b) <= off {
			return false
		}
		t := b[off]
		return t >= icmp6MLDQuery && t <= icmp6MLDDone || t >= icmp6RouterSolicit && t <= icmp6Redirect || t == icmp6MLDv2Report
	}
	return false
}

// The protocol numbers and ICMPv6 types LinkControl knows.
const (
	protoHopByHop      = 0
	protoIGMP          = 2
	protoICMPv6        = 58
	icmp6MLDQuery      = 130 // 131 report, 132 done
	icmp6MLDDone       = 132
	icmp6RouterSolicit = 133 // 134 router, 135 and 136 neighbour solicitation and advertisement
	icmp6Redirect      = 137
	icmp6MLDv2Report   = 143
)
