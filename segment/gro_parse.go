package segment

import (
	"encoding/binary"

	"github.com/gsoplane/gsoplane/internal/iphdr"
)

// groKind is what a mergeable packet is: TCP or UDP, over IPv4 or IPv6.
type groKind uint8

const (
	groTCP groKind = 1 << iota
	groUDP
	groV6
)

func (k groKind) v6() bool { return k&groV6 != 0 }

func (k groKind) proto() uint8 {
	if k&groTCP != 0 {
		return protoTCP
	}
	return protoUDP
}

// groPacket is one packet of a batch as classify found it.
type groPacket struct {
	b      []byte // the IP packet
	l3     int    // IP header length, IPv6 extension headers included
	hdrLen int    // IP and transport header length
	kind   groKind
	flags  uint8  // TCP flags
	keyed  bool   // the ports can be read: hash, addresses and ports are valid
	hash   uint64 // of the flow: kind, addresses and ports
	next   int32  // the next packet of the same output packet, or -1
}

// passReason says why a packet is passed through instead of merged.
type passReason uint8

const (
	passNone passReason = iota
	passNotTCPUDP
	passBadChecksum
	passNoChecksum
	passIPOptions
	passFragment
	passFlags
	passNoPayload
	passDisabled
	passMalformed
)

// counter returns the counter of the reason in s.
func (r passReason) counter(s *CoalesceStats) *uint64 {
	switch r {
	case passNotTCPUDP:
		return &s.NotTCPUDP
	case passBadChecksum:
		return &s.BadChecksum
	case passNoChecksum:
		return &s.NoChecksum
	case passIPOptions:
		return &s.IPOptions
	case passFragment:
		return &s.Fragment
	case passFlags:
		return &s.Flags
	case passNoPayload:
		return &s.NoPayload
	case passDisabled:
		return &s.Disabled
	}
	return &s.Malformed
}

// groRules say what a Coalescer merges and what its caller vouches for.
type groRules struct {
	tcp, udp  bool // merge TCP, UDP
	ipChecked bool // CoalescerConfig.IPChecked
}

// classify parses p.b and says why it cannot merge, or passNone. It fills
// in p's layout and, whenever the ports can be read, its flow, so that a
// packet passed through can still close its flow's merge. It checks what
// the kernel checks before it looks for a flow to merge with; the
// transport checksum is verified only once the packet has a partner.
func (r groRules) classify(p *groPacket) passReason {
	var proto uint8
	var why passReason
	var ok bool
	switch iphdr.Version(p.b) {
	case 4:
		proto, why, ok = p.parseIPv4(r.ipChecked)
	case 6:
		proto, why, ok = p.parseIPv6()
	default:
		return passMalformed
	}
	if !ok {
		return why
	}
	if l4 := r.parseL4(p, proto); why == passNone {
		why = l4
	}
	return why
}

// parseIPv4 mirrors inet_gro_receive: only a 20-byte header with a valid
// checksum (not verified again if checked), no fragment bits and a total
// length equal to the packet's merges. ok reports whether the transport
// header can be found.
func (p *groPacket) parseIPv4(checked bool) (proto uint8, why passReason, ok bool) {
	b := p.b
	if !iphdr.Whole(b) {
		return 0, passMalformed, false
	}
	ihl := iphdr.HeaderLen(b)
	frag := binary.BigEndian.Uint16(b[ipv4FragOff:]) &^ ipv4DF
	if frag&^ipv4Evil != 0 {
		return 0, passFragment, false
	}
	p.l3 = ihl
	switch {
	case frag != 0:
		why = passFragment
	case ihl != ipv4MinLen:
		why = passIPOptions
	case !checked && !ipv4HeaderOK(b):
		why = passBadChecksum
	}
	return b[9], why, true
}

// parseIPv6 mirrors ipv6_gro_receive: the payload length must be the
// packet's; Hop-by-Hop (first only), Routing and Destination Options
// headers are walked over (the kernel's INET6_PROTO_GSO_EXTHDR headers); a
// Fragment header ends the walk. ok reports whether the transport header
// can be found.
func (p *groPacket) parseIPv6() (proto uint8, why passReason, ok bool) {
	b := p.b
	if !iphdr.Whole(b) {
		return 0, passMalformed, false
	}
	next, off := b[ipv6NextOff], ipv6Len
	for {
		switch next {
		case protoHopByHop, protoRouting, protoDestOpts:
			if next == protoHopByHop && off != ipv6Len {
				why = passIPOptions // only valid first; Split refuses it elsewhere
			}
			if off+2 > len(b) {
				return 0, passMalformed, false
			}
			n := (int(b[off+1]) + 1) * 8
			if off+n > len(b) {
				return 0, passMalformed, false
			}
			next, off = b[off], off+n
		case protoFragment:
			return 0, passFragment, false
		default:
			p.l3 = off
			return next, why, true
		}
	}
}

// parseL4 checks the transport header. Whatever else is wrong with it, a
// TCP or UDP packet whose ports can be read has a flow.
func (r groRules) parseL4(p *groPacket, proto uint8) passReason {
	switch {
	case proto == protoTCP && !r.tcp, proto == protoUDP && !r.udp:
		return passDisabled
	case proto != protoTCP && proto != protoUDP:
		return passNotTCPUDP
	case len(p.b)-p.l3 < 4:
		return passMalformed
	case proto == protoTCP:
		p.setFlow(groTCP)
		return p.parseTCP()
	}
	p.setFlow(groUDP)
	return p.parseUDP()
}

// parseTCP mirrors tcp_gro_pull_header and the flag checks of
// tcp_gro_receive: SYN, RST, URG and (in Linux 6.18) CWR never merge, nor a
// segment without payload.
func (p *groPacket) parseTCP() passReason {
	l4 := p.b[p.l3:]
	if len(l4) < tcpMinLen {
		return passMalformed
	}
	n := int(l4[12]>>4) * 4
	if n < tcpMinLen || n > len(l4) {
		return passMalformed
	}
	p.hdrLen, p.flags = p.l3+n, l4[tcpFlagsOff]
	switch {
	case p.flags&(tcpSYN|tcpRST|tcpURG|tcpCWR) != 0:
		return passFlags
	case n == len(l4):
		return passNoPayload
	}
	return passNone
}

// parseUDP mirrors udp_gro_receive_segment: the UDP length must be the IP
// payload's and leave a payload, and a zero checksum never merges.
func (p *groPacket) parseUDP() passReason {
	l4 := p.b[p.l3:]
	switch {
	case len(l4) < udpLen || int(binary.BigEndian.Uint16(l4[udpLenOff:])) != len(l4):
		return passMalformed
	case len(l4) == udpLen:
		return passNoPayload
	case binary.BigEndian.Uint16(l4[udpCsumOffset:]) == 0:
		return passNoChecksum
	}
	p.hdrLen = p.l3 + udpLen
	return passNone
}

// setFlow records the packet's kind and flow, once the ports are known.
func (p *groPacket) setFlow(kind groKind) {
	if iphdr.Version(p.b) == 6 {
		kind |= groV6
	}
	p.kind, p.keyed = kind, true
	h := uint64(kind)<<32 | uint64(binary.LittleEndian.Uint32(p.b[p.l3:]))
	for a := p.addrs(); len(a) > 0; a = a[8:] {
		h = (h ^ binary.LittleEndian.Uint64(a)) * 0x9e3779b97f4a7c15
		h ^= h >> 29
	}
	p.hash = h
}

// addrs returns the source and destination addresses.
func (p *groPacket) addrs() []byte { return iphdr.Addrs(p.b) }

// sameFlow reports whether two keyed packets belong to one flow: kind,
// addresses and ports.
func sameFlow(a, b *groPacket) bool {
	if a.hash != b.hash || a.kind != b.kind ||
		binary.LittleEndian.Uint32(a.b[a.l3:]) != binary.LittleEndian.Uint32(b.b[b.l3:]) {
		return false
	}
	x, y := a.addrs(), b.addrs()
	for len(x) >= 8 {
		if binary.LittleEndian.Uint64(x) != binary.LittleEndian.Uint64(y) {
			return false
		}
		x, y = x[8:], y[8:]
	}
	return true
}

// tcpEnd reports whether a TCP segment has PSH or FIN: it may only end a
// merge.
func (p *groPacket) tcpEnd() bool { return p.flags&(tcpPSH|tcpFIN) != 0 }

// payload returns the payload length.
func (p *groPacket) payload() int { return len(p.b) - p.hdrLen }

// checksumOK verifies the transport checksum with the pseudo-header.
func (p *groPacket) checksumOK() bool {
	l4 := p.b[p.l3:]
	return fold(sum(l4, pseudoHeader(p.b, p.kind.v6(), p.kind.proto(), len(l4)))) == 0xffff
}
