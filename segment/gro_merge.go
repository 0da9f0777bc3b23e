package segment

import "encoding/binary"

// udpGROMax is the kernel's cap on datagrams per UDP merge
// (UDP_GRO_CNT_MAX in net/ipv4/udp_offload.c).
const udpGROMax = 64

// groMaxLen caps a merged IP packet's length: the kernel's gro_max_size
// (GRO_LEGACY_MAX_SIZE, 65536) less one, as skb_gro_receive refuses to
// reach it.
const groMaxLen = 0xffff

// tcpMergeMask selects, in the little-endian word of TCP header bytes 8 to
// 15 (ACK number, data offset, flags, window), the bits that may differ
// between merged segments: PSH and FIN (byte 13).
const tcpMergeMask = uint64(tcpPSH|tcpFIN) << 40

// groItem is one output packet of a batch: a packet passed through, or a
// merge of packets chained through groPacket.next.
type groItem struct {
	head, tail int32  // first and last packet
	count      int32  // packets merged
	total      int    // IP length of the merged packet
	gsoSize    int    // payload length of the first packet
	seq        uint32 // TCP: the sequence number that continues the merge
	fin        uint8  // TCP: PSH and FIN of the last segment
	open       bool   // more packets may join
	pass       bool   // passed through for a counted reason
	checked    bool   // the first packet's checksum is verified
	fixedID    bool   // IPv4: the IDs stay fixed instead of counting up
}

// newGROItem starts a merge with packet i.
func newGROItem(i int, p *groPacket) groItem {
	it := groItem{head: int32(i), tail: int32(i), count: 1, open: true, total: len(p.b), gsoSize: p.payload()}
	if p.kind&groTCP != 0 {
		it.seq = binary.BigEndian.Uint32(p.b[p.l3+tcpSeqOff:]) + uint32(it.gsoSize)
	}
	return it
}

type mergeResult uint8

const (
	mergeNo        mergeResult = iota // does not join: start a new merge
	mergeDone                         // joined
	mergeBadPacket                    // would join, but its checksum is bad
	mergeBadFirst                     // would join, but the first packet's checksum is bad: start a new merge
)

// merge tries to add packet i of pkts to it, the open merge of its flow.
// Checksums are verified only here, the first packet's once a second one
// would join it: a packet that never finds a partner goes out unverified,
// and the kernel verifies it.
func (it *groItem) merge(pkts []groPacket, i int) mergeResult {
	h, p := &pkts[it.head], &pkts[i]
	if !it.joins(h, p) {
		return mergeNo
	}
	if !it.checked {
		if !h.checksumOK() {
			it.pass = true
			return mergeBadFirst
		}
		it.checked = true
	}
	if !p.checksumOK() {
		return mergeBadPacket
	}
	pkts[it.tail].next = int32(i)
	it.tail = int32(i)
	it.count++
	it.total += p.payload()
	if p.kind&groTCP != 0 {
		it.seq += uint32(p.payload())
		it.fin = p.flags & (tcpPSH | tcpFIN)
	}
	it.open = p.payload() == it.gsoSize && it.fin == 0 && (p.kind&groUDP == 0 || it.count < udpGROMax)
	return mergeDone
}

// joins reports whether p, of the same flow as h, may join the merge that
// h starts.
func (it *groItem) joins(h, p *groPacket) bool {
	if p.payload() > it.gsoSize || it.total+p.payload() > groMaxLen {
		return false
	}
	if p.kind.v6() {
		if !ipv6Joins(h, p) {
			return false
		}
	} else if !it.ipv4Joins(h.b, p.b) {
		return false
	}
	return p.kind&groTCP == 0 || it.tcpJoins(h, p)
}

// ipv4Joins mirrors inet_gro_flush: TTL, TOS and DF equal, and the ID one
// more per packet, or fixed (decided at the second packet; since Linux
// 6.18 with or without DF).
func (it *groItem) ipv4Joins(h, p []byte) bool {
	if h[1] != p[1] || h[8] != p[8] || (h[ipv4FragOff]^p[ipv4FragOff])&(ipv4DF>>8) != 0 {
		return false
	}
	off := binary.BigEndian.Uint16(p[ipv4IDOff:]) - binary.BigEndian.Uint16(h[ipv4IDOff:])
	if it.count == 1 && off == 0 {
		it.fixedID = true
	}
	if it.fixedID {
		return off == 0
	}
	return off == uint16(it.count)
}

// ipv6Joins mirrors ipv6_gro_receive and ipv6_gro_flush: version, traffic
// class, flow label, next header, hop limit and the extension headers
// equal.
func ipv6Joins(h, p *groPacket) bool {
	return string(h.b[:4]) == string(p.b[:4]) && string(h.b[ipv6NextOff:ipv6NextOff+2]) == string(p.b[ipv6NextOff:ipv6NextOff+2]) &&
		string(h.b[ipv6Len:h.l3]) == string(p.b[ipv6Len:p.l3])
}

// tcpJoins mirrors tcp_gro_receive: the sequence number continues the
// merge, ACK, data offset, window and options equal, flags equal but for
// PSH and FIN. The urgent pointer must be equal too.
func (it *groItem) tcpJoins(h, p *groPacket) bool {
	th, tp := h.b[h.l3:h.hdrLen], p.b[p.l3:p.hdrLen]
	return binary.BigEndian.Uint32(tp[tcpSeqOff:]) == it.seq &&
		(binary.LittleEndian.Uint64(th[8:])^binary.LittleEndian.Uint64(tp[8:]))&^tcpMergeMask == 0 &&
		string(th[18:]) == string(tp[18:])
}

// complete rewrites the headers of h, the first packet, to describe the
// merged packet, as inet_gro_complete, ipv6_gro_complete,
// tcp4/6_gro_complete and udp4/6_gro_complete do, and writes the
// virtio-net header into vh, the whole of it.
func (it *groItem) complete(h *groPacket, vh []byte) {
	b, l4Len := h.b, it.total-h.l3
	if h.kind.v6() {
		binary.BigEndian.PutUint16(b[ipv6PLenOff:], uint16(it.total-ipv6Len))
	} else {
		binary.BigEndian.PutUint16(b[ipv4TotalOff:], uint16(it.total))
		ipv4Checksum(b[:h.l3])
	}
	l4 := b[h.l3:]
	vhdr := Header{Flags: FlagNeedsCsum, HdrLen: uint16(h.hdrLen), GSOSize: uint16(it.gsoSize), CsumStart: uint16(h.l3)}
	switch {
	case h.kind&groUDP != 0:
		binary.BigEndian.PutUint16(l4[udpLenOff:], uint16(l4Len))
		vhdr.GSOType, vhdr.CsumOffset = GSOUDPL4, udpCsumOffset
	case h.kind.v6():
		vhdr.GSOType, vhdr.CsumOffset = GSOTCPv6, tcpCsumOffset
	default:
		vhdr.GSOType, vhdr.CsumOffset = GSOTCPv4, tcpCsumOffset
	}
	if h.kind&groTCP != 0 {
		l4[tcpFlagsOff] |= it.fin
	}
	binary.BigEndian.PutUint16(l4[vhdr.CsumOffset:], fold(pseudoHeader(b, h.kind.v6(), h.kind.proto(), l4Len)))
	_ = vhdr.Encode(vh, len(vh)) // cannot fail: vh has a header size
}
