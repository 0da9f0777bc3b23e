package segment

import (
	"encoding/binary"
	"math/rand/v2"
	"sync/atomic"
)

// TCP flags the segmenter rewrites.
const (
	tcpFIN = 0x01
	tcpPSH = 0x08
	tcpCWR = 0x80
)

const (
	ipv4MF       = 0x2000
	ipv6MF       = 0x0001
	udpCsumZero  = 0xffff // a computed UDP checksum of 0 is sent as all ones
	tcpFlagsOff  = 13
	tcpSeqOff    = 4
	udpLenOff    = 4
	ipv4IDOff    = 4
	ipv4FragOff  = 6
	ipv4CsumOff  = 10
	ipv6PLenOff  = 4
	ipv6NextOff  = 6
	ipv4TotalOff = 2
)

// A Segmenter cuts validated super-packets into segments. The zero value
// writes full software checksums and caps segments at DefaultMaxSegments.
// A Segmenter may be used by several goroutines at once.
type Segmenter struct {
	// Partial leaves TSO/USO segments (and passed-through packets) with a
	// correct partial checksum, the pseudo-header sum, at the checksum
	// field, for sinks that complete checksums in hardware: no payload byte
	// is summed. Layout.SegmentHeader(true) tells the sink where it is.
	Partial bool
	// MaxSegments caps the segments one super-packet may produce; zero
	// means DefaultMaxSegments.
	MaxSegments int

	fragID atomic.Uint32 // IPv6 UFO fragment identification
}

var std Segmenter

// Split validates pkt with h and writes its segments into bufs, segment i
// at bufs[i][offset:offset+sizes[i]], with full software checksums. See
// Segmenter.Split.
func Split(pkt []byte, h Header, bufs [][]byte, sizes []int, offset int) (int, error) {
	return std.Split(pkt, h, bufs, sizes, offset)
}

// Validate is the package Validate with the Segmenter's segment cap.
func (s *Segmenter) Validate(pkt []byte, h Header) (Layout, error) {
	return validate(pkt, h, s.maxSegments())
}

// Split validates pkt with h and writes its segments into bufs, segment i
// at bufs[i][offset:offset+sizes[i]], and returns how many it wrote. Each
// segment is a complete IP packet, written exactly as the Linux kernel's
// software GSO writes it (see the package documentation). The offset
// leaves headroom, for example for a link-layer header.
//
// Every buffer needs Layout.MaxSegLen bytes after offset and there must
// be Layout.Segments of them; otherwise Split writes nothing and returns a
// *BufferError saying what it needs. An invalid packet returns an error
// matching ErrInvalid. pkt may be bufs[0][offset:] itself (same start);
// no other overlap is allowed. Split does not allocate.
func (s *Segmenter) Split(pkt []byte, h Header, bufs [][]byte, sizes []int, offset int) (int, error) {
	l, err := s.Validate(pkt, h)
	if err != nil {
		return 0, err
	}
	if err := checkBufs(l, bufs, sizes, offset); err != nil {
		return 0, err
	}
	switch l.Kind {
	case GSOTCPv4, GSOTCPv6, GSOUDPL4:
		s.splitL4(pkt, l, bufs, sizes, offset)
	case GSOUDP:
		s.splitUFO(pkt, l, bufs, sizes, offset)
	default:
		sizes[0] = s.passThrough(pkt, l, bufs[0][offset:])
	}
	return l.Segments, nil
}

func (s *Segmenter) maxSegments() int {
	if s.MaxSegments > 0 {
		return s.MaxSegments
	}
	return DefaultMaxSegments
}

func checkBufs(l Layout, bufs [][]byte, sizes []int, offset int) error {
	if len(bufs) < l.Segments || len(sizes) < l.Segments || offset < 0 {
		return &BufferError{Need: l.Segments, Have: min(len(bufs), len(sizes)), Size: l.MaxSegLen, rule: ErrTooFewBuffers}
	}
	for _, b := range bufs[:l.Segments] {
		if len(b) < offset+l.MaxSegLen {
			return &BufferError{Need: l.Segments, Have: len(bufs), Size: l.MaxSegLen, rule: ErrShortBuffer}
		}
	}
	return nil
}

// passThrough copies a packet that is not cut and completes its checksum
// if it carries a partial one, as the kernel's skb_checksum_help does.
func (s *Segmenter) passThrough(pkt []byte, l Layout, out []byte) int {
	if !l.NeedsCsum || s.Partial {
		return copy(out, pkt)
	}
	start := l.L3Len
	copy(out[:start], pkt[:start])
	acc := copySum(out[start:], pkt[start:], 0)
	c := ^fold(acc)
	if c == 0 {
		c = udpCsumZero
	}
	binary.BigEndian.PutUint16(out[start+l.CsumOffset:], c)
	return len(pkt)
}

// splitL4 cuts a TSO or USO super-packet: every segment carries the whole
// L3+L4 header and up to MSS bytes of payload.
func (s *Segmenter) splitL4(pkt []byte, l Layout, bufs [][]byte, sizes []int, offset int) {
	hl, n := l.HdrLen(), l.Segments
	base := partialBase(pkt, l)
	// Segment 0 goes last: pkt may be bufs[0][offset:] itself, and the
	// other segments copy their headers from it.
	for k := 1; k <= n; k++ {
		i := k % n
		start := i * l.MSS
		end := min(start+l.MSS, l.PayloadLen)
		out := bufs[i][offset : offset+hl+end-start]
		copy(out[:hl], pkt[:hl])
		var acc uint64
		if s.Partial {
			copy(out[hl:], pkt[hl+start:hl+end])
		} else {
			acc = copySum(out[hl:], pkt[hl+start:hl+end], 0)
		}
		fixIP(out, l, uint16(i))
		pseudo := addAcc(base, beAcc(uint16(len(out)-l.L3Len)))
		if l.Proto == protoTCP {
			fixTCP(out[l.L3Len:hl], uint32(start), i == 0, i == n-1)
		} else {
			binary.BigEndian.PutUint16(out[l.L3Len+udpLenOff:], uint16(len(out)-l.L3Len))
		}
		s.finishL4(out[l.L3Len:], l, pseudo, acc)
		sizes[i] = len(out)
	}
}

// partialBase is the input's partial checksum minus the length it was
// computed with: the kernel adjusts the sender's pseudo-header sum by the
// change in length rather than recomputing it (tcp_gso_segment uses the
// transport length, __udp_gso_segment the UDP length field).
func partialBase(pkt []byte, l Layout) uint64 {
	l4 := pkt[l.L3Len:]
	old := uint16(len(l4))
	if l.Proto == protoUDP {
		old = binary.BigEndian.Uint16(l4[udpLenOff:])
	}
	check := binary.BigEndian.Uint16(l4[l.CsumOffset:])
	return addAcc(beAcc(check), beAcc(^old))
}

// fixTCP rewrites a segment's sequence number and flags: FIN and PSH stay
// on the last segment only, CWR on the first only.
func fixTCP(th []byte, sent uint32, first, last bool) {
	binary.BigEndian.PutUint32(th[tcpSeqOff:], binary.BigEndian.Uint32(th[tcpSeqOff:])+sent)
	if !last {
		th[tcpFlagsOff] &^= tcpFIN | tcpPSH
	}
	if !first {
		th[tcpFlagsOff] &^= tcpCWR
	}
}

// finishL4 writes the checksum of a TSO/USO segment: the partial
// pseudo-header sum in partial mode, else the full checksum from the
// pseudo-header sum, the transport header and the payload sum acc.
func (s *Segmenter) finishL4(l4 []byte, l Layout, pseudo, acc uint64) {
	field := l4[l.CsumOffset:]
	if s.Partial {
		binary.BigEndian.PutUint16(field, fold(pseudo))
		return
	}
	binary.BigEndian.PutUint16(field, 0)
	c := ^fold(addAcc(addAcc(pseudo, acc), sum(l4[:l.L4Len], 0)))
	if c == 0 && l.Proto == protoUDP {
		c = udpCsumZero
	}
	binary.BigEndian.PutUint16(field, c)
}

// fixIP rewrites the length of segment i and, for IPv4, its ID (one more
// per segment) and header checksum.
func fixIP(out []byte, l Layout, i uint16) {
	if l.IPv6 {
		binary.BigEndian.PutUint16(out[ipv6PLenOff:], uint16(len(out)-ipv6Len))
		return
	}
	binary.BigEndian.PutUint16(out[ipv4TotalOff:], uint16(len(out)))
	binary.BigEndian.PutUint16(out[ipv4IDOff:], binary.BigEndian.Uint16(out[ipv4IDOff:])+i)
	ipv4Checksum(out[:l.L3Len])
}

func ipv4Checksum(iph []byte) {
	binary.BigEndian.PutUint16(iph[ipv4CsumOff:], 0)
	binary.BigEndian.PutUint16(iph[ipv4CsumOff:], Checksum(iph, 0))
}

// splitUFO cuts one UDP datagram into IP fragments of MSS bytes of L4
// data each, after completing its UDP checksum over the whole datagram.
func (s *Segmenter) splitUFO(pkt []byte, l Layout, bufs [][]byte, sizes []int, offset int) {
	check := ufoChecksum(pkt, l)
	data := len(pkt) - l.L3Len
	var id uint32
	if l.IPv6 {
		id = s.nextFragID()
	}
	hl := l.L3Len
	if l.IPv6 {
		hl += fragHdrLen
	}
	n := l.Segments
	for k := 1; k <= n; k++ { // fragment 0 last, as in splitL4
		i := k % n
		start := i * l.MSS
		end := min(start+l.MSS, data)
		out := bufs[i][offset : offset+hl+end-start]
		copy(out[hl:], pkt[l.L3Len+start:l.L3Len+end]) // first: may move in place
		copy(out[:l.L3Len], pkt[:l.L3Len])
		if l.IPv6 {
			fixFragIPv6(out, pkt[ipv6NextOff], start, i < n-1, id)
		} else {
			fixFragIPv4(out, l.L3Len, start, i < n-1)
		}
		sizes[i] = len(out)
	}
	binary.BigEndian.PutUint16(bufs[0][offset+hl+udpCsumOffset:], check)
}

// ufoChecksum computes the UDP checksum of the whole datagram from
// scratch, as udp4_ufo_fragment and udp6_ufo_fragment do.
func ufoChecksum(pkt []byte, l Layout) uint16 {
	l4 := pkt[l.L3Len:]
	acc := addAcc(pseudoHeader(pkt, l.IPv6, len(l4)), sum(l4, 0))
	acc = addAcc(acc, beAcc(^binary.BigEndian.Uint16(l4[udpCsumOffset:]))) // as if the field were 0
	c := ^fold(acc)
	if c == 0 {
		c = udpCsumZero
	}
	return c
}

// pseudoHeader sums the UDP pseudo-header of an IPv4 or IPv6 packet.
func pseudoHeader(pkt []byte, v6 bool, l4Len int) uint64 {
	addrs := pkt[12:20]
	if v6 {
		addrs = pkt[8:40]
	}
	return sum(addrs, uint64(protoUDP)<<8+beAcc(uint16(l4Len)))
}

// fixFragIPv4 turns a copy of the IPv4 header into a fragment's: same ID,
// offset in 8-byte units, MF on all but the last. Like the kernel, it
// rewrites the whole fragment field, so DF is cleared.
func fixFragIPv4(out []byte, l3, start int, more bool) {
	frag := uint16(start / 8)
	if more {
		frag |= ipv4MF
	}
	binary.BigEndian.PutUint16(out[ipv4FragOff:], frag)
	binary.BigEndian.PutUint16(out[ipv4TotalOff:], uint16(len(out)))
	ipv4Checksum(out[:l3])
}

// fixFragIPv6 inserts a Fragment header after the fixed IPv6 header.
func fixFragIPv6(out []byte, next uint8, start int, more bool, id uint32) {
	binary.BigEndian.PutUint16(out[ipv6PLenOff:], uint16(len(out)-ipv6Len))
	out[ipv6NextOff] = protoFragment
	fh := out[ipv6Len : ipv6Len+fragHdrLen]
	fh[0], fh[1] = next, 0
	frag := uint16(start)
	if more {
		frag |= ipv6MF
	}
	binary.BigEndian.PutUint16(fh[2:], frag)
	binary.BigEndian.PutUint32(fh[4:], id)
}

// nextFragID returns the identification for the fragments of one IPv6
// datagram: a counter from a random start (the kernel hashes the addresses
// with a secret; any value shared by all fragments is right).
func (s *Segmenter) nextFragID() uint32 {
	if s.fragID.Load() == 0 {
		s.fragID.CompareAndSwap(0, rand.Uint32()|1)
	}
	return s.fragID.Add(1)
}
