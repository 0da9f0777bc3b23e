package segment

import (
	"encoding/binary"
	"math/bits"

	"github.com/gsoplane/gsoplane/internal/iphdr"
)

// MSS values Linux assumes (include/net/tcp.h, tcp_v4_connect,
// tcp_v6_connect and the request socket ops): a SYN without an MSS option
// announces TCP_MSS_DEFAULT, 536 (RFC 9293 3.7.1, formerly RFC 879), over
// IPv4 and IPV6_MIN_MTU - 40 - 20 = 1220 (RFC 8200 5) over IPv6; a sender
// never goes below tcp_min_snd_mss, 48, whatever the peer announced.
const (
	tcpMSSDefault4 = 536
	tcpMSSDefault6 = 1220
	tcpMinSndMSS   = 48
)

// TCP option kinds.
const (
	tcpOptEOL = 0
	tcpOptNOP = 1
	tcpOptMSS = 2
	tcpOptAO  = 29 // TCP-AO (RFC 5925): its MAC covers the other options
)

// Clamp lowers the MSS option of a TCP SYN or SYN-ACK to what an MTU of
// mtu allows, mtu minus 40 over IPv4 and minus 60 over IPv6 (the fixed IP
// and TCP headers), and returns whether it changed pkt, as iptables
// TCPMSS --clamp-mss-to-pmtu does (xt_TCPMSS.c): it never raises an MSS,
// changes every MSS option above the limit, and fixes the TCP checksum
// incrementally (RFC 1624) unless the field holds a partial checksum (the
// pseudo-header sum, which does not cover the option). It leaves alone a
// SYN without an MSS option (TCPMSS would insert one; the default the
// receiver then assumes, 536 or 1220, fits every MTU of at least 576 or
// 1280), one signed with TCP-AO (rewriting it would break the signature;
// TCP-MD5 does not cover options), IP fragments, non-TCP packets and an mtu
// of 40 (60) or less.
//
// When to use it: on a gateway whose two sides have different MTUs (a
// jumbo-frame link in front of a 1500-byte one, or a tunnel), on SYNs in
// both directions, with the smaller of the MTUs of the two links the flow
// crosses (TCPMSS uses the smaller of the route MTUs toward the
// destination and back to the source). Senders then send segments that
// fit and ForWire has nothing to cut beyond TSO super-packets, path MTU
// discovery has nothing to discover, and a path that drops ICMP errors is
// no black hole. Without it the gateway still delivers (it resegments TCP
// to the MTU), at the cost of cutting every large segment. Clamp before
// Announced and ForWire: the table then records the clamped MSS, and a
// partial checksum left as is stays right for ForWire to complete.
func Clamp(pkt []byte, mtu int) bool {
	t, ok := ParseTCP(pkt)
	if !ok || pkt[t.L3+tcpFlagsOff]&tcpSYN == 0 {
		return false
	}
	limit := mtu - ipv4MinLen - tcpMinLen
	if t.v6 {
		limit = mtu - ipv6Len - tcpMinLen
	}
	opts := pkt[t.L3+tcpMinLen : t.L3+t.l4]
	if limit <= 0 || limit >= 0xffff || !mssAbove(opts, limit) {
		return false
	}
	field := pkt[t.L3+tcpCsumOffset:]
	check := binary.BigEndian.Uint16(field)
	p := fold(pseudoHeader(pkt, t.v6, protoTCP, len(pkt)-t.L3))
	partial := check == p || (check == 0 && p == 0xffff)
	binary.BigEndian.PutUint16(field, lowerMSS(opts, uint16(limit), check, partial))
	return true
}

// mssAbove reports whether opts, the options of a TCP header, hold an
// MSS option above limit and no TCP-AO option.
func mssAbove(opts []byte, limit int) bool {
	found := false
	for it := (tcpOptIter{b: opts}); ; {
		kind, off, n, ok := it.next()
		switch {
		case !ok:
			return found
		case kind == tcpOptAO:
			return false
		}
		found = found || kind == tcpOptMSS && n == 4 && int(binary.BigEndian.Uint16(opts[off+2:])) > limit
	}
}

// lowerMSS lowers every MSS option in opts above limit to limit and
// returns the TCP checksum check updated for it, or unchanged if it is
// partial (the pseudo-header sum does not cover the options).
func lowerMSS(opts []byte, limit, check uint16, partial bool) uint16 {
	for it := (tcpOptIter{b: opts}); ; {
		kind, off, n, ok := it.next()
		if !ok {
			return check
		}
		if kind != tcpOptMSS || n != 4 {
			continue
		}
		val := opts[off+2:]
		old := binary.BigEndian.Uint16(val)
		if old <= limit {
			continue
		}
		binary.BigEndian.PutUint16(val, limit)
		if !partial {
			// The value sits at an even or odd offset from the start of
			// the TCP header: at an odd one its bytes straddle two
			// 16-bit words and it counts byte-swapped in the sum.
			o, nw := old, limit
			if (tcpMinLen+off+2)%2 == 1 {
				o, nw = bits.ReverseBytes16(o), bits.ReverseBytes16(nw)
			}
			check = csumReplace(check, o, nw)
		}
	}
}

// TCP locates the TCP header of a whole, unfragmented IPv4 or IPv6 TCP
// packet, as ParseTCP found it, for a table that remembers what each
// flow's handshake announced. Its methods take that packet.
type TCP struct {
	L3 int // offset of the TCP header: the IP header with its IPv4 options or IPv6 extension headers
	l4 int // TCP header length, options included
	v6 bool
}

// ParseTCP finds the TCP header of pkt, a whole IPv4 or IPv6 packet as
// ForWire takes it: unfragmented (IPv6 through hop-by-hop, routing and
// destination options headers), with an IP length that matches len(pkt)
// and a TCP header that fits. ok is false for anything else.
func ParseTCP(pkt []byte) (t TCP, ok bool) {
	if !iphdr.Whole(pkt) {
		return TCP{}, false
	}
	if iphdr.Version(pkt) == 4 {
		t.L3 = iphdr.HeaderLen(pkt)
		if pkt[9] != protoTCP || binary.BigEndian.Uint16(pkt[ipv4FragOff:])&0x3fff != 0 {
			return TCP{}, false
		}
	} else {
		t.v6 = true
		next, off := pkt[ipv6NextOff], ipv6Len
		for next != protoTCP {
			if next != protoHopByHop && next != protoRouting && next != protoDestOpts || off+8 > len(pkt) {
				return TCP{}, false
			}
			next, off = pkt[off], off+(int(pkt[off+1])+1)*8
		}
		t.L3 = off
	}
	if t.L3+tcpMinLen > len(pkt) {
		return TCP{}, false
	}
	t.l4 = int(pkt[t.L3+12]>>4) * 4
	if t.l4 < tcpMinLen || t.L3+t.l4 > len(pkt) {
		return TCP{}, false
	}
	return t, true
}

// Announced returns the MSS that pkt announces if it is a SYN or SYN-ACK
// its receiver accepts, for the packets that will flow back to its
// sender: the last MSS option that is not 0 (tcp_parse_options ignores
// an MSS of 0), or the default when there is none (536 over IPv4, 1220
// over IPv6, as Linux assumes). ok is false for other packets, and for a
// SYN that also carries RST or FIN or whose IPv4 header checksum or TCP
// checksum (complete or partial) is wrong, as its receiver ignores it.
func (t TCP) Announced(pkt []byte) (mss int, ok bool) {
	if pkt[t.L3+tcpFlagsOff]&(tcpSYN|tcpRST|tcpFIN) != tcpSYN || !t.checked(pkt) {
		return 0, false
	}
	mss = tcpMSSDefault4
	if t.v6 {
		mss = tcpMSSDefault6
	}
	opts := pkt[t.L3+tcpMinLen : t.L3+t.l4]
	for it := (tcpOptIter{b: opts}); ; {
		kind, off, n, ok := it.next()
		if !ok {
			return mss, true
		}
		if kind == tcpOptMSS && n == 4 {
			if m := int(binary.BigEndian.Uint16(opts[off+2:])); m != 0 {
				mss = m
			}
		}
	}
}

// Resets reports whether pkt is a RST its receiver accepts: without SYN,
// with a correct IPv4 header checksum and TCP checksum (complete or
// partial). It ends the flow in both directions.
func (t TCP) Resets(pkt []byte) bool {
	return pkt[t.L3+tcpFlagsOff]&(tcpSYN|tcpRST) == tcpRST && t.checked(pkt)
}

// SegmentMSS returns the TCP payload per segment of the packet's flow for
// a receiver that announced mss: mss less the packet's IPv4 options or
// IPv6 extension headers and its TCP options, as a Linux sender computes
// it (__tcp_mtu_to_mss, tcp_mtu_to_mss: RFC 6691 leaves options out of
// the MSS), but never less than 48 minus the TCP options
// (tcp_min_snd_mss). Pass it to ForWire.
func (t TCP) SegmentMSS(mss int) int {
	base := ipv4MinLen
	if t.v6 {
		base = ipv6Len
	}
	return max(mss-(t.L3-base), tcpMinSndMSS) - (t.l4 - tcpMinLen)
}

// checked reports whether the packet would reach its receiver's TCP: a
// correct IPv4 header checksum and a complete or partial TCP checksum.
func (t TCP) checked(pkt []byte) bool {
	if !t.v6 && Checksum(pkt[:t.L3], 0) != 0 {
		return false
	}
	st := l4Csum(pkt, t.L3, protoTCP, t.v6)
	return st == CsumComplete || st == CsumPartial
}

// tcpOptIter walks TCP options as Linux's tcp_parse_options does: NOPs
// are skipped, and the walk ends at the end-of-options option, at an
// option length below 2, or at an option that does not fit.
type tcpOptIter struct {
	b []byte
	i int
}

// next returns the next option's kind, offset and length.
func (it *tcpOptIter) next() (kind byte, off, n int, ok bool) {
	for it.i < len(it.b) {
		off = it.i
		kind = it.b[off]
		switch kind {
		case tcpOptEOL:
			it.i = len(it.b)
			return 0, 0, 0, false
		case tcpOptNOP:
			it.i++
			continue
		}
		if off+2 > len(it.b) {
			break
		}
		n = int(it.b[off+1])
		if n < 2 || off+n > len(it.b) {
			break
		}
		it.i = off + n
		return kind, off, n, true
	}
	it.i = len(it.b)
	return 0, 0, 0, false
}
