package segment

import "encoding/binary"

// Validate checks an untrusted packet and its virtio-net header, mirroring
// the Linux kernel (virtio_net_hdr_to_skb, then the IP, TCP and UDP GSO
// handlers), and returns its layout. hdr_len is never trusted: the header
// length is recomputed from the packet. Like the kernel, it caps the
// segments of a USO super-packet at 128 and of no other; a Segmenter can
// set a cap of its own (MaxSegments).
//
// Validate is stricter than the kernel where the kernel would accept a
// packet only to emit segments no receiver can use, or would quietly fix
// it up: TSO and USO refuse IPv4 fragments (the kernel copies MF and the
// offset into every segment), a UFO gso_size must be a multiple of 8 and
// UFO over IPv6 refuses extension headers (the kernel emits fragments that
// do not reassemble), the IPv4 total length or IPv6 payload length must
// match the buffer exactly (the kernel trims excess bytes), csum_start
// must be the transport header found by walking the IP headers (or, in a
// UDP packet passed through, a TCP or UDP checksum inside its payload: an
// encapsulated packet's), UDP
// checksums must sit at offset 6, and a TCP or UDP header must be whole
// even in a packet that is only passed through with NEEDS_CSUM.
//
// Like the kernel (tcp4_gso_segment, tcp6_gso_segment), TSO without
// NEEDS_CSUM is accepted: the segments' checksums are then computed from a
// fresh pseudo-header. USO requires NEEDS_CSUM, as in the kernel.
//
// A UDP-tunnel super-packet (GSOUDPTunnelIPv4 or GSOUDPTunnelIPv6 on top
// of GSOTCPv4, GSOTCPv6 or GSOUDPL4, a HeaderSizeTunnel header) is checked
// as the kernel's virtio_net_hdr_tnl_to_skb checks it — one tunnel flag,
// an inner TSO or USO type, NEEDS_CSUM, inner_nh_offset at least 8 bytes
// past outer_th_offset, csum_start past a minimal inner IP header — and
// then more strictly: outer_th_offset must be where the outer IP header
// of the flagged version ends and its protocol must be UDP, the outer IP
// length must match the buffer, inner_nh_offset must be even, and the
// inner packet must pass every rule above. The kernel also asks for an
// Ethernet header's 14 bytes before outer_th_offset, which a TUN
// device's packets (IP only) never have; Validate does not.
//
// Validate is the kernel's view of a packet written into a device: a
// tunnel flag is accepted whatever the device negotiated, and an outer
// checksum flag (FlagUDPTunnelCsum) likewise.
func Validate(pkt []byte, h Header) (Layout, error) {
	return std.Validate(pkt, h)
}

// Validate is the package Validate with the Segmenter's segment cap. It
// also draws the identification every IPv6 fragment of a UFO datagram
// shares, so that the chunks SplitFrom writes share it too.
func (s *Segmenter) Validate(pkt []byte, h Header) (Layout, error) {
	l, err := validate(pkt, h, s.MaxSegments, 0)
	if err == nil && l.kind == GSOUDP && l.ipv6 {
		l.fragID = s.nextFragID()
	}
	return l, err
}

// validate is Validate with a cap on segments; a positive bigLen takes a
// BIG TCP packet, whose IP length field is 0, and cuts it into TSO
// super-packets of at most bigLen bytes (ValidateBig).
func validate(pkt []byte, h Header, maxSegs, bigLen int) (Layout, error) {
	l, err := checkGSO(h)
	if err != nil {
		return l, err
	}
	l.big = bigLen > 0
	if int(h.HdrLen) > len(pkt) {
		return l, invalid(ruleHdrLen, "hdr_len %d, packet %d bytes", h.HdrLen, len(pkt))
	}
	if l.tunnel != 0 {
		err = parseTunnel(pkt, h, &l)
	} else {
		err = parsePacket(pkt, h, &l)
	}
	if err != nil {
		return l, err
	}
	if l.big {
		err = countBig(&l, maxSegs, bigLen)
	} else {
		err = count(pkt, &l, maxSegs)
	}
	if err != nil {
		return l, err
	}
	l.pktLen, l.valid = len(pkt), true
	return l, nil
}

// parsePacket checks the IP and transport headers of a packet that is not
// a tunnel packet, or of a tunnel packet's inner packet.
func parsePacket(pkt []byte, h Header, l *Layout) error {
	if err := parseIP(pkt, l); err != nil {
		return err
	}
	return checkTransport(pkt, h, l)
}

// checkGSO checks gso_type and gso_size on their own.
func checkGSO(h Header) (Layout, error) {
	l := Layout{kind: h.GSOType.Kind(), ecn: h.GSOType.ECN(), needsCsum: h.NeedsCsum(), tunnel: h.GSOType & gsoTunnel}
	if l.tunnel != 0 {
		if err := checkTunnelGSO(h, &l); err != nil {
			return l, err
		}
	}
	switch l.kind {
	case GSONone:
		if l.ecn {
			return l, invalid(ruleGSOType, "ECN flag without a GSO type")
		}
		return l, nil
	case GSOTCPv4, GSOTCPv6, GSOUDP:
	case GSOUDPL4:
		if l.ecn {
			return l, invalid(ruleGSOType, "ECN flag on udp_l4")
		}
	default:
		return l, invalid(ruleGSOType, "gso_type %#x", uint8(h.GSOType))
	}
	if h.GSOSize == 0 || h.GSOSize == gsoByFrags {
		return l, invalid(ruleGSOSize, "gso_size %d with gso_type %v", h.GSOSize, h.GSOType)
	}
	l.mss = int(h.GSOSize)
	return l, nil
}

// checkTunnelGSO checks the tunnel flags of gso_type and flags.
func checkTunnelGSO(h Header, l *Layout) error {
	switch {
	case l.tunnel == gsoTunnel:
		return invalid(ruleGSOType, "gso_type %v: both tunnel flags", h.GSOType)
	case l.kind != GSOTCPv4 && l.kind != GSOTCPv6 && l.kind != GSOUDPL4:
		return invalid(ruleGSOType, "gso_type %v: a UDP tunnel carries TSO or USO", h.GSOType)
	case !l.needsCsum:
		return invalid(ruleNeedsCsum, "gso_type %v without NEEDS_CSUM", h.GSOType)
	}
	l.tunnelCsum = h.Flags&FlagUDPTunnelCsum != 0
	return nil
}

// parseTunnel checks a UDP-tunnel packet: the offsets in its header, the
// outer IP and UDP headers, and the inner packet, whose layout it fills
// in with offsets from the start of pkt.
func parseTunnel(pkt []byte, h Header, l *Layout) error {
	outerTH, innerNH, innerTH := int(h.OuterTH), int(h.InnerNH), int(h.CsumStart)
	innerMin := ipv4MinLen
	if l.kind == GSOTCPv6 {
		innerMin = ipv6Len
	}
	switch {
	case innerNH < outerTH+udpLen || innerTH < innerNH+innerMin:
		return invalid(ruleTunnel, "outer_th_offset %d, inner_nh_offset %d, csum_start %d", outerTH, innerNH, innerTH)
	case innerNH%2 != 0 || innerNH >= len(pkt):
		return invalid(ruleTunnel, "inner_nh_offset %d in a %d-byte packet", innerNH, len(pkt))
	}
	outer := Layout{kind: GSOUDPL4} // no fragments, any extension headers
	if err := parseIP(pkt, &outer); err != nil {
		return err
	}
	if outer.ipv6 != (l.tunnel == GSOUDPTunnelIPv6) {
		return invalid(ruleIPVersion, "outer IPv6 %v with gso_type %v", outer.ipv6, h.GSOType)
	}
	if outer.proto != protoUDP || outer.l3Len != outerTH {
		return invalid(ruleTunnel, "outer_th_offset %d, outer transport header (protocol %d) at %d", outerTH, outer.proto, outer.l3Len)
	}
	l.outerL3, l.inner = outerTH, innerNH
	h.CsumStart -= uint16(innerNH)
	if err := parsePacket(pkt[innerNH:], h, l); err != nil {
		return err
	}
	l.l3Len += innerNH
	l.csumStart += innerNH
	return nil
}

// parseIP checks the IP header (and IPv6 extension headers) and fills in
// L3Len, Proto and IPv6.
func parseIP(pkt []byte, l *Layout) error {
	if len(pkt) == 0 {
		return invalid(ruleShortPacket, "empty packet")
	}
	v := pkt[0] >> 4
	switch {
	case l.kind == GSOTCPv4 && v != 4, l.kind == GSOTCPv6 && v != 6:
		return invalid(ruleIPVersion, "IPv%d packet with gso_type %v", v, l.kind)
	case v == 4:
		return parseIPv4(pkt, l)
	case v == 6:
		l.ipv6 = true
		return parseIPv6(pkt, l)
	}
	return invalid(ruleIPHeader, "IP version %d", v)
}

func parseIPv4(pkt []byte, l *Layout) error {
	if len(pkt) < ipv4MinLen {
		return invalid(ruleShortPacket, "%d bytes, IPv4 header needs %d", len(pkt), ipv4MinLen)
	}
	ihl := int(pkt[0]&0xf) * 4
	if ihl < ipv4MinLen || ihl > len(pkt) {
		return invalid(ruleIPHeader, "IPv4 header length %d in a %d-byte packet", ihl, len(pkt))
	}
	if tot := int(binary.BigEndian.Uint16(pkt[2:])); tot != len(pkt) && !(l.big && tot == 0) {
		return invalid(ruleIPLength, "IPv4 total length %d, packet %d bytes", tot, len(pkt))
	}
	if Checksum(pkt[:ihl], 0) != 0 {
		return invalid(ruleIPChecksum, "IPv4 header checksum %#04x", binary.BigEndian.Uint16(pkt[10:]))
	}
	if frag := binary.BigEndian.Uint16(pkt[6:]) & 0x3fff; frag != 0 && (l.kind != GSONone || l.needsCsum) {
		return invalid(ruleFragmented, "IPv4 fragment (offset %d, MF %v)", frag&0x1fff*8, frag&0x2000 != 0)
	}
	l.l3Len = ihl
	l.proto = pkt[9]
	return nil
}

func parseIPv6(pkt []byte, l *Layout) error {
	if len(pkt) < ipv6Len {
		return invalid(ruleShortPacket, "%d bytes, IPv6 header needs %d", len(pkt), ipv6Len)
	}
	if pl := int(binary.BigEndian.Uint16(pkt[4:])); pl != len(pkt)-ipv6Len && !(l.big && pl == 0) {
		return invalid(ruleIPLength, "IPv6 payload length %d, packet %d bytes", pl, len(pkt))
	}
	next, off := pkt[6], ipv6Len
	for {
		switch next {
		case protoHopByHop, protoRouting, protoDestOpts:
			if next == protoHopByHop && off != ipv6Len {
				return invalid(ruleExtHeader, "hop-by-hop header at offset %d", off)
			}
			if off+2 > len(pkt) {
				return invalid(ruleShortPacket, "extension header at %d of a %d-byte packet", off, len(pkt))
			}
			n := (int(pkt[off+1]) + 1) * 8
			if off+n > len(pkt) {
				return invalid(ruleExtHeader, "%d-byte extension header at %d of a %d-byte packet", n, off, len(pkt))
			}
			next, off = pkt[off], off+n
		case protoFragment:
			if l.kind != GSONone || l.needsCsum {
				return invalid(ruleFragmented, "IPv6 Fragment header at offset %d", off)
			}
			l.l3Len, l.proto = off, next
			return nil
		default:
			if l.kind == GSOUDP && off != ipv6Len {
				return invalid(ruleExtHeader, "UFO over IPv6 with %d bytes of extension headers", off-ipv6Len)
			}
			l.l3Len, l.proto = off, next
			return nil
		}
	}
}

// checkTransport checks the transport header and the checksum fields of
// the virtio-net header against it, and fills in L4Len and CsumOffset.
func checkTransport(pkt []byte, h Header, l *Layout) error {
	tcp := l.kind == GSOTCPv4 || l.kind == GSOTCPv6
	switch {
	case tcp && l.proto != protoTCP:
		return invalid(ruleProtocol, "protocol %d with gso_type %v", l.proto, l.kind)
	case (l.kind == GSOUDP || l.kind == GSOUDPL4) && l.proto != protoUDP:
		return invalid(ruleProtocol, "protocol %d with gso_type %v", l.proto, l.kind)
	case l.kind == GSOUDPL4 && !l.needsCsum:
		return invalid(ruleNeedsCsum, "gso_type %v without NEEDS_CSUM", l.kind)
	}
	if tcp { // checksummed from scratch without NEEDS_CSUM
		l.csumStart, l.csumOffset = l.l3Len, tcpCsumOffset
	}
	if l.kind == GSONone && !l.needsCsum {
		l.payloadLen = len(pkt) - l.l3Len // passes through untouched
		return nil
	}
	if err := parseL4(pkt, l); err != nil {
		return err
	}
	if !l.needsCsum {
		return nil
	}
	return checkCsum(pkt, h, l)
}

// checkCsum checks where the virtio-net header says a partial checksum
// is, and fills in CsumStart and CsumOffset.
func checkCsum(pkt []byte, h Header, l *Layout) error {
	start, off := int(h.CsumStart), int(h.CsumOffset)
	if start+off+2 > len(pkt) {
		return invalid(ruleCsumRange, "csum_start %d + csum_offset %d + 2 beyond %d bytes", start, off, len(pkt))
	}
	l.csumStart, l.csumOffset = start, off
	if encapsulated(l, start, off) {
		return nil
	}
	if start != l.l3Len {
		return invalid(ruleCsumStart, "csum_start %d, transport header at %d", start, l.l3Len)
	}
	want := -1
	switch l.proto {
	case protoTCP:
		want = tcpCsumOffset
	case protoUDP:
		want = udpCsumOffset
	}
	if want >= 0 && off != want {
		return invalid(ruleCsumOffset, "csum_offset %d for protocol %d, want %d", off, l.proto, want)
	}
	return nil
}

// encapsulated reports a UDP packet passed through whose partial checksum
// is an inner packet's TCP or UDP checksum, inside the UDP payload: what
// a TUN with the tunnel offloads hands over for a VXLAN or Geneve packet
// that is not a super-packet (the outer checksum, if any, is complete).
func encapsulated(l *Layout, start, off int) bool {
	return l.kind == GSONone && l.proto == protoUDP && start >= l.l3Len+udpLen &&
		(off == tcpCsumOffset || off == udpCsumOffset)
}

// parseL4 finds the length of a TCP or UDP header. Other protocols have no
// header Split needs to know; they may only pass through.
func parseL4(pkt []byte, l *Layout) error {
	rest := len(pkt) - l.l3Len
	switch l.proto {
	case protoTCP:
		if rest < tcpMinLen {
			return invalid(ruleShortPacket, "%d bytes after the IP header, TCP needs %d", rest, tcpMinLen)
		}
		l.l4Len = int(pkt[l.l3Len+12]>>4) * 4
		if l.l4Len < tcpMinLen || l.l4Len > rest {
			return invalid(ruleTransport, "TCP data offset %d with %d bytes after the IP header", l.l4Len, rest)
		}
	case protoUDP:
		if rest < udpLen {
			return invalid(ruleShortPacket, "%d bytes after the IP header, UDP needs %d", rest, udpLen)
		}
		l.l4Len = udpLen
	}
	l.payloadLen = rest - l.l4Len
	return nil
}

// count decides how many packets the input becomes and checks the caps:
// the kernel's on USO, and maxSegs unless it is 0.
func count(pkt []byte, l *Layout, maxSegs int) error {
	data := l.payloadLen // bytes cut into gso_size pieces
	if l.kind == GSOUDP {
		data += l.l4Len // UFO cuts the UDP header with the payload
	}
	if l.kind == GSOUDPL4 && data > l.mss*udpMaxSegments {
		return invalid(ruleTooManySegments, "%d bytes of USO payload, at most %d×%d", data, udpMaxSegments, l.mss)
	}
	if l.kind == GSONone || data <= l.mss {
		l.kind, l.segments, l.maxSegLen = GSONone, 1, len(pkt)
		return nil
	}
	if l.kind == GSOUDP && l.mss%8 != 0 {
		return invalid(ruleGSOSize, "UFO gso_size %d is not a multiple of 8", l.mss)
	}
	l.segments = (data + l.mss - 1) / l.mss
	if maxSegs > 0 && l.segments > maxSegs {
		return invalid(ruleTooManySegments, "%d segments, at most %d", l.segments, maxSegs)
	}
	l.maxSegLen = len(pkt) - data + l.mss
	if l.kind == GSOUDP {
		l.maxSegLen = l.l3Len + l.mss
		if l.ipv6 {
			l.maxSegLen += fragHdrLen
		}
	}
	return nil
}

// countBig groups the segments of a BIG TCP packet into TSO super-packets
// of at most bigLen bytes and maxSegs segments each and checks the cap on
// their number.
func countBig(l *Layout, maxSegs, bigLen int) error {
	hl := l.HdrLen()
	l.group = (bigLen - hl) / l.mss
	if maxSegs > 0 {
		l.group = min(l.group, maxSegs)
	}
	if l.group < 1 {
		return invalid(ruleGSOSize, "gso_size %d: no segment fits in %d bytes", l.mss, bigLen)
	}
	step := l.step()
	l.segments = (l.payloadLen + step - 1) / step
	if maxSegs > 0 && l.segments > maxSegs {
		return invalid(ruleTooManySegments, "%d super-packets, at most %d", l.segments, maxSegs)
	}
	l.maxSegLen = hl + min(step, l.payloadLen)
	return nil
}
