package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// wireWant is what ForWire should return for one packet.
type wireWant struct {
	kind    GSOType // GSO type with the ECN flag
	gso     int
	needs   bool // NEEDS_CSUM
	csum    CsumState
	tooBig  bool  // an error matching ErrTooBig with the mtu
	err     error // another error errors.Is must match
	rule    rule  // the rule of the *Error it must return
	zeroHdr bool  // the header is all zero
}

// wireCase is one table case: a packet, the mtu and mss given to ForWire,
// and the receiving kernel's header given to ForWireFrom.
type wireCase struct {
	name     string
	pkt      []byte
	mtu, mss int
	from     Header
	seg      *Segmenter // nil: the zero Segmenter
	want     wireWant
}

// ipOptsNOP is 8 bytes of IPv4 options: NOPs and an end of options.
var ipOptsNOP = []byte{1, 1, 1, 1, 1, 1, 1, 0}

// tsOpt is NOP NOP timestamps: the 12 bytes Linux puts in every segment.
var tsOpt = []byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2}

// wirePacket builds a packet as a wire port receives it: s.needsCsum
// leaves a partial checksum (the pseudo-header sum) in the field, as a
// veth peer hands it over; otherwise the checksum is complete.
func wirePacket(s superSpec) []byte {
	s.gso, s.mss = GSONone, 0
	pkt, _ := buildSuper(s)
	return pkt
}

// l3Of returns the IP header length of a built packet (through IPv6
// extension headers).
func l3Of(t testing.TB, pkt []byte) int {
	t.Helper()
	w, err := parseWire(pkt)
	if err != nil {
		t.Fatalf("parseWire: %v", err)
	}
	return w.l3
}

// corruptLast flips the last byte of a packet: its transport checksum no
// longer verifies.
func corruptLast(pkt []byte) []byte {
	pkt[len(pkt)-1] ^= 0x5a
	return pkt
}

// setIPv4FragField writes the flags and fragment offset word of an IPv4
// header and redoes its checksum.
func setIPv4FragField(pkt []byte, v uint16) []byte {
	binary.BigEndian.PutUint16(pkt[6:], v)
	ip := header.IPv4(pkt)
	ip.SetChecksum(0)
	ip.SetChecksum(^ip.CalculateChecksum())
	return pkt
}

// setL4Csum writes the transport checksum field of a built packet.
func setL4Csum(pkt []byte, l3 int, v uint16) []byte {
	off := tcpCsumOffset
	if proto(pkt) == protoUDP {
		off = udpCsumOffset
	}
	binary.BigEndian.PutUint16(pkt[l3+off:], v)
	return pkt
}

// proto returns the transport protocol of a built packet without IPv6
// extension headers.
func proto(pkt []byte) uint8 {
	if pkt[0]>>4 == 6 {
		return pkt[6]
	}
	return pkt[9]
}

// rawIP builds an IPv4 or IPv6 packet of protocol p with n bytes of
// payload that buildSuper cannot build (ICMP, ...).
func rawIP(v6 bool, p uint8, n int, df bool) []byte {
	if v6 {
		pkt := make([]byte, header.IPv6MinimumSize+n)
		header.IPv6(pkt).Encode(&header.IPv6Fields{
			PayloadLength: uint16(n), TransportProtocol: tcpip.TransportProtocolNumber(p), HopLimit: 64,
			SrcAddr: tcpip.AddrFrom16(defaultSrc6.As16()), DstAddr: tcpip.AddrFrom16(defaultDst6.As16()),
		})
		fillPayload(pkt[header.IPv6MinimumSize:], uint64(n))
		return pkt
	}
	pkt := make([]byte, header.IPv4MinimumSize+n)
	var flags uint8
	if df {
		flags = header.IPv4FlagDontFragment
	}
	ip := header.IPv4(pkt)
	ip.Encode(&header.IPv4Fields{
		TotalLength: uint16(len(pkt)), ID: 77, Flags: flags, TTL: 64, Protocol: p,
		SrcAddr: tcpip.AddrFrom4(defaultSrc4.As4()), DstAddr: tcpip.AddrFrom4(defaultDst4.As4()),
	})
	ip.SetChecksum(^ip.CalculateChecksum())
	fillPayload(pkt[header.IPv4MinimumSize:], uint64(n))
	return pkt
}

// withIPv6RoutingLeft sets segments left in the routing header at off.
func withIPv6RoutingLeft(pkt []byte, off int) []byte {
	pkt[off+3] = 1
	return pkt
}

func wireCases() []wireCase {
	const mtu = 1500
	big4 := 65535 - 40
	big6 := 65535 - 20
	tcp4 := func(payload int, partial bool) superSpec {
		return superSpec{proto: tcp, payload: payload, needsCsum: partial, df: true, id: 0x1234, seq: 1000, seed: uint64(payload)}
	}
	tcp6 := func(payload int, partial bool) superSpec {
		return superSpec{v6: true, proto: tcp, payload: payload, needsCsum: partial, seq: 2000, seed: uint64(payload) + 1}
	}
	udp4 := func(payload int, partial, df bool) superSpec {
		return superSpec{proto: udp, payload: payload, needsCsum: partial, df: df, id: 0x4321, seed: uint64(payload) + 2}
	}
	udp6 := func(payload int, partial bool) superSpec {
		return superSpec{v6: true, proto: udp, payload: payload, needsCsum: partial, seed: uint64(payload) + 3}
	}
	with := func(s superSpec, f func(*superSpec)) superSpec { f(&s); return s }
	exts := []extHdr{{extHopByHop, 8}, {extDestOpts, 16}}
	routing := []extHdr{{extRouting, 24}}

	none := wireWant{zeroHdr: true, csum: CsumNone}
	complete := wireWant{zeroHdr: true, csum: CsumComplete}
	bad := wireWant{zeroHdr: true, csum: CsumBad}
	partialNone := wireWant{kind: GSONone, needs: true, csum: CsumPartial}
	tooBig := wireWant{tooBig: true}
	invalidRule := func(r rule) wireWant { return wireWant{rule: r} }

	opts40 := make([]byte, 40)
	for i := range opts40 {
		opts40[i] = 1 // NOPs
	}
	return []wireCase{
		// Packets that fit.
		{name: "fit/tcp4-complete", pkt: wirePacket(tcp4(1000, false)), mtu: mtu, want: complete},
		{name: "fit/tcp4-partial", pkt: wirePacket(tcp4(1000, true)), mtu: mtu, want: partialNone},
		{name: "fit/tcp4-bad", pkt: corruptLast(wirePacket(tcp4(1000, false))), mtu: mtu, want: bad},
		{name: "fit/tcp4-exactly-mtu", pkt: wirePacket(tcp4(1460, true)), mtu: mtu, want: partialNone},
		{name: "fit/tcp4-options-partial", pkt: wirePacket(with(tcp4(100, true), func(s *superSpec) { s.ipOpts = ipOptsNOP; s.tcpOpts = tsOpt })), mtu: mtu, want: partialNone},
		{name: "fit/tcp6-complete", pkt: wirePacket(tcp6(1000, false)), mtu: mtu, want: complete},
		{name: "fit/tcp6-partial-ext", pkt: wirePacket(with(tcp6(1000, true), func(s *superSpec) { s.ext = exts })), mtu: mtu, want: partialNone},
		{name: "fit/tcp6-bad", pkt: corruptLast(wirePacket(tcp6(1000, false))), mtu: mtu, want: bad},
		{name: "fit/tcp4-empty-ack", pkt: wirePacket(tcp4(0, true)), mtu: mtu, want: partialNone},
		{name: "fit/udp4-complete", pkt: wirePacket(udp4(1000, false, false)), mtu: mtu, want: complete},
		{name: "fit/udp4-partial", pkt: wirePacket(udp4(1000, true, false)), mtu: mtu, want: partialNone},
		{name: "fit/udp4-bad", pkt: corruptLast(wirePacket(udp4(1000, false, false))), mtu: mtu, want: bad},
		{name: "fit/udp4-no-checksum", pkt: setL4Csum(wirePacket(udp4(1000, false, false)), 20, 0), mtu: mtu, want: none},
		{name: "fit/udp6-complete", pkt: wirePacket(udp6(64, false)), mtu: mtu, want: complete},
		{name: "fit/udp6-partial", pkt: wirePacket(udp6(64, true)), mtu: mtu, want: partialNone},
		{name: "fit/udp6-zero-checksum", pkt: setL4Csum(wirePacket(udp6(64, false)), 40, 0), mtu: mtu, want: bad},
		{name: "fit/icmp4", pkt: rawIP(false, 1, 1000, true), mtu: mtu, want: none},
		{name: "fit/icmp6", pkt: rawIP(true, 58, 1000, false), mtu: mtu, want: none},
		{name: "fit/ipv4-fragment", pkt: setIPv4FragField(wirePacket(tcp4(1000, true)), ipv4MF), mtu: mtu, want: none},
		{name: "fit/ipv6-fragment", pkt: wirePacket(with(udp6(1000, true), func(s *superSpec) { s.ext = []extHdr{{extFragment, 8}} })), mtu: mtu, want: none},
		{name: "fit/ipv4-source-route", pkt: wirePacket(with(tcp4(100, true), func(s *superSpec) { s.ipOpts = []byte{ipv4OptLSRR, 7, 4, 198, 19, 1, 1, 0} })), mtu: mtu, want: none},
		{name: "fit/ipv6-routing-left", pkt: withIPv6RoutingLeft(wirePacket(with(tcp6(100, true), func(s *superSpec) { s.ext = routing })), 40), mtu: mtu, want: none},
		{name: "fit/ipv6-routing-done", pkt: wirePacket(with(tcp6(100, true), func(s *superSpec) { s.ext = routing })), mtu: mtu, want: partialNone},
		{name: "fit/tcp-bad-data-offset", pkt: func() []byte { p := wirePacket(tcp4(10, true)); p[20+12] = 0xf0; return p }(), mtu: mtu, want: none},
		{name: "fit/udp-bad-length", pkt: func() []byte { p := wirePacket(udp4(10, true, false)); p[20+5]++; return p }(), mtu: mtu, want: none},
		{name: "fit/mtu-68", pkt: wirePacket(tcp4(20, true)), mtu: MinMTU, want: partialNone},

		// TCP larger than the MTU: TSO.
		{name: "tso/tcp4-64k-partial", pkt: wirePacket(tcp4(big4, true)), mtu: mtu, want: wireWant{kind: GSOTCPv4, gso: 1460, needs: true, csum: CsumPartial}},
		{name: "tso/tcp4-64k-complete", pkt: wirePacket(tcp4(big4, false)), mtu: mtu, want: wireWant{kind: GSOTCPv4, gso: 1460, csum: CsumComplete}},
		{name: "tso/tcp4-bad", pkt: corruptLast(wirePacket(tcp4(5000, false))), mtu: mtu, want: wireWant{err: ErrBadChecksum, csum: CsumBad}},
		{name: "tso/tcp4-one-byte-over", pkt: wirePacket(tcp4(1461, true)), mtu: mtu, want: wireWant{kind: GSOTCPv4, gso: 1460, needs: true, csum: CsumPartial}},
		{name: "tso/tcp4-no-df", pkt: wirePacket(with(tcp4(9000, false), func(s *superSpec) { s.df = false })), mtu: mtu, want: wireWant{kind: GSOTCPv4, gso: 1460, csum: CsumComplete}},
		{name: "tso/tcp4-options", pkt: wirePacket(with(tcp4(20000, true), func(s *superSpec) { s.ipOpts = ipOptsNOP; s.tcpOpts = tsOpt })), mtu: mtu,
			want: wireWant{kind: GSOTCPv4, gso: 1500 - 28 - 32, needs: true, csum: CsumPartial}},
		{name: "tso/tcp4-mss-below-room", pkt: wirePacket(tcp4(20000, true)), mtu: mtu, mss: 1000, want: wireWant{kind: GSOTCPv4, gso: 1000, needs: true, csum: CsumPartial}},
		{name: "tso/tcp4-mss-above-room", pkt: wirePacket(tcp4(20000, true)), mtu: mtu, mss: 8960, want: wireWant{kind: GSOTCPv4, gso: 1460, needs: true, csum: CsumPartial}},
		{name: "tso/tcp4-cwr-ecn", pkt: wirePacket(with(tcp4(20000, true), func(s *superSpec) { s.tcpFlags = flagACK | flagCWR | flagECE })), mtu: mtu,
			want: wireWant{kind: GSOTCPv4 | GSOECN, gso: 1460, needs: true, csum: CsumPartial}},
		{name: "tso/tcp4-ece-only", pkt: wirePacket(with(tcp4(20000, true), func(s *superSpec) { s.tcpFlags = flagACK | flagECE | flagPSH | flagFIN })), mtu: mtu,
			want: wireWant{kind: GSOTCPv4, gso: 1460, needs: true, csum: CsumPartial}},
		{name: "tso/tcp4-jumbo-to-1500", pkt: wirePacket(with(tcp4(8960, false), func(s *superSpec) { s.tcpOpts = tsOpt })), mtu: mtu,
			want: wireWant{kind: GSOTCPv4, gso: 1448, csum: CsumComplete}},
		{name: "tso/tcp4-mtu-576", pkt: wirePacket(tcp4(big4, true)), mtu: 576, want: wireWant{kind: GSOTCPv4, gso: 536, needs: true, csum: CsumPartial}},
		{name: "tso/tcp4-to-jumbo", pkt: wirePacket(tcp4(big4, true)), mtu: 9000, want: wireWant{kind: GSOTCPv4, gso: 8960, needs: true, csum: CsumPartial}},
		{name: "tso/tcp6-64k-partial", pkt: wirePacket(tcp6(big6, true)), mtu: mtu, want: wireWant{kind: GSOTCPv6, gso: 1440, needs: true, csum: CsumPartial}},
		{name: "tso/tcp6-complete", pkt: wirePacket(tcp6(30000, false)), mtu: mtu, want: wireWant{kind: GSOTCPv6, gso: 1440, csum: CsumComplete}},
		{name: "tso/tcp6-ext-options", pkt: wirePacket(with(tcp6(30000, true), func(s *superSpec) { s.ext = exts; s.tcpOpts = tsOpt })), mtu: mtu,
			want: wireWant{kind: GSOTCPv6, gso: 1500 - 64 - 32, needs: true, csum: CsumPartial}},
		{name: "tso/tcp6-cwr-ecn", pkt: wirePacket(with(tcp6(30000, false), func(s *superSpec) { s.tcpFlags = flagACK | flagCWR })), mtu: 1280,
			want: wireWant{kind: GSOTCPv6 | GSOECN, gso: 1220, csum: CsumComplete}},
		{name: "tso/tcp6-bad", pkt: corruptLast(wirePacket(tcp6(3000, false))), mtu: 1280, want: wireWant{err: ErrBadChecksum, csum: CsumBad}},
		{name: "tso/tcp6-routing-left", pkt: withIPv6RoutingLeft(wirePacket(with(tcp6(3000, true), func(s *superSpec) { s.ext = routing })), 40), mtu: 1280, want: tooBig},
		{name: "tso/syn", pkt: wirePacket(with(tcp4(3000, true), func(s *superSpec) { s.tcpFlags = flagSYN })), mtu: mtu, want: tooBig},
		{name: "tso/rst", pkt: wirePacket(with(tcp4(3000, true), func(s *superSpec) { s.tcpFlags = flagRST | flagACK })), mtu: mtu, want: tooBig},
		{name: "tso/headers-exceed-mtu", pkt: wirePacket(with(tcp4(3000, true), func(s *superSpec) { s.ipOpts = opts40; s.tcpOpts = opts40 })), mtu: 120, want: tooBig},
		{name: "tso/too-many-segments", pkt: wirePacket(with(tcp4(65535-120, true), func(s *superSpec) { s.ipOpts = opts40; s.tcpOpts = opts40 })), mtu: 576, seg: &Segmenter{MaxSegments: 128}, want: invalidRule(ruleTooManySegments)},
		{name: "tso/more-segments-allowed", pkt: wirePacket(with(tcp4(65535-120, true), func(s *superSpec) { s.ipOpts = opts40; s.tcpOpts = opts40 })), mtu: 576,
			want: wireWant{kind: GSOTCPv4, gso: 456, needs: true, csum: CsumPartial}},
		{name: "tso/tiny-mss", pkt: wirePacket(tcp4(20000, true)), mtu: mtu, mss: 48, want: wireWant{kind: GSOTCPv4, gso: 48, needs: true, csum: CsumPartial}},
		{name: "tso/bad-data-offset", pkt: func() []byte { p := wirePacket(tcp4(3000, true)); p[20+12] = 0x40; return p }(), mtu: mtu, want: invalidRule(ruleTransport)},
		{name: "tso/ipv4-fragment", pkt: setIPv4FragField(wirePacket(tcp4(3000, false)), ipv4MF|ipv4DF), mtu: mtu, want: tooBig},
		{name: "tso/ipv4-source-route", pkt: wirePacket(with(tcp4(3000, true), func(s *superSpec) { s.ipOpts = []byte{ipv4OptSSRR, 7, 4, 198, 19, 1, 1, 0} })), mtu: mtu, want: tooBig},

		// UDP larger than the MTU.
		{name: "ufo/udp4-complete", pkt: wirePacket(udp4(20000, false, false)), mtu: mtu, want: wireWant{kind: GSOUDP, gso: 1480, csum: CsumComplete}},
		{name: "ufo/udp4-partial", pkt: wirePacket(udp4(20000, true, false)), mtu: mtu, want: wireWant{kind: GSOUDP, gso: 1480, needs: true, csum: CsumPartial}},
		{name: "ufo/udp4-no-checksum", pkt: setL4Csum(wirePacket(udp4(5000, false, false)), 20, 0), mtu: mtu, want: wireWant{kind: GSOUDP, gso: 1480, csum: CsumNone}},
		{name: "ufo/udp4-64k", pkt: wirePacket(udp4(65535-28, true, false)), mtu: mtu, want: wireWant{kind: GSOUDP, gso: 1480, needs: true, csum: CsumPartial}},
		{name: "ufo/udp4-ip-options", pkt: wirePacket(with(udp4(5000, false, false), func(s *superSpec) { s.ipOpts = ipOptsNOP })), mtu: mtu, want: wireWant{kind: GSOUDP, gso: 1472, csum: CsumComplete}},
		{name: "ufo/udp4-odd-mtu", pkt: wirePacket(udp4(5000, false, false)), mtu: 1499, want: wireWant{kind: GSOUDP, gso: 1472, csum: CsumComplete}},
		{name: "ufo/udp4-mtu-68", pkt: wirePacket(udp4(400, true, false)), mtu: 68, want: wireWant{kind: GSOUDP, gso: 48, needs: true, csum: CsumPartial}},
		{name: "ufo/udp4-jumbo-to-1500", pkt: wirePacket(udp4(8972, false, false)), mtu: mtu, want: wireWant{kind: GSOUDP, gso: 1480, csum: CsumComplete}},
		{name: "ufo/udp4-bad", pkt: corruptLast(wirePacket(udp4(5000, false, false))), mtu: mtu, want: wireWant{err: ErrBadChecksum, csum: CsumBad}},
		{name: "ufo/udp4-bad-length", pkt: func() []byte { p := wirePacket(udp4(3000, true, false)); p[20+5]++; return p }(), mtu: mtu, want: invalidRule(ruleTransport)},
		{name: "ufo/many-fragments", pkt: wirePacket(udp4(20000, true, false)), mtu: 68, want: wireWant{kind: GSOUDP, gso: 48, needs: true, csum: CsumPartial}},
		{name: "ufo/too-many-fragments", pkt: wirePacket(udp4(20000, true, false)), mtu: 68, seg: &Segmenter{MaxSegments: 128}, want: invalidRule(ruleTooManySegments)},
		{name: "toobig/udp4-df", pkt: wirePacket(udp4(5000, false, true)), mtu: mtu, want: tooBig},
		{name: "toobig/udp6", pkt: wirePacket(udp6(5000, true)), mtu: mtu, want: tooBig},
		{name: "toobig/udp6-1280", pkt: wirePacket(udp6(1300, false)), mtu: 1280, want: tooBig},
		{name: "toobig/icmp4-df", pkt: rawIP(false, 1, 3000, true), mtu: mtu, want: tooBig},
		{name: "toobig/icmp4-no-df", pkt: rawIP(false, 1, 3000, false), mtu: mtu, want: tooBig},
		{name: "toobig/gre6", pkt: rawIP(true, 47, 3000, false), mtu: mtu, want: tooBig},
		{name: "toobig/ipv4-udp-fragment", pkt: setIPv4FragField(wirePacket(udp4(5000, false, false)), ipv4MF|1), mtu: mtu, want: tooBig},
		{name: "toobig/ipv6-fragment", pkt: wirePacket(with(tcp6(5000, true), func(s *superSpec) { s.ext = []extHdr{{extFragment, 8}} })), mtu: mtu, want: tooBig},

		// What the receiving kernel said (ForWireFrom): its gso_size caps
		// TCP's; a USO super-packet stays a run of datagrams.
		{name: "from/tcp4-gso-below-room", pkt: wirePacket(tcp4(20000, true)), mtu: mtu, from: Header{GSOType: GSOTCPv4, GSOSize: 1200},
			want: wireWant{kind: GSOTCPv4, gso: 1200, needs: true, csum: CsumPartial}},
		{name: "from/tcp4-mss-below-gso", pkt: wirePacket(tcp4(20000, true)), mtu: mtu, mss: 1000, from: Header{GSOType: GSOTCPv4, GSOSize: 1200},
			want: wireWant{kind: GSOTCPv4, gso: 1000, needs: true, csum: CsumPartial}},
		{name: "from/tcp4-gso-above-room", pkt: wirePacket(tcp4(20000, true)), mtu: 1280, from: Header{GSOType: GSOTCPv4, GSOSize: 1448},
			want: wireWant{kind: GSOTCPv4, gso: 1240, needs: true, csum: CsumPartial}},
		{name: "from/tcp6-ecn-gso", pkt: wirePacket(tcp6(30000, true)), mtu: mtu, from: Header{GSOType: GSOTCPv6 | GSOECN, GSOSize: 1300},
			want: wireWant{kind: GSOTCPv6, gso: 1300, needs: true, csum: CsumPartial}},
		{name: "from/tcp4-fits", pkt: wirePacket(tcp4(1000, true)), mtu: mtu, from: Header{GSOType: GSOTCPv4, GSOSize: 500}, want: partialNone},
		{name: "from/tcp-header-on-udp", pkt: wirePacket(udp4(20000, true, false)), mtu: mtu, from: Header{GSOType: GSOTCPv4, GSOSize: 1000},
			want: wireWant{kind: GSOUDP, gso: 1480, needs: true, csum: CsumPartial}},
		{name: "from/uso4", pkt: wirePacket(udp4(14000, true, true)), mtu: mtu, from: Header{GSOType: GSOUDPL4, GSOSize: 1400},
			want: wireWant{kind: GSOUDPL4, gso: 1400, needs: true, csum: CsumPartial}},
		{name: "from/uso4-fits-mtu", pkt: wirePacket(udp4(1000, true, true)), mtu: mtu, from: Header{GSOType: GSOUDPL4, GSOSize: 500},
			want: wireWant{kind: GSOUDPL4, gso: 500, needs: true, csum: CsumPartial}},
		{name: "from/uso4-one-datagram", pkt: wirePacket(udp4(500, true, true)), mtu: mtu, from: Header{GSOType: GSOUDPL4, GSOSize: 500}, want: partialNone},
		{name: "from/uso6", pkt: wirePacket(udp6(30000, true)), mtu: mtu, from: Header{GSOType: GSOUDPL4, GSOSize: 1200},
			want: wireWant{kind: GSOUDPL4, gso: 1200, needs: true, csum: CsumPartial}},
		{name: "from/uso-datagrams-too-big", pkt: wirePacket(udp4(14000, true, false)), mtu: 1280, from: Header{GSOType: GSOUDPL4, GSOSize: 1400}, want: tooBig},
		{name: "from/uso-complete-checksum", pkt: wirePacket(udp4(14000, false, true)), mtu: mtu, from: Header{GSOType: GSOUDPL4, GSOSize: 1400},
			want: wireWant{rule: ruleNeedsCsum, csum: CsumComplete}},
		{name: "from/uso-too-many-datagrams", pkt: wirePacket(udp4(20000, true, true)), mtu: mtu, from: Header{GSOType: GSOUDPL4, GSOSize: 100}, want: invalidRule(ruleTooManySegments)},
		{name: "from/uso-header-on-tcp", pkt: wirePacket(tcp4(20000, true)), mtu: mtu, from: Header{GSOType: GSOUDPL4, GSOSize: 1000},
			want: wireWant{kind: GSOTCPv4, gso: 1460, needs: true, csum: CsumPartial}},

		// Malformed packets.
		{name: "bad/empty", pkt: nil, mtu: mtu, want: invalidRule(ruleShortPacket)},
		{name: "bad/version", pkt: func() []byte { p := wirePacket(tcp4(10, true)); p[0] = 0x55; return p }(), mtu: mtu, want: invalidRule(ruleIPHeader)},
		{name: "bad/short-ipv4", pkt: wirePacket(tcp4(10, true))[:19], mtu: mtu, want: invalidRule(ruleShortPacket)},
		{name: "bad/ihl", pkt: func() []byte { p := wirePacket(tcp4(10, true)); p[0] = 0x44; return p }(), mtu: mtu, want: invalidRule(ruleIPHeader)},
		{name: "bad/ipv4-total-length", pkt: append(wirePacket(tcp4(10, true)), 0, 0, 0, 0), mtu: mtu, want: invalidRule(ruleIPLength)},
		{name: "bad/ipv4-header-checksum", pkt: func() []byte { p := wirePacket(tcp4(10, true)); p[8]--; return p }(), mtu: mtu, want: invalidRule(ruleIPChecksum)},
		{name: "bad/ipv6-payload-length", pkt: wirePacket(tcp6(100, true))[:130], mtu: mtu, want: invalidRule(ruleIPLength)},
		{name: "bad/ipv6-truncated-ext", pkt: func() []byte {
			p := wirePacket(with(udp6(0, true), func(s *superSpec) { s.ext = []extHdr{{extDestOpts, 8}} }))
			p[41] = 9 // 80 bytes
			return p
		}(), mtu: mtu, want: invalidRule(ruleExtHeader)},
		{name: "bad/small-mtu", pkt: wirePacket(tcp4(10, true)), mtu: 67, want: wireWant{rule: ruleSmallMTU}},
	}
}

func TestForWire(t *testing.T) {
	for _, c := range wireCases() {
		t.Run(c.name, func(t *testing.T) {
			s := c.seg
			if s == nil {
				s = &Segmenter{}
			}
			in := bytes.Clone(c.pkt)
			h, st, err := s.ForWireFrom(c.pkt, c.mtu, c.mss, c.from)
			if !bytes.Equal(in, c.pkt) {
				t.Fatal("ForWire modified its input")
			}
			w := c.want
			if st != w.csum {
				t.Errorf("checksum state %v, want %v", st, w.csum)
			}
			switch {
			case w.tooBig:
				var tb *tooBigError
				if !errors.Is(err, ErrTooBig) || !errors.As(err, &tb) || tb.mtu != c.mtu {
					t.Fatalf("error %v, want a tooBigError with MTU %d", err, c.mtu)
				}
				if errors.Is(err, ErrInvalid) {
					t.Fatalf("error %v matches ErrInvalid", err)
				}
				return
			case w.err != nil:
				if !errors.Is(err, w.err) {
					t.Fatalf("error %v, want %v", err, w.err)
				}
				return
			case w.rule != 0:
				if !broke(err, w.rule) {
					t.Fatalf("error %v, want the rule %v", err, w.rule)
				}
				if w.rule != ruleSmallMTU && !errors.Is(err, ErrInvalid) {
					t.Fatalf("error %v does not match ErrInvalid", err)
				}
				return
			case err != nil:
				t.Fatalf("ForWire: %v", err)
			}
			if w.zeroHdr {
				if h != (Header{}) {
					t.Fatalf("header %+v, want all zero", h)
				}
			} else if h.GSOType != w.kind || int(h.GSOSize) != w.gso || h.NeedsCsum() != w.needs {
				t.Fatalf("header %+v, want gso_type %v gso_size %d NEEDS_CSUM %v", h, w.kind, w.gso, w.needs)
			}
			if w.needs {
				l3 := l3Of(t, c.pkt)
				off := tcpCsumOffset
				if proto(c.pkt) == protoUDP {
					off = udpCsumOffset
				}
				if int(h.CsumStart) != l3 || int(h.CsumOffset) != off {
					t.Fatalf("csum_start %d csum_offset %d, want %d %d", h.CsumStart, h.CsumOffset, l3, off)
				}
			}
			checkWireSplit(t, s, c.pkt, h, c.mtu, c.mss)
		})
	}
}

// checkWireSplit validates and splits pkt with the header ForWire gave it
// and checks the segments: the package's invariants (checkSplit, with
// gVisor's checksum), every packet at most mtu bytes and at most mss
// bytes of TCP payload.
func checkWireSplit(t testing.TB, s *Segmenter, pkt []byte, h Header, mtu, mss int) [][]byte {
	t.Helper()
	l, segs, err := splitFresh(s, pkt, h)
	if err != nil {
		t.Fatalf("header %+v: %v", h, err)
	}
	if err := checkSplit(pkt, l, segs, false); err != nil {
		t.Fatalf("header %+v, layout %+v: %v", h, l, err)
	}
	for i, seg := range segs {
		if len(seg) > mtu {
			t.Fatalf("segment %d: %d bytes > mtu %d", i, len(seg), mtu)
		}
		if l.kind.Kind() == GSOTCPv4 || l.kind.Kind() == GSOTCPv6 {
			if p := len(seg) - l.HdrLen(); mss > 0 && p > mss {
				t.Fatalf("segment %d: %d bytes of payload > mss %d", i, p, mss)
			}
		}
	}
	if l.kind == GSONone && !l.needsCsum && !bytes.Equal(segs[0], pkt) {
		t.Fatal("a packet that fits changed")
	}
	return segs
}

// TestForWirePartialForms checks the two forms of a partial checksum whose
// pseudo-header sum folds to 0xffff: Linux writes 0xffff (the raw sum
// ~csum_fold leaves), another sender may write 0.
func TestForWirePartialForms(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		// The source address's last 16 bits take every value: one of them
		// makes the pseudo-header sum fold to 0xffff.
		var pkt []byte
		for i := range 1 << 16 {
			s := superSpec{v6: v6, proto: tcp, payload: 100, needsCsum: true, seed: 3}
			if v6 {
				a := defaultSrc6.As16()
				a[14], a[15] = byte(i>>8), byte(i)
				s.src = netip.AddrFrom16(a)
			} else {
				s.src = netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})
			}
			p := wirePacket(s)
			l3 := l3Of(t, p)
			src, dst := addrs(p, v6)
			if header.PseudoHeaderChecksum(header.TCPProtocolNumber, src, dst, uint16(len(p)-l3)) == 0xffff {
				pkt = p
				break
			}
		}
		if pkt == nil {
			t.Fatal("no packet with a pseudo-header sum of 0xffff")
		}
		l3 := l3Of(t, pkt)
		for _, form := range []uint16{0xffff, 0} {
			p := setL4Csum(bytes.Clone(pkt), l3, form)
			for _, payload := range []int{0, 20000} {
				if payload > 0 { // a super-packet of the same flow
					p = append(p, make([]byte, payload)...)
					if v6 {
						binary.BigEndian.PutUint16(p[4:], uint16(len(p)-40))
					} else {
						header.IPv4(p).SetTotalLength(uint16(len(p)))
						header.IPv4(p).SetChecksum(0)
						header.IPv4(p).SetChecksum(^header.IPv4(p).CalculateChecksum())
					}
					// The longer transport length changes the
					// pseudo-header sum: the field gets the new one.
					src, dst := addrs(p, v6)
					setL4Csum(p, l3, header.PseudoHeaderChecksum(header.TCPProtocolNumber, src, dst, uint16(len(p)-l3)))
				}
				h, st, err := std.ForWire(p, 1500, 0)
				if err != nil || st != CsumPartial || !h.NeedsCsum() {
					t.Fatalf("v6=%v form %#04x payload %d: header %+v, %v, %v; want partial", v6, form, payload, h, st, err)
				}
				checkWireSplit(t, &Segmenter{}, p, h, 1500, 0)
			}
		}
	}
}

// TestForWireCoincidence: a complete checksum that equals the
// pseudo-header sum is taken for a partial one, and completing it writes
// the same bytes back.
func TestForWireCoincidence(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, payload := range []int{500, 20000} {
			pkt := wirePacket(superSpec{v6: v6, proto: tcp, payload: payload, seed: 9, df: true})
			l3 := l3Of(t, pkt)
			l4 := pkt[l3:]
			src, dst := addrs(pkt, v6)
			ps := header.PseudoHeaderChecksum(header.TCPProtocolNumber, src, dst, uint16(len(l4)))
			binary.BigEndian.PutUint16(l4[16:], ps)
			// Make the checksum verify with the field left at ps: add to
			// the first payload word what the sum lacks to be 0xffff.
			lack := ^checksum.Checksum(l4, ps)
			v := uint32(binary.BigEndian.Uint16(l4[20:])) + uint32(lack)
			v = v&0xffff + v>>16
			binary.BigEndian.PutUint16(l4[20:], uint16(v))
			if c := checksum.Checksum(l4, ps); c != 0xffff {
				t.Fatalf("could not make the checksum verify: %#04x", c)
			}
			h, st, err := std.ForWire(pkt, 1500, 0)
			if err != nil || st != CsumPartial {
				t.Fatalf("v6=%v payload %d: %v %v, want partial", v6, payload, st, err)
			}
			segs := checkWireSplit(t, &Segmenter{}, pkt, h, 1500, 0)
			if len(segs) == 1 && !bytes.Equal(segs[0], pkt) {
				t.Fatalf("v6=%v: completing a coinciding complete checksum changed the packet", v6)
			}
		}
	}
}

// TestForWireAllocs: no allocation on any path that returns a header,
// nor for a run of packets too big for one MTU.
func TestForWireAllocs(t *testing.T) {
	for _, c := range wireCases() {
		if c.want.err != nil || c.want.rule != 0 {
			continue
		}
		s := c.seg
		if s == nil {
			s = &Segmenter{}
		}
		s.ForWireFrom(c.pkt, c.mtu, c.mss, c.from) // caches the tooBigError
		if n := testing.AllocsPerRun(20, func() { s.ForWireFrom(c.pkt, c.mtu, c.mss, c.from) }); n != 0 {
			t.Errorf("%s: %v allocations", c.name, n)
		}
	}
}

func TestCsumStateString(t *testing.T) {
	for st, want := range map[CsumState]string{CsumNone: "none", CsumComplete: "complete", CsumPartial: "partial", CsumBad: "bad", 9: "CsumState(9)"} {
		if got := st.String(); got != want {
			t.Errorf("%d: %q, want %q", st, got, want)
		}
	}
	if got := (&tooBigError{mtu: 1280}).Error(); got != "segment: packet larger than the MTU 1280 cannot be cut" {
		t.Errorf("tooBigError: %q", got)
	}
}
