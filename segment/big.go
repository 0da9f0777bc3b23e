package segment

import "encoding/binary"

// BIG TCP super-packets (Linux 5.19 for IPv6, 6.3 for IPv4) are longer
// than an IP length field can say: the IPv4 total length is 0, the IPv6
// payload length is 0, and the packet is as long as its buffer. A packet
// socket shows an IPv6 one with a Hop-by-Hop header holding only a Jumbo
// Payload option (RFC 2675) right behind the IPv6 header, as Linux 6.18
// inserts it for taps; a kernel that no longer inserts it hands the
// packet over without.
const (
	maxLegacyLen = 65535 // the longest IP length an IP header can give
	jumboHdrLen  = 8     // Hop-by-Hop header with a Jumbo Payload option
	optJumbo     = 0xc2  // the Jumbo Payload option's type
)

// IsBig reports whether pkt is a BIG TCP packet's shape: an IP header
// whose length field is 0 in front of more bytes than the field could
// give (IPv4: a packet of more than 65535 bytes; IPv6: more than 65535
// bytes behind the fixed header).
func IsBig(pkt []byte) bool {
	switch {
	case len(pkt) > ipv4MinLen && pkt[0]>>4 == 4:
		return len(pkt) > maxLegacyLen && binary.BigEndian.Uint16(pkt[ipv4TotalOff:]) == 0
	case len(pkt) > ipv6Len && pkt[0]>>4 == 6:
		return len(pkt)-ipv6Len > maxLegacyLen && binary.BigEndian.Uint16(pkt[ipv6PLenOff:]) == 0
	}
	return false
}

// ValidateBig checks a BIG TCP super-packet (IsBig) and its virtio-net
// header, a TSO header, by Validate's rules but for the IP length, and
// returns the layout of its cut into TSO super-packets of at most maxLen
// bytes (and at most 65535: the IP length fields must say it again): the
// same split as into segments, in steps of a whole number of gso_size
// segments. Split writes them (with partial checksums, whatever the
// Segmenter's Partial) and Layout.SegmentHeader describes each: the
// input's GSO type and gso_size. An IPv6 packet's Jumbo Payload header
// is taken out first, in place, as the kernel's GSO does: the packet to
// split is the returned slice, the IPv6 header moved to its front. The
// Segmenter's cap applies to the segments of each packet the cut makes,
// and to their number.
func (s *Segmenter) ValidateBig(pkt []byte, h Header, maxLen int) ([]byte, Layout, error) {
	var l Layout
	if !IsBig(pkt) {
		return pkt, l, invalid(ruleIPLength, "%d-byte packet: not a BIG TCP packet", len(pkt))
	}
	if k := h.GSOType.Kind(); (k != GSOTCPv4 && k != GSOTCPv6) || h.GSOType&gsoTunnel != 0 {
		return pkt, l, invalid(ruleGSOType, "gso_type %v on a BIG TCP packet", h.GSOType)
	}
	if pkt[0]>>4 == 6 && pkt[ipv6NextOff] == protoHopByHop {
		if !isJumboHdr(pkt) {
			return pkt, l, invalid(ruleExtHeader, "BIG TCP packet without a Jumbo Payload header of its length")
		}
		next := pkt[ipv6Len]
		copy(pkt[jumboHdrLen:], pkt[:ipv6Len])
		pkt = pkt[jumboHdrLen:]
		pkt[ipv6NextOff] = next
		h.CsumStart -= min(h.CsumStart, jumboHdrLen)
		h.HdrLen -= min(h.HdrLen, jumboHdrLen)
	}
	l, err := validate(pkt, h, s.MaxSegments, min(maxLen, maxLegacyLen))
	return pkt, l, err
}

// isJumboHdr reports an IPv6 packet whose Hop-by-Hop header holds only
// a Jumbo Payload option with the packet's length.
func isJumboHdr(pkt []byte) bool {
	hbh := pkt[ipv6Len:]
	return len(hbh) >= jumboHdrLen && hbh[1] == 0 && hbh[2] == optJumbo && hbh[3] == 4 &&
		int(binary.BigEndian.Uint32(hbh[4:])) == len(hbh)
}
