package segment

import (
	"encoding/binary"
	"errors"
	"strconv"
	"sync/atomic"
)

// This file describes packets that arrive without a virtio-net header (an
// AF_XDP port, whose peer may be a veth doing TSO or a jumbo-frame link)
// with the header that makes Split cut them to the egress MTU, the way
// Linux's forwarding path would treat them.

// MinMTU is the smallest MTU ForWire accepts: every IPv4 link carries 68
// bytes (RFC 791).
const MinMTU = 68

// ErrTooBig matches the error ForWire returns for a packet that is larger
// than the MTU and cannot be cut: the caller drops it and answers with an
// ICMP fragmentation needed or ICMPv6 packet too big carrying the MTU it
// gave ForWire, which the error's message names.
var ErrTooBig = errors.New("segment: packet larger than the MTU cannot be cut")

// ErrBadChecksum is returned by ForWire for a packet larger than the MTU
// whose transport checksum is neither complete and correct nor a partial
// checksum: cutting it would compute fresh checksums over data that is
// known to be corrupt. The caller drops it and counts it; its receiver
// would have dropped it too.
var ErrBadChecksum = errors.New("segment: packet to be cut has a bad transport checksum")

// tooBigError is the error ForWire returns for a packet larger than the
// MTU that it cannot cut. It matches ErrTooBig. ForWire may return the same
// *tooBigError for many packets.
type tooBigError struct {
	mtu int // the MTU to report in the ICMP error
}

func (e *tooBigError) Error() string {
	return "segment: packet larger than the MTU " + strconv.Itoa(e.mtu) + " cannot be cut"
}

func (e *tooBigError) Unwrap() error { return ErrTooBig }

// lastTooBig caches the last tooBigError, so that a run of packets too big
// for one MTU does not allocate one error each.
var lastTooBig atomic.Pointer[tooBigError]

func tooBig(mtu int) error {
	if e := lastTooBig.Load(); e != nil && e.mtu == mtu {
		return e
	}
	e := &tooBigError{mtu: mtu}
	lastTooBig.Store(e)
	return e
}

// CsumState is what ForWire found in a packet's transport checksum field.
type CsumState uint8

const (
	// CsumNone: there is no transport checksum ForWire can judge from the
	// bytes: not TCP or UDP, an IP fragment, UDP over IPv4 with a zero
	// (absent) checksum, a source-routed packet (its pseudo-header uses a
	// destination the header does not show), or a transport header that
	// does not parse in a packet that passes through whole.
	CsumNone CsumState = iota
	// CsumComplete: the checksum verifies.
	CsumComplete
	// CsumPartial: the field holds the folded pseudo-header sum over the
	// transport length, as a Linux sender leaves it with CHECKSUM_PARTIAL
	// (__tcp_v4_send_check, udp4_hwcsum, __tcp_v6_send_check,
	// udp6_hwcsum_outgoing all write ~csum_fold(pseudo) = the raw sum);
	// 0 and 0xffff count as the same sum. The header ForWire returns has
	// NEEDS_CSUM, so Split completes it.
	CsumPartial
	// CsumBad: neither. A packet that fits passes on unchanged (its
	// receiver drops it); the caller should count it.
	CsumBad
)

func (c CsumState) String() string {
	switch c {
	case CsumNone:
		return "none"
	case CsumComplete:
		return "complete"
	case CsumPartial:
		return "partial"
	case CsumBad:
		return "bad"
	}
	return "CsumState(" + strconv.Itoa(int(c)) + ")"
}

// ForWire returns the virtio-net header for pkt, a whole IPv4 or IPv6
// packet as received from the wire (no link-layer header, no Ethernet
// padding: the IPv4 total length or IPv6 payload length must match
// len(pkt)), such that s.Validate(pkt, h) succeeds and s.Split cuts it into
// packets of at most mtu bytes, as Linux's forwarding path would send it
// on (ip_forward, ip_finish_output_gso, ip_do_fragment). It also says what
// it found in the transport checksum. mss, if positive, caps the TCP
// payload per segment (see TCP.SegmentMSS); mtu must be at least MinMTU.
//
// A packet that fits (len(pkt) <= mtu) gets GSONone: with NEEDS_CSUM at the
// transport checksum when that holds a partial checksum, so that Split
// completes it, and an all-zero header otherwise (Split copies it as is,
// bad checksums included).
//
// A larger packet is cut when Linux would cut it:
//
//   - TCP (IPv4 with or without DF, IPv6): TSO, GSOTCPv4 or GSOTCPv6, with
//     the ECN flag when it carries CWR (as tcp_gro_complete marks a
//     super-packet SKB_GSO_TCP_ECN; Split keeps CWR on the first segment
//     only, as tcp_gso_segment does for it). gso_size is mtu minus the IP
//     header and the TCP header, capped by mss. Every segment repeats the
//     whole IP header with its IPv4 options or IPv6 extension headers and
//     the whole TCP header with its options, so they count against mtu:
//     no segment is longer than mtu. NEEDS_CSUM is set only for a partial
//     checksum; Split computes the others from scratch. A SYN or RST
//     larger than mtu is not cut (every segment would repeat the flag):
//     ErrTooBig.
//   - UDP over IPv4 with DF clear: UFO, GSOUDP, gso_size the largest
//     multiple of 8 bytes of the datagram per fragment that fits mtu
//     after the IPv4 header ((mtu - IHL) &^ 7, as ip_do_fragment cuts);
//     Split computes the UDP checksum over the whole datagram (a zero,
//     absent, checksum gains one) and cuts it into fragments that share
//     the IPv4 ID, with MF on all but the last.
//
// Anything else larger than mtu returns an error matching ErrTooBig that
// names the mtu: IPv4 with DF set that is not TCP, IPv6 that is
// not TCP (IPv6 routers never fragment), an IPv4 fragment or an IPv6
// packet with a Fragment header, other protocols, a source-routed packet,
// and a TCP packet whose headers leave no room in mtu. Linux answers the
// DF and IPv6 cases with ICMP fragmentation needed / packet too big; it
// would fragment an IPv4 packet with DF clear that is not UDP, or an IPv4
// fragment, which Split cannot do: no ICMP is due for those (IPv4 without
// DF), so the caller drops them (internal/icmperr.Build writes nothing
// for them).
//
// A TCP packet Linux would not have resegmented (a 9000-byte segment with
// DF from a jumbo-frame link, which ip_forward answers with ICMP
// fragmentation needed) is resegmented here: from the bytes alone it
// cannot be told apart from a super-packet a TSO peer handed over.
//
// Checksums are judged as CsumState says: the field is first compared with
// the pseudo-header sum (cost: the 12 or 36 bytes of the pseudo-header);
// only if it differs is the whole transport payload summed to verify it
// (one pass at memory speed with the AVX2 kernel). Treating an equal field
// as partial is always right: for a complete checksum that happens to equal
// the pseudo-header sum, completing it writes the same value back. So a
// super-packet from a TSO peer, which always carries a partial checksum,
// costs no pass; a packet with a complete checksum (a NIC delivered it)
// costs one, bounded by the ingress MTU. A packet larger than mtu with a
// bad checksum is refused with ErrBadChecksum (cutting it would hide the
// corruption); one that fits passes unchanged with CsumBad.
//
// Malformed input, and more segments than the Segmenter's cap, return an
// *Error matching ErrInvalid that names the rule, as Validate does; an
// mtu below MinMTU returns an *Error that does not match it. The
// CsumState is meaningful when the error is nil or ErrBadChecksum.
// ForWire does not modify pkt and never panics. It does not allocate,
// except for an *Error and for the first ErrTooBig error of an mtu (the
// last one is reused).
//
// Not supported: IPv4 or IPv6 BIG TCP packets over 64 KiB (their length
// fields are 0: malformed), and AccECN flows, whose CWR flag is part of a
// counter that Split would clear on all but the first segment (Linux marks
// their super-packets SKB_GSO_TCP_ACCECN and keeps CWR; virtio-net has no
// such flag).
func (s *Segmenter) ForWire(pkt []byte, mtu, mss int) (Header, CsumState, error) {
	return s.ForWireFrom(pkt, mtu, mss, Header{})
}

// ForWireFrom is ForWire for a packet whose receiving kernel said what it
// is with from, its virtio-net header (an AF_PACKET socket with
// PACKET_VNET_HDR gives it: the sender's TSO or USO super-packet, or
// what GRO merged), as Linux's forwarding path keeps that skb's GSO
// state:
//
//   - TCP (GSOTCPv4, GSOTCPv6): from's gso_size, the size of the segments
//     the super-packet was built from, caps the TCP payload per segment
//     as mss does (the smaller wins), so a flow whose handshake was not
//     seen is still cut as its sender cut it.
//   - USO (GSOUDPL4): the packet is a run of datagrams, not one: it gets
//     a USO header of from's gso_size, whatever its length, and its
//     datagrams are never resized or fragmented. Datagrams larger than
//     mtu are ErrTooBig (a router may not resize them; Linux answers one
//     with DF set with fragmentation needed); a checksum other than a
//     partial one (which a kernel always leaves in a USO super-packet) is
//     an *Error matching ErrInvalid.
//
// Any other from, or a from that does not match the packet's transport,
// is ignored: the packet is judged from its bytes as ForWire does.
func (s *Segmenter) ForWireFrom(pkt []byte, mtu, mss int, from Header) (Header, CsumState, error) {
	if mtu < MinMTU {
		return Header{}, CsumNone, misuse(ruleSmallMTU, "MTU %d", mtu)
	}
	w, err := parseWire(pkt)
	if err != nil {
		return Header{}, CsumNone, err
	}
	switch kind, gso := from.GSOType.Kind(), int(from.GSOSize); {
	case gso == 0 || w.frag || w.opaque || w.l4 == 0:
	case kind == GSOUDPL4 && w.proto == protoUDP:
		return s.wireUSO(pkt, &w, mtu, gso)
	case (kind == GSOTCPv4 || kind == GSOTCPv6) && w.proto == protoTCP && (mss <= 0 || gso < mss):
		mss = gso
	}
	if len(pkt) <= mtu {
		st := w.csum(pkt)
		if st != CsumPartial {
			return Header{}, st, nil
		}
		return w.header(GSONone, 0, true), st, nil
	}
	switch {
	case w.frag || w.opaque:
		return Header{}, CsumNone, tooBig(mtu)
	case w.proto == protoTCP:
		return s.wireTSO(pkt, &w, mtu, mss)
	case w.proto == protoUDP && !w.v6 && !w.df:
		return s.wireUFO(pkt, &w, mtu)
	}
	return Header{}, CsumNone, tooBig(mtu)
}

// wireTSO describes a TCP packet larger than mtu as a TSO super-packet.
func (s *Segmenter) wireTSO(pkt []byte, w *wirePkt, mtu, mss int) (Header, CsumState, error) {
	if w.l4 == 0 {
		return Header{}, CsumNone, invalid(ruleTransport, "TCP header does not fit the %d bytes after the IP header", len(pkt)-w.l3)
	}
	flags := pkt[w.l3+tcpFlagsOff]
	gso := mtu - w.l3 - w.l4
	if flags&(tcpSYN|tcpRST) != 0 || gso < 1 {
		return Header{}, CsumNone, tooBig(mtu)
	}
	if mss > 0 && mss < gso {
		gso = mss
	}
	payload := len(pkt) - w.l3 - w.l4
	if n := (payload + gso - 1) / gso; s.tooMany(n) {
		return Header{}, CsumNone, invalid(ruleTooManySegments, "%d segments of %d bytes, at most %d", n, gso, s.MaxSegments)
	}
	st := w.csum(pkt)
	if st == CsumBad {
		return Header{}, st, ErrBadChecksum
	}
	kind := GSOTCPv4
	if w.v6 {
		kind = GSOTCPv6
	}
	if flags&tcpCWR != 0 {
		kind |= GSOECN
	}
	return w.header(kind, gso, st == CsumPartial), st, nil
}

// wireUFO describes a UDP datagram over IPv4 without DF, larger than mtu,
// as a UFO super-packet.
func (s *Segmenter) wireUFO(pkt []byte, w *wirePkt, mtu int) (Header, CsumState, error) {
	if w.l4 == 0 {
		return Header{}, CsumNone, invalid(ruleTransport, "UDP length disagrees with the %d bytes after the IP header", len(pkt)-w.l3)
	}
	gso := (mtu - w.l3) &^ 7 // at least 8: mtu >= 68, IHL <= 60
	data := len(pkt) - w.l3
	if n := (data + gso - 1) / gso; s.tooMany(n) {
		return Header{}, CsumNone, invalid(ruleTooManySegments, "%d fragments of %d bytes, at most %d", n, gso, s.MaxSegments)
	}
	st := w.csum(pkt)
	if st == CsumBad {
		return Header{}, st, ErrBadChecksum
	}
	return w.header(GSOUDP, gso, st == CsumPartial), st, nil
}

// wireUSO describes a UDP packet its receiving kernel had as a USO
// super-packet of datagrams of gso bytes as one again.
func (s *Segmenter) wireUSO(pkt []byte, w *wirePkt, mtu, gso int) (Header, CsumState, error) {
	if w.l3+w.l4+gso > mtu {
		return Header{}, CsumNone, tooBig(mtu)
	}
	payload := len(pkt) - w.l3 - w.l4
	most := udpMaxSegments
	if s.tooMany(most) {
		most = s.MaxSegments
	}
	if n := (payload + gso - 1) / gso; n > most {
		return Header{}, CsumNone, invalid(ruleTooManySegments, "%d datagrams of %d bytes, at most %d", n, gso, most)
	}
	st := w.csum(pkt)
	if st != CsumPartial {
		return Header{}, st, invalid(ruleNeedsCsum, "USO super-packet with a %v checksum, want a partial one", st)
	}
	if payload <= gso {
		return w.header(GSONone, 0, true), st, nil
	}
	return w.header(GSOUDPL4, gso, true), st, nil
}

// wirePkt is what ForWire needs to know about a packet.
type wirePkt struct {
	l3     int   // IP header with options / extension headers
	l4     int   // TCP or UDP header length; 0 if none that parses
	proto  uint8 // transport protocol (protoFragment for an IPv6 fragment)
	v6     bool
	frag   bool // IPv4 fragment or IPv6 Fragment header
	df     bool // IPv4 don't-fragment
	opaque bool // source-routed: the checksum cannot be judged
}

// parseWire checks the IP header as Validate does (an error matches
// ErrInvalid) and finds the transport header.
func parseWire(pkt []byte) (wirePkt, error) {
	var l Layout // GSONone without NEEDS_CSUM: fragments parse
	if err := parseIP(pkt, &l); err != nil {
		return wirePkt{}, err
	}
	w := wirePkt{l3: l.l3Len, proto: l.proto, v6: l.ipv6}
	if w.v6 {
		w.frag = w.proto == protoFragment
		w.opaque = w.l3 > ipv6Len && ipv6Routed(pkt, w.l3)
	} else {
		frag := binary.BigEndian.Uint16(pkt[ipv4FragOff:])
		w.frag = frag&0x3fff != 0
		w.df = frag&ipv4DF != 0
		w.opaque = w.l3 > ipv4MinLen && ipv4SourceRouted(pkt[ipv4MinLen:w.l3])
	}
	if w.frag || w.opaque {
		return w, nil
	}
	rest := len(pkt) - w.l3
	switch w.proto {
	case protoTCP:
		if rest >= tcpMinLen {
			if n := int(pkt[w.l3+12]>>4) * 4; n >= tcpMinLen && n <= rest {
				w.l4 = n
			}
		}
	case protoUDP:
		if rest >= udpLen && int(binary.BigEndian.Uint16(pkt[w.l3+udpLenOff:])) == rest {
			w.l4 = udpLen
		}
	}
	return w, nil
}

// csumOffset is the offset of the checksum field in the transport header.
func (w *wirePkt) csumOffset() int {
	if w.proto == protoUDP {
		return udpCsumOffset
	}
	return tcpCsumOffset
}

// header returns a virtio-net header for the packet.
func (w *wirePkt) header(kind GSOType, gso int, partial bool) Header {
	h := Header{GSOType: kind, GSOSize: uint16(gso), HdrLen: uint16(w.l3 + w.l4)}
	if partial {
		h.Flags = FlagNeedsCsum
		h.CsumStart = uint16(w.l3)
		h.CsumOffset = uint16(w.csumOffset())
	}
	return h
}

// csum judges the transport checksum.
func (w *wirePkt) csum(pkt []byte) CsumState {
	if w.l4 == 0 {
		return CsumNone
	}
	return l4Csum(pkt, w.l3, w.proto, w.v6)
}

// l4Csum judges the TCP or UDP checksum of pkt, whose transport header at
// l3 is whole (and, for UDP, whose length field covers the rest).
func l4Csum(pkt []byte, l3 int, proto uint8, v6 bool) CsumState {
	l4 := pkt[l3:]
	off := tcpCsumOffset
	if proto == protoUDP {
		off = udpCsumOffset
	}
	f := binary.BigEndian.Uint16(l4[off:])
	if proto == protoUDP && f == 0 && !v6 {
		return CsumNone // RFC 768: no checksum
	}
	ps := pseudoHeader(pkt, v6, proto, len(l4))
	if p := fold(ps); f == p || (f == 0 && p == 0xffff) {
		return CsumPartial
	}
	if fold(sum(l4, ps)) == 0xffff && (f != 0 || proto != protoUDP) {
		return CsumComplete
	}
	return CsumBad // including a zero UDP checksum over IPv6 (RFC 8200 8.1)
}

// IPv4 options that route the packet: its pseudo-header uses the final
// destination, not the header's (RFC 791, RFC 1122 4.1.3.6).
const (
	ipv4OptLSRR = 0x83
	ipv4OptSSRR = 0x89
)

// ipv4SourceRouted reports whether the IPv4 options carry a loose or
// strict source route.
func ipv4SourceRouted(opts []byte) bool {
	for i := 0; i < len(opts); {
		switch opts[i] {
		case 0: // end of options
			return false
		case 1: // no-op
			i++
			continue
		case ipv4OptLSRR, ipv4OptSSRR:
			return true
		}
		if i+1 >= len(opts) || opts[i+1] < 2 {
			return false
		}
		i += int(opts[i+1])
	}
	return false
}

// ipv6Routed reports whether the extension headers before l3 hold a
// routing header with segments left: the pseudo-header then uses the final
// destination (RFC 8200 8.1). Validate has checked the chain.
func ipv6Routed(pkt []byte, l3 int) bool {
	next, off := pkt[ipv6NextOff], ipv6Len
	for off < l3 {
		if next == protoRouting && pkt[off+3] != 0 {
			return true
		}
		if next == protoFragment {
			return false
		}
		next, off = pkt[off], off+(int(pkt[off+1])+1)*8
	}
	return false
}
