package segment

import "encoding/binary"

// Checksums of headers and pseudo-headers, on the accumulators of sum.go.

// Checksum returns the Internet checksum (the complement of the one's
// complement sum) of b, in network byte order, starting from the partial
// sum initial (for example a pseudo-header sum).
func Checksum(b []byte, initial uint16) uint16 {
	return ^fold(sum(b, beAcc(initial)))
}

// pseudoHeader sums the pseudo-header of an IPv4 or IPv6 packet.
func pseudoHeader(pkt []byte, v6 bool, proto uint8, l4Len int) uint64 {
	addrs := pkt[12:20]
	if v6 {
		addrs = pkt[8:40]
	}
	return sum(addrs, uint64(proto)<<8+beAcc(uint16(l4Len)))
}

// ipv4Checksum rewrites the header checksum of the IPv4 header iph.
func ipv4Checksum(iph []byte) {
	binary.BigEndian.PutUint16(iph[ipv4CsumOff:], 0)
	binary.BigEndian.PutUint16(iph[ipv4CsumOff:], Checksum(iph, 0))
}

// ipv4HeaderOK verifies the checksum of a 20-byte IPv4 header: five
// 32-bit words cannot overflow the accumulator.
func ipv4HeaderOK(b []byte) bool {
	le := binary.LittleEndian
	return fold(uint64(le.Uint32(b))+uint64(le.Uint32(b[4:]))+uint64(le.Uint32(b[8:]))+
		uint64(le.Uint32(b[12:]))+uint64(le.Uint32(b[16:]))) == 0xffff
}

// csumReplace updates the Internet checksum hc of data in which the
// 16-bit word old became new (RFC 1624, equation 3).
func csumReplace(hc, old, new uint16) uint16 {
	s := uint32(^hc) + uint32(^old) + uint32(new)
	s = s&0xffff + s>>16
	s = s&0xffff + s>>16
	return ^uint16(s)
}
