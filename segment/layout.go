package segment

// DefaultMaxSegments caps how many segments one super-packet may produce
// when a Segmenter does not set its own cap. 128 segments cover a 64 KiB
// super-packet at the smallest common MSS (536).
const DefaultMaxSegments = 128

// UDPMaxSegments is the kernel's cap on USO segments per super-packet
// (UDP_MAX_SEGMENTS, 128 since Linux 6.10; it was 64 before): more payload
// than GSOSize*UDPMaxSegments is rejected.
const UDPMaxSegments = 128

// Layout describes a packet that passed Validate: where its headers are,
// what Split will do with it and how many packets it produces.
type Layout struct {
	Kind       GSOType // GSONone when the packet passes through as one
	ECN        bool    // TCP: CWR only on the first segment
	IPv6       bool
	Proto      uint8 // transport protocol number
	L3Len      int   // IP header, IPv4 options and IPv6 extension headers
	L4Len      int   // transport header length
	PayloadLen int   // bytes after L3Len+L4Len
	MSS        int   // payload bytes per segment (UFO: L4 bytes per fragment)
	Segments   int   // packets Split writes
	MaxSegLen  int   // length of the largest of them
	NeedsCsum  bool  // the input carries a partial checksum to complete
	CsumOffset int   // offset of the checksum field from the transport header (TSO: always 16)
}

// SegmentHeader returns the virtio-net header that describes every packet
// Split writes for this layout. With partial set (a Segmenter in partial
// mode), TSO/USO segments and passed-through packets keep a partial
// checksum for the sink to complete; UFO fragments always carry a full
// checksum, since no sink can complete one across fragments.
func (l Layout) SegmentHeader(partial bool) Header {
	h := Header{HdrLen: uint16(l.HdrLen())}
	tso := l.Kind == GSOTCPv4 || l.Kind == GSOTCPv6
	if partial && (l.NeedsCsum || tso) && l.Kind != GSOUDP {
		h.Flags = FlagNeedsCsum
		h.CsumStart = uint16(l.L3Len)
		h.CsumOffset = uint16(l.CsumOffset)
	}
	return h
}

// HdrLen is the length of the L3 and L4 headers that every TSO/USO segment
// carries: the true hdr_len recomputed from the packet.
func (l Layout) HdrLen() int { return l.L3Len + l.L4Len }
