package segment

import (
	"encoding/binary"

	"github.com/gsoplane/gsoplane/internal/copycount"
)

// Split validates pkt with h and writes its segments into bufs, segment i
// at bufs[i][offset:offset+sizes[i]], with full software checksums: it is
// Validate followed by Segmenter.Split with the zero Segmenter. It never
// panics, whatever the input.
func Split(pkt []byte, h Header, bufs [][]byte, sizes []int, offset int) (int, error) {
	l, err := std.Validate(pkt, h)
	if err != nil {
		return 0, err
	}
	return std.Split(pkt, l, bufs, sizes, offset)
}

// Split writes the segments of pkt, which Validate accepted and described
// with l, into bufs, segment i at bufs[i][offset:offset+sizes[i]], and
// returns how many it wrote. Each segment is a complete IP packet, written
// exactly as the Linux kernel's software GSO writes it (see the package
// documentation). The offset leaves headroom, for example for a
// link-layer header. Validating once and splitting with the layout saves
// the second validation that Split(pkt, h, ...) would do.
//
// Every buffer needs l.MaxSegLen() bytes after offset and there must be
// l.Segments() of them; otherwise Split writes nothing and returns a
// *BufferError saying what it needs. A layout that is not Validate's for
// a packet of len(pkt) bytes returns an *Error that does not match
// ErrInvalid: a caller's mistake, not a bad packet. pkt may be
// bufs[0][offset:] itself (same start); no other overlap is allowed.
// Split does not allocate, except for that *Error.
func (s *Segmenter) Split(pkt []byte, l Layout, bufs [][]byte, sizes []int, offset int) (int, error) {
	return s.split(pkt, l, 0, l.segments, bufs, sizes, offset)
}

// SplitFrom is Split a chunk at a time, for a super-packet of more
// segments than the caller has buffers: it writes segments first,
// first+1, ..., as many as bufs and sizes hold and no further than the
// last, segment first+i at bufs[i][offset:offset+sizes[i]], and returns
// how many it wrote. The chunks of consecutive calls are, together,
// exactly what one Split writes. first must be below l.Segments(), and
// every buffer used needs l.MaxSegLen() bytes after offset (else a
// *BufferError). pkt must not overlap bufs, unless first is 0 and bufs
// hold every segment (as Split). SplitFrom does not allocate, except for
// an error.
func (s *Segmenter) SplitFrom(pkt []byte, l Layout, first int, bufs [][]byte, sizes []int, offset int) (int, error) {
	return s.split(pkt, l, first, max(1, min(len(bufs), len(sizes), l.segments-first)), bufs, sizes, offset)
}

// split writes n segments from segment first on.
func (s *Segmenter) split(pkt []byte, l Layout, first, n int, bufs [][]byte, sizes []int, offset int) (int, error) {
	switch {
	case !l.valid || l.pktLen != len(pkt):
		return 0, misuse(ruleLayout, "%d-byte packet, Layout of %d bytes (from Validate: %v)", len(pkt), l.pktLen, l.valid)
	case first < 0 || first >= l.segments:
		return 0, misuse(ruleFirstSegment, "segment %d of %d", first, l.segments)
	}
	if err := checkBufs(l, n, bufs, sizes, offset); err != nil {
		return 0, err
	}
	bufs, sizes = bufs[:n], sizes[:n]
	switch l.kind {
	case GSOTCPv4, GSOTCPv6, GSOUDPL4:
		s.splitL4(pkt, l, first, bufs, sizes, offset)
	case GSOUDP:
		s.splitUFO(pkt, l, first, bufs, sizes, offset)
	default:
		sizes[0] = s.passThrough(pkt, l, bufs[0][offset:])
	}
	return n, nil
}

// checkBufs checks that bufs and sizes hold n segments of l.
func checkBufs(l Layout, n int, bufs [][]byte, sizes []int, offset int) error {
	if len(bufs) < n || len(sizes) < n || offset < 0 {
		return &BufferError{Need: n, Have: min(len(bufs), len(sizes)), Size: l.maxSegLen, rule: ruleTooFewBuffers}
	}
	for _, b := range bufs[:n] {
		if len(b) < offset+l.maxSegLen {
			return &BufferError{Need: n, Have: len(bufs), Size: l.maxSegLen, rule: ruleShortBuffer}
		}
	}
	return nil
}

// passThrough copies a packet that is not cut and completes its checksum
// if it carries a partial one, as the kernel's skb_checksum_help does. A
// tunnel packet with FlagUDPTunnelCsum also gets its outer UDP checksum
// completed, which the kernel leaves partial (a packet no receiver
// accepts). out may be longer than pkt: nothing past len(pkt) is read.
func (s *Segmenter) passThrough(pkt []byte, l Layout, out []byte) int {
	out = out[:len(pkt)]
	copycount.Add(out, pkt)
	if !l.needsCsum || l.partial(s.Partial) {
		return copy(out, pkt)
	}
	start := l.csumStart
	copy(out[:start], pkt[:start])
	complete(out[start+l.csumOffset:], copySum(out[start:], pkt[start:], 0))
	if l.tunnelCsum {
		complete(out[l.outerL3+udpCsumOffset:], sum(out[l.outerL3:], 0))
	}
	return len(pkt)
}

// complete writes into field the checksum of data whose sum, the partial
// checksum in field included, is acc. Like skb_checksum_help, whatever
// the protocol, it writes a checksum of zero as all ones.
func complete(field []byte, acc uint64) {
	c := ^fold(acc)
	if c == 0 {
		c = udpCsumZero
	}
	binary.BigEndian.PutUint16(field, c)
}

// splitL4 cuts segments first to first+len(bufs)-1 of a TSO or USO
// super-packet: every segment carries the whole L3+L4 header (of a tunnel
// packet: the outer headers, the tunnel header and the inner L3+L4
// header) and up to MSS bytes of payload (of a BIG TCP packet's layout:
// up to a whole number of MSS, and the IPv4 ID of the first segment in
// it).
func (s *Segmenter) splitL4(pkt []byte, l Layout, first int, bufs [][]byte, sizes []int, offset int) {
	hl, n, partial := l.HdrLen(), len(bufs), l.partial(s.Partial) || l.big
	t := newTemplate(pkt, l)
	step := l.step()
	// bufs[0] goes last: pkt may be bufs[0][offset:] itself, and the
	// other segments copy their headers from it.
	for k := 1; k <= n; k++ {
		b := k % n
		i := first + b
		start := i * step
		end := min(start+step, l.payloadLen)
		out := bufs[b][offset : offset+hl+end-start]
		copycount.Add(out, pkt)
		copy(out[:hl], pkt[:hl])
		var acc uint64
		if partial {
			copy(out[hl:], pkt[hl+start:hl+end])
		} else {
			acc = copySum(out[hl:], pkt[hl+start:hl+end], 0)
		}
		t.ip.fix(out[l.inner:], uint16(i*max(l.group, 1)))
		hdr := t.fixL4(out[l.l3Len:], uint32(start), i == 0, i == l.segments-1)
		pseudo := addAcc(t.pseudo, beAcc(uint16(len(out)-l.l3Len)))
		field := out[l.l3Len+l.csumOffset:]
		if partial {
			binary.BigEndian.PutUint16(field, fold(pseudo))
		} else {
			c := t.finish(addAcc(addAcc(pseudo, hdr), acc))
			binary.BigEndian.PutUint16(field, c)
			t.fixOuter(out, uint16(i), addAcc(addAcc(hdr, acc), beAcc(c)))
		}
		sizes[b] = len(out)
	}
}

// template holds what every segment of one super-packet shares, so that
// each segment's checksums are finished from a few words instead of
// summing its headers again.
type template struct {
	l      Layout
	pseudo uint64 // the input's partial checksum minus the length it covers
	ip     ipFix  // the (inner) IP header
	l4     uint64 // transport header sum without the fields fixL4 rewrites
	seq    uint32 // TCP sequence number of the input
	flags  uint16 // TCP data offset and flags word of the input
	outer  outerFix
}

// ipFix rewrites one IP header of every segment.
type ipFix struct {
	ipv6 bool
	sum  uint64 // IPv4 header sum without total length, ID and checksum
	id   uint16 // IPv4 ID of the input
}

func newIPFix(ip []byte, ipv6 bool) ipFix {
	f := ipFix{ipv6: ipv6}
	if !ipv6 {
		f.id = binary.BigEndian.Uint16(ip[ipv4IDOff:])
		f.sum = without(without(without(sum(ip, 0), ip, ipv4TotalOff), ip, ipv4IDOff), ip, ipv4CsumOff)
	}
	return f
}

// fix rewrites the length of p, segment i, in the IP header at its front
// and, for IPv4, its ID (one more per segment) and header checksum.
func (f *ipFix) fix(p []byte, i uint16) {
	if f.ipv6 {
		binary.BigEndian.PutUint16(p[ipv6PLenOff:], uint16(len(p)-ipv6Len))
		return
	}
	tot, id := uint16(len(p)), f.id+i
	binary.BigEndian.PutUint16(p[ipv4TotalOff:], tot)
	binary.BigEndian.PutUint16(p[ipv4IDOff:], id)
	binary.BigEndian.PutUint16(p[ipv4CsumOff:], ^fold(addAcc(f.sum, beAcc(tot)+beAcc(id))))
}

// outerFix rewrites the outer headers of a tunnel packet's segments.
// Like the kernel's skb_udp_tunnel_segment, it derives each segment's
// outer UDP checksum from the input's partial one, adjusted by the change
// in length, and leaves the field alone without FlagUDPTunnelCsum.
type outerFix struct {
	ip     ipFix
	csum   bool
	pseudo uint64 // the input's outer partial checksum minus its UDP length
	fixed  uint64 // sum of the ports and the tunnel header up to the inner IP header
}

func newOuterFix(pkt []byte, l Layout) outerFix {
	udp := pkt[l.outerL3:l.inner]
	o := outerFix{ip: newIPFix(pkt[:l.outerL3], l.tunnel == GSOUDPTunnelIPv6), csum: l.tunnelCsum}
	old := uint16(len(pkt) - l.outerL3)
	o.pseudo = addAcc(beAcc(binary.BigEndian.Uint16(udp[udpCsumOffset:])), beAcc(^old))
	o.fixed = sum(udp[udpLen:], sum(udp[:udpLenOff], 0))
	return o
}

// newTemplate sums the input's headers once. The kernel adjusts the
// sender's pseudo-header sum by the change in length rather than
// recomputing it (tcp_gso_segment with the transport length,
// __udp_gso_segment with the UDP length field); so does pseudo.
func newTemplate(pkt []byte, l Layout) template {
	t := template{l: l}
	l4 := pkt[l.l3Len:l.HdrLen()]
	old := uint16(len(pkt) - l.l3Len)
	t.l4 = without(sum(l4, 0), l4, l.csumOffset)
	if l.proto == protoTCP {
		t.seq = binary.BigEndian.Uint32(l4[tcpSeqOff:])
		t.flags = binary.BigEndian.Uint16(l4[tcpFlagsOff-1:])
		t.l4 = without(without(without(t.l4, l4, tcpSeqOff), l4, tcpSeqOff+2), l4, tcpFlagsOff-1)
	} else {
		old = binary.BigEndian.Uint16(l4[udpLenOff:])
		t.l4 = without(t.l4, l4, udpLenOff)
	}
	t.pseudo = addAcc(beAcc(binary.BigEndian.Uint16(l4[l.csumOffset:])), beAcc(^old))
	if !l.needsCsum || l.big { // TSO only, or a length no IP field gave: summed afresh
		t.pseudo = pseudoHeader(pkt[l.inner:], l.ipv6, l.proto, 0)
	}
	t.ip = newIPFix(pkt[l.inner:l.l3Len], l.ipv6)
	if l.tunnel != 0 {
		t.outer = newOuterFix(pkt, l)
	}
	return t
}

// without takes the 16-bit word at hdr[off:] out of the sum acc of hdr.
func without(acc uint64, hdr []byte, off int) uint64 {
	return addAcc(acc, beAcc(^binary.BigEndian.Uint16(hdr[off:])))
}

// fixOuter rewrites the outer headers of segment i of a tunnel packet:
// the outer IP header as ipFix.fix does, the outer UDP length and, if asked
// for, the outer UDP checksum. l4 is the sum of the inner transport
// header, payload and checksum as written.
func (t *template) fixOuter(out []byte, i uint16, l4 uint64) {
	l, o := &t.l, &t.outer
	if l.tunnel == 0 {
		return
	}
	o.ip.fix(out, i)
	udp := out[l.outerL3:]
	n := beAcc(uint16(len(udp)))
	binary.BigEndian.PutUint16(udp[udpLenOff:], uint16(len(udp)))
	if !o.csum {
		return
	}
	acc := addAcc(addAcc(o.pseudo, n+n), o.fixed)
	acc = addAcc(addAcc(acc, sum(out[l.inner:l.l3Len], 0)), l4)
	c := ^fold(acc)
	if c == 0 {
		c = udpCsumZero
	}
	binary.BigEndian.PutUint16(udp[udpCsumOffset:], c)
}

// fixL4 rewrites the transport header of a segment that starts sent bytes
// into the payload and returns its sum without the checksum field. TCP:
// the sequence number advances; FIN and PSH stay on the last segment
// only, CWR on the first only. UDP: the length is the segment's.
func (t *template) fixL4(l4 []byte, sent uint32, first, last bool) uint64 {
	if t.l.proto != protoTCP {
		n := uint16(len(l4))
		binary.BigEndian.PutUint16(l4[udpLenOff:], n)
		return addAcc(t.l4, beAcc(n))
	}
	seq, flags := t.seq+sent, t.flags
	if !last {
		flags &^= tcpFIN | tcpPSH
	}
	if !first {
		flags &^= tcpCWR
	}
	binary.BigEndian.PutUint32(l4[tcpSeqOff:], seq)
	binary.BigEndian.PutUint16(l4[tcpFlagsOff-1:], flags)
	return addAcc(t.l4, beAcc(uint16(seq>>16))+beAcc(uint16(seq))+beAcc(flags))
}

// finish turns a segment's whole transport sum into its checksum. Like
// the kernel's GSO, UDP sends a zero checksum as all ones; TCP keeps it.
func (t *template) finish(acc uint64) uint16 {
	c := ^fold(acc)
	if c == 0 && t.l.proto == protoUDP {
		c = udpCsumZero
	}
	return c
}

// splitUFO cuts fragments first to first+len(bufs)-1 of one UDP datagram
// into IP fragments of MSS bytes of L4 data each; fragment 0 carries the
// UDP checksum, computed over the whole datagram.
func (s *Segmenter) splitUFO(pkt []byte, l Layout, first int, bufs [][]byte, sizes []int, offset int) {
	var check uint16
	if first == 0 {
		check = ufoChecksum(pkt, l) // before pkt may be written over
	}
	data := len(pkt) - l.l3Len
	hl := l.l3Len
	if l.ipv6 {
		hl += fragHdrLen
	}
	n, last := len(bufs), l.segments-1
	for k := 1; k <= n; k++ { // bufs[0] last, as in splitL4
		b := k % n
		i := first + b
		start := i * l.mss
		end := min(start+l.mss, data)
		out := bufs[b][offset : offset+hl+end-start]
		copycount.Add(out, pkt)
		copy(out[hl:], pkt[l.l3Len+start:l.l3Len+end]) // first: may move in place
		copy(out[:l.l3Len], pkt[:l.l3Len])
		if l.ipv6 {
			fixFragIPv6(out, pkt[ipv6NextOff], start, i < last, l.fragID)
		} else {
			fixFragIPv4(out, l.l3Len, start, i < last)
		}
		sizes[b] = len(out)
	}
	if first == 0 {
		binary.BigEndian.PutUint16(bufs[0][offset+hl+udpCsumOffset:], check)
	}
}

// ufoChecksum computes the UDP checksum of the whole datagram from
// scratch, as udp4_ufo_fragment and udp6_ufo_fragment do.
func ufoChecksum(pkt []byte, l Layout) uint16 {
	l4 := pkt[l.l3Len:]
	acc := addAcc(pseudoHeader(pkt, l.ipv6, protoUDP, len(l4)), sum(l4, 0))
	acc = addAcc(acc, beAcc(^binary.BigEndian.Uint16(l4[udpCsumOffset:]))) // as if the field were 0
	c := ^fold(acc)
	if c == 0 {
		c = udpCsumZero
	}
	return c
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
