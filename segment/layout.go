package segment

// udpMaxSegments is the kernel's cap on USO segments per super-packet
// (UDP_MAX_SEGMENTS, 128 since Linux 6.10; it was 64 before): more payload
// than GSOSize*udpMaxSegments is rejected. TSO and UFO have no cap, as in
// the kernel (tcp_gso_segment, udp4_ufo_fragment): a 64 KiB TSO
// super-packet at gso_size 1 makes 65,495 segments.
const udpMaxSegments = 128

// Layout describes a packet that passed Validate: where its headers are,
// what Split will do with it and how many packets it produces. Only
// Validate makes one, so a Layout handed to Segmenter.Split is known to
// describe a valid packet of its length; the zero Layout describes none.
type Layout struct {
	kind       GSOType // GSONone when the packet passes through as one
	ecn        bool    // TCP: CWR only on the first segment
	ipv6       bool
	proto      uint8  // transport protocol number
	l3Len      int    // IP header, IPv4 options and IPv6 extension headers
	l4Len      int    // transport header length
	payloadLen int    // bytes after l3Len+l4Len
	mss        int    // payload bytes per segment (UFO: L4 bytes per fragment)
	segments   int    // packets Split writes
	maxSegLen  int    // length of the largest of them
	needsCsum  bool   // the input carries a partial checksum to complete
	csumStart  int    // where the checksum starts: the transport header, or an encapsulated one
	csumOffset int    // offset of the checksum field from csumStart (TSO: always 16)
	pktLen     int    // length of the packet Validate accepted
	fragID     uint32 // IPv6 UFO: the identification of every fragment
	big        bool   // a BIG TCP packet (ValidateBig): IP length 0
	group      int    // BIG TCP: segments per TSO super-packet Split writes
	valid      bool   // made by a successful Validate

	// A UDP-tunnel super-packet: the fields above describe its inner
	// packet, with offsets from the start of the whole packet.
	tunnel     GSOType // GSOUDPTunnelIPv4 or GSOUDPTunnelIPv6; 0 for other packets
	tunnelCsum bool    // FlagUDPTunnelCsum: every segment's outer UDP checksum is computed
	outerL3    int     // outer IP header length: the offset of the outer UDP header
	inner      int     // offset of the inner IP header
}

// Kind is what Split does: GSOTCPv4, GSOTCPv6, GSOUDPL4, GSOUDP, or
// GSONone when the packet passes through as one (also a super-packet
// whose payload fits in one segment). For a UDP-tunnel packet it is the
// inner packet's kind.
func (l Layout) Kind() GSOType { return l.kind }

// ECN reports a TCP super-packet whose CWR flag stays on the first segment.
func (l Layout) ECN() bool { return l.ecn }

// Tunnel reports a UDP-tunnel packet (VXLAN, Geneve): its GSO type had
// GSOUDPTunnelIPv4 or GSOUDPTunnelIPv6, and the other accessors describe
// its inner packet (offsets from the start of the whole packet). Split
// writes every segment with the outer headers and complete checksums.
func (l Layout) Tunnel() bool { return l.tunnel != 0 }

// IPv6 reports an IPv6 packet (else IPv4); for a tunnel packet, the
// inner one.
func (l Layout) IPv6() bool { return l.ipv6 }

// Proto is the transport protocol number.
func (l Layout) Proto() uint8 { return l.proto }

// L3Len is the length of the IP header with IPv4 options or IPv6
// extension headers: the offset of the transport header (of a tunnel
// packet: of the inner transport header, all outer headers included).
func (l Layout) L3Len() int { return l.l3Len }

// L4Len is the transport header length (0 for a packet only passed
// through without a checksum to complete).
func (l Layout) L4Len() int { return l.l4Len }

// PayloadLen is the number of bytes after the L3 and L4 headers.
func (l Layout) PayloadLen() int { return l.payloadLen }

// MSS is the payload bytes per segment (UFO: L4 bytes per fragment).
func (l Layout) MSS() int { return l.mss }

// step is the payload bytes per packet Split writes: the MSS, or for a
// BIG TCP packet's layout a whole number of them.
func (l Layout) step() int { return l.mss * max(l.group, 1) }

// Segments is the number of packets Split writes.
func (l Layout) Segments() int { return l.segments }

// MaxSegLen is the length of the largest packet Split writes: the size
// every output buffer needs after the offset.
func (l Layout) MaxSegLen() int { return l.maxSegLen }

// NeedsCsum reports an input with a partial checksum to complete.
func (l Layout) NeedsCsum() bool { return l.needsCsum }

// SegmentHeader returns the virtio-net header that describes every packet
// Split writes for this layout. With partial set (a Segmenter in partial
// mode), TSO/USO segments and passed-through packets keep a partial
// checksum for the sink to complete; UFO fragments always carry a full
// checksum, since no sink can complete one across fragments, and so do
// the segments of a tunnel super-packet, whose outer UDP checksum covers
// the inner one.
//
// Of a BIG TCP packet's layout (ValidateBig), whose packets are TSO
// super-packets, it is their GSO header, partial checksum included.
func (l Layout) SegmentHeader(partial bool) Header {
	if l.big {
		h := l.GSOHeader()
		h.Flags |= FlagNeedsCsum
		h.CsumStart, h.CsumOffset = uint16(l.csumStart), uint16(l.csumOffset)
		return h
	}
	h := Header{HdrLen: uint16(l.HdrLen())}
	tso := l.kind == GSOTCPv4 || l.kind == GSOTCPv6
	if l.partial(partial) && (l.needsCsum || tso) && l.kind != GSOUDP {
		h.Flags = FlagNeedsCsum
		h.CsumStart = uint16(l.csumStart)
		h.CsumOffset = uint16(l.csumOffset)
	}
	return h
}

// GSOHeader returns the virtio-net header that describes the whole packet
// Validate accepted, for a device that segments it itself (a TUN or
// AF_PACKET socket with a virtio-net header, a NIC with TSO/USO): its GSO
// type and ECN flag, gso_size, the true header length and, if the input
// carries a partial checksum, where it is. A packet that fits in one
// segment gets GSONone; a tunnel super-packet keeps its tunnel type,
// outer checksum flag and offsets.
func (l Layout) GSOHeader() Header {
	h := Header{GSOType: l.kind, HdrLen: uint16(l.HdrLen())}
	if l.kind != GSONone {
		h.GSOSize = uint16(l.mss)
		if l.ecn {
			h.GSOType |= GSOECN
		}
		if l.tunnel != 0 {
			h.GSOType |= l.tunnel
			h.OuterTH, h.InnerNH = uint16(l.outerL3), uint16(l.inner)
			if l.tunnelCsum {
				h.Flags |= FlagUDPTunnelCsum
			}
		}
	}
	if l.needsCsum {
		h.Flags |= FlagNeedsCsum
		h.CsumStart = uint16(l.csumStart)
		h.CsumOffset = uint16(l.csumOffset)
	}
	return h
}

// partial reports whether a Segmenter in partial mode leaves this
// layout's checksums partial: not for a tunnel packet.
func (l Layout) partial(mode bool) bool { return mode && l.tunnel == 0 }

// HdrLen is the length of the L3 and L4 headers that every TSO/USO segment
// carries (of a tunnel packet: all outer and inner headers): the true
// hdr_len recomputed from the packet.
func (l Layout) HdrLen() int { return l.l3Len + l.l4Len }
