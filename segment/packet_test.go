package segment

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// This file holds the packet builder shared by the package's tests: it
// builds super-packets (and plain packets) with gVisor's header encoders,
// together with the virtio-net header a Linux sender would put in front.

// IPv6 extension header protocol numbers understood by buildSuper.
const (
	extHopByHop = 0  // hop-by-hop options
	extRouting  = 43 // routing header, type 0 with segments_left 0
	extFragment = 44 // fragment header (offset 0, M set): makes an already-fragmented packet
	extDestOpts = 60 // destination options
)

// TCP flag bits, as in the TCP header.
const (
	flagFIN = uint8(header.TCPFlagFin)
	flagSYN = uint8(header.TCPFlagSyn)
	flagRST = uint8(header.TCPFlagRst)
	flagPSH = uint8(header.TCPFlagPsh)
	flagACK = uint8(header.TCPFlagAck)
	flagURG = uint8(header.TCPFlagUrg)
	flagECE = uint8(header.TCPFlagEce)
	flagCWR = uint8(header.TCPFlagCwr)
)

// Default addresses and ports of built packets: 198.18.0.0/15 and
// 2001:2::/48 only (RFC 2544/5180 benchmarking ranges).
var (
	defaultSrc4 = netip.MustParseAddr("198.18.1.1")
	defaultDst4 = netip.MustParseAddr("198.19.1.1")
	defaultSrc6 = netip.MustParseAddr("2001:2:0:1::1")
	defaultDst6 = netip.MustParseAddr("2001:2:0:2::1")
)

// pbUDPCsumOff is the offset of the UDP checksum field (gVisor keeps its
// constant unexported).
const pbUDPCsumOff = 6

const (
	defaultSrcPort = 40000
	defaultDstPort = 5201
	defaultAck     = 0x01020304
	defaultWindow  = 0x2000
)

// extHdr is one IPv6 extension header: proto is its protocol number
// (extHopByHop, extRouting, extDestOpts, extFragment), len its length in
// bytes (a multiple of 8, at least 8; a fragment header is always 8).
type extHdr struct {
	proto uint8
	len   int
}

// superSpec describes a packet for buildSuper. Zero values pick defaults
// where noted.
type superSpec struct {
	v6      bool
	proto   uint8   // header.TCPProtocolNumber (6) or header.UDPProtocolNumber (17)
	gso     GSOType // virtio gso_type, GSOECN included
	mss     int     // gso_size
	payload int     // L4 payload bytes

	ipOpts   []byte   // IPv4 options, len%4 == 0, at most 40 bytes
	ext      []extHdr // IPv6 extension headers, in order
	tcpOpts  []byte   // TCP options, len%4 == 0, at most 40 bytes
	tcpFlags uint8    // 0 means ACK

	// needsCsum: the L4 checksum field holds the (uncomplemented)
	// pseudo-header sum over the full L4 length and the virtio header has
	// NEEDS_CSUM; otherwise the L4 checksum is complete.
	needsCsum bool

	src, dst netip.Addr // zero: defaultSrc4/defaultDst4 or the IPv6 ones
	srcPort  uint16     // zero: defaultSrcPort
	dstPort  uint16     // zero: defaultDstPort
	id       uint16     // IPv4 identification
	seq      uint32     // TCP sequence number
	ttl      uint8      // TTL / hop limit; zero means 64
	tos      uint8      // IPv4 TOS / IPv6 traffic class
	df       bool       // IPv4 don't-fragment
	seed     uint64     // payload bytes are a deterministic function of seed
}

// addrs returns the spec's addresses with defaults applied.
func (s superSpec) addrs() (src, dst netip.Addr) {
	src, dst = s.src, s.dst
	if !src.IsValid() {
		src = defaultSrc4
		if s.v6 {
			src = defaultSrc6
		}
	}
	if !dst.IsValid() {
		dst = defaultDst4
		if s.v6 {
			dst = defaultDst6
		}
	}
	return src, dst
}

// ports returns the spec's ports with defaults applied.
func (s superSpec) ports() (src, dst uint16) {
	src, dst = s.srcPort, s.dstPort
	if src == 0 {
		src = defaultSrcPort
	}
	if dst == 0 {
		dst = defaultDstPort
	}
	return src, dst
}

// fillPayload fills b with deterministic pseudo-random bytes from seed.
func fillPayload(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	for len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, r.Uint64())
		b = b[8:]
	}
	v := r.Uint64()
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
}

// writeExtHdr writes an IPv6 extension header of type e.proto into b
// (len(b) == e.len) with next header next.
func writeExtHdr(b []byte, e extHdr, next uint8) {
	clear(b)
	b[0] = next
	switch e.proto {
	case extFragment:
		// Offset 0, M set: the first fragment of a fragmented packet.
		binary.BigEndian.PutUint16(b[2:], 1)
		binary.BigEndian.PutUint32(b[4:], 0x6a7b8c9d)
		return
	case extRouting:
		b[1] = uint8(e.len/8 - 1)
		b[2] = 0 // routing type 0
		b[3] = 0 // segments left: nothing to process on the way
		return
	}
	// Hop-by-hop and destination options: fill the option area. Linux
	// drops option areas with more than 7 bytes of consecutive padding, so
	// larger areas carry one unknown option of type 0x1e (RFC 3692
	// experiment; the two high bits 00 mean "skip if unknown").
	b[1] = uint8(e.len/8 - 1)
	area := b[2:]
	switch {
	case len(area) <= 7:
		area[0] = 1 // PadN
		area[1] = uint8(len(area) - 2)
	default:
		area[0] = 0x1e
		area[1] = uint8(len(area) - 2)
	}
}

// buildSuper builds the packet described by s and the virtio-net header a
// Linux sender would give it. It panics on a spec it cannot encode.
func buildSuper(s superSpec) (pkt []byte, h Header) {
	src, dst := s.addrs()
	sport, dport := s.ports()
	if s.v6 != src.Is6() || s.v6 != dst.Is6() {
		panic(fmt.Sprintf("buildSuper: v6=%v with addresses %v, %v", s.v6, src, dst))
	}
	if len(s.ipOpts)%4 != 0 || len(s.ipOpts) > 40 || len(s.tcpOpts)%4 != 0 || len(s.tcpOpts) > 40 {
		panic("buildSuper: IPv4/TCP options must be a multiple of 4 bytes, at most 40")
	}
	ttl := s.ttl
	if ttl == 0 {
		ttl = 64
	}

	var l4Hdr int
	switch s.proto {
	case uint8(header.TCPProtocolNumber):
		l4Hdr = header.TCPMinimumSize + len(s.tcpOpts)
	case uint8(header.UDPProtocolNumber):
		l4Hdr = header.UDPMinimumSize
	default:
		panic(fmt.Sprintf("buildSuper: protocol %d", s.proto))
	}
	var l3 int
	if s.v6 {
		l3 = header.IPv6MinimumSize
		for _, e := range s.ext {
			if e.len < 8 || e.len%8 != 0 || (e.proto == extFragment && e.len != 8) {
				panic(fmt.Sprintf("buildSuper: extension header %+v", e))
			}
			l3 += e.len
		}
	} else {
		l3 = header.IPv4MinimumSize + len(s.ipOpts)
	}
	l4Len := l4Hdr + s.payload
	pkt = make([]byte, l3+l4Len)

	// Network header.
	var srcA, dstA tcpip.Address
	if s.v6 {
		srcA, dstA = tcpip.AddrFrom16(src.As16()), tcpip.AddrFrom16(dst.As16())
		if l3-header.IPv6MinimumSize+l4Len > 0xffff {
			panic("buildSuper: IPv6 payload longer than 65535 bytes")
		}
		first := s.proto
		if len(s.ext) > 0 {
			first = s.ext[0].proto
		}
		header.IPv6(pkt).Encode(&header.IPv6Fields{
			TrafficClass:      s.tos,
			FlowLabel:         0x12345,
			PayloadLength:     uint16(l3 - header.IPv6MinimumSize + l4Len),
			TransportProtocol: tcpip.TransportProtocolNumber(first),
			HopLimit:          ttl,
			SrcAddr:           srcA,
			DstAddr:           dstA,
		})
		off := header.IPv6MinimumSize
		for i, e := range s.ext {
			next := s.proto
			if i+1 < len(s.ext) {
				next = s.ext[i+1].proto
			}
			writeExtHdr(pkt[off:off+e.len], e, next)
			off += e.len
		}
	} else {
		srcA, dstA = tcpip.AddrFrom4(src.As4()), tcpip.AddrFrom4(dst.As4())
		if l3+l4Len > 0xffff {
			panic("buildSuper: IPv4 packet longer than 65535 bytes")
		}
		var flags uint8
		if s.df {
			flags = header.IPv4FlagDontFragment
		}
		ip := header.IPv4(pkt)
		ip.Encode(&header.IPv4Fields{
			TOS:         s.tos,
			TotalLength: uint16(l3 + l4Len),
			ID:          s.id,
			Flags:       flags,
			TTL:         ttl,
			Protocol:    s.proto,
			SrcAddr:     srcA,
			DstAddr:     dstA,
		})
		copy(pkt[header.IPv4MinimumSize:], s.ipOpts)
		ip.SetHeaderLength(uint8(l3))
		ip.SetChecksum(^ip.CalculateChecksum())
	}

	// Transport header and payload.
	l4 := pkt[l3:]
	fillPayload(l4[l4Hdr:], s.seed)
	var csumOff uint16
	switch s.proto {
	case uint8(header.TCPProtocolNumber):
		flags := s.tcpFlags
		if flags == 0 {
			flags = flagACK
		}
		header.TCP(l4).Encode(&header.TCPFields{
			SrcPort:    sport,
			DstPort:    dport,
			SeqNum:     s.seq,
			AckNum:     defaultAck,
			DataOffset: uint8(l4Hdr),
			Flags:      header.TCPFlags(flags),
			WindowSize: defaultWindow,
		})
		copy(l4[header.TCPMinimumSize:], s.tcpOpts)
		csumOff = header.TCPChecksumOffset
	case uint8(header.UDPProtocolNumber):
		if l4Len > 0xffff {
			panic("buildSuper: UDP datagram longer than 65535 bytes")
		}
		header.UDP(l4).Encode(&header.UDPFields{
			SrcPort: sport,
			DstPort: dport,
			Length:  uint16(l4Len),
		})
		csumOff = pbUDPCsumOff
	}
	pseudo := header.PseudoHeaderChecksum(tcpip.TransportProtocolNumber(s.proto), srcA, dstA, uint16(l4Len))
	if s.needsCsum {
		binary.BigEndian.PutUint16(l4[csumOff:], pseudo)
	} else {
		c := ^checksum.Checksum(l4, pseudo)
		if c == 0 && s.proto == uint8(header.UDPProtocolNumber) {
			c = 0xffff
		}
		binary.BigEndian.PutUint16(l4[csumOff:], c)
	}

	h = Header{
		GSOType: s.gso,
		HdrLen:  uint16(l3 + l4Hdr),
		GSOSize: uint16(s.mss),
	}
	if s.needsCsum {
		h.Flags = FlagNeedsCsum
		h.CsumStart = uint16(l3)
		h.CsumOffset = csumOff
	}
	return pkt, h
}

func TestBuilder(t *testing.T) {
	tcp, udp := uint8(header.TCPProtocolNumber), uint8(header.UDPProtocolNumber)
	specs := []superSpec{
		{proto: tcp, gso: GSOTCPv4, mss: 1448, payload: 5000, needsCsum: true, id: 7, seq: 100, df: true, seed: 1},
		{proto: tcp, gso: GSOTCPv4 | GSOECN, mss: 536, payload: 3000, needsCsum: true, ipOpts: []byte{1, 1, 1, 0}, tcpOpts: []byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2}, tcpFlags: flagACK | flagCWR, seed: 2},
		{v6: true, proto: tcp, gso: GSOTCPv6, mss: 1440, payload: 4000, needsCsum: true, ext: []extHdr{{extHopByHop, 8}, {extDestOpts, 16}, {extRouting, 24}}, seed: 3},
		{v6: true, proto: udp, gso: GSOUDPL4, mss: 1200, payload: 3601, needsCsum: true, seed: 4},
		{proto: udp, gso: GSOUDP, mss: 1480, payload: 4000, seed: 5},
		{v6: true, proto: udp, gso: GSOUDP, mss: 1448, payload: 4000, seed: 6},
		{proto: tcp, payload: 100, seed: 7},
		{v6: true, proto: udp, payload: 0, seed: 8},
	}
	for i, s := range specs {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			pkt, h := buildSuper(s)
			if again, _ := buildSuper(s); string(again) != string(pkt) {
				t.Fatal("buildSuper is not deterministic")
			}
			src, dst := s.addrs()
			var l3 int
			var srcA, dstA tcpip.Address
			if s.v6 {
				ip := header.IPv6(pkt)
				if !ip.IsValid(len(pkt)) || int(ip.PayloadLength()) != len(pkt)-header.IPv6MinimumSize {
					t.Fatalf("bad IPv6 header: payload length %d, packet %d", ip.PayloadLength(), len(pkt))
				}
				srcA, dstA = ip.SourceAddress(), ip.DestinationAddress()
				l3 = header.IPv6MinimumSize
				next := ip.NextHeader()
				for _, e := range s.ext {
					if next != e.proto || (e.proto != extFragment && int(pkt[l3+1]+1)*8 != e.len) {
						t.Fatalf("extension header %+v: next %d, hdrlen byte %d", e, next, pkt[l3+1])
					}
					next = pkt[l3]
					l3 += e.len
				}
				if next != s.proto {
					t.Fatalf("transport next header %d, want %d", next, s.proto)
				}
			} else {
				ip := header.IPv4(pkt)
				if !ip.IsValid(len(pkt)) || int(ip.TotalLength()) != len(pkt) {
					t.Fatalf("bad IPv4 header: total length %d, packet %d", ip.TotalLength(), len(pkt))
				}
				if !ip.IsChecksumValid() {
					t.Fatalf("bad IPv4 header checksum %#04x", ip.Checksum())
				}
				df := ip.Flags()&header.IPv4FlagDontFragment != 0
				if ip.ID() != s.id || df != s.df {
					t.Fatalf("IPv4 id %d flags %#x, spec %+v", ip.ID(), ip.Flags(), s)
				}
				srcA, dstA = ip.SourceAddress(), ip.DestinationAddress()
				l3 = int(ip.HeaderLength())
			}
			if srcA.String() != src.String() || dstA.String() != dst.String() {
				t.Fatalf("addresses %v > %v, want %v > %v", srcA, dstA, src, dst)
			}
			l4 := pkt[l3:]
			var l4Hdr int
			var csumOff int
			var got uint16
			switch s.proto {
			case tcp:
				th := header.TCP(l4)
				l4Hdr = int(th.DataOffset())
				csumOff = header.TCPChecksumOffset
				got = th.Checksum()
				if th.SequenceNumber() != s.seq {
					t.Fatalf("seq %d, want %d", th.SequenceNumber(), s.seq)
				}
				if !s.needsCsum && !th.IsChecksumValid(srcA, dstA, checksum.Checksum(l4[l4Hdr:], 0), uint16(len(l4)-l4Hdr)) {
					t.Fatalf("TCP checksum %#04x does not verify", got)
				}
			case udp:
				uh := header.UDP(l4)
				l4Hdr = header.UDPMinimumSize
				csumOff = pbUDPCsumOff
				got = uh.Checksum()
				if int(uh.Length()) != len(l4) {
					t.Fatalf("UDP length %d, want %d", uh.Length(), len(l4))
				}
				if !s.needsCsum && !uh.IsChecksumValid(srcA, dstA, checksum.Checksum(l4[l4Hdr:], 0)) {
					t.Fatalf("UDP checksum %#04x does not verify", got)
				}
			}
			if len(l4)-l4Hdr != s.payload {
				t.Fatalf("payload %d bytes, want %d", len(l4)-l4Hdr, s.payload)
			}
			if s.needsCsum {
				want := header.PseudoHeaderChecksum(tcpip.TransportProtocolNumber(s.proto), srcA, dstA, uint16(len(l4)))
				if got != want {
					t.Fatalf("partial checksum %#04x, want pseudo-header sum %#04x", got, want)
				}
				// Completing the partial checksum the way the kernel does
				// gives a valid packet.
				c := ^checksum.Checksum(l4, 0)
				binary.BigEndian.PutUint16(l4[csumOff:], c)
				if x := checksum.Checksum(l4, want); x != 0xffff {
					t.Fatalf("completed checksum does not verify: sum %#04x", x)
				}
				if h.Flags != FlagNeedsCsum || int(h.CsumStart) != l3 || int(h.CsumOffset) != csumOff {
					t.Fatalf("virtio header %+v, want csum_start %d csum_offset %d", h, l3, csumOff)
				}
			} else if h.Flags != 0 || h.CsumStart != 0 || h.CsumOffset != 0 {
				t.Fatalf("virtio header %+v without NEEDS_CSUM", h)
			}
			if int(h.HdrLen) != l3+l4Hdr || h.GSOType != s.gso || int(h.GSOSize) != s.mss {
				t.Fatalf("virtio header %+v, want hdr_len %d gso %v size %d", h, l3+l4Hdr, s.gso, s.mss)
			}
		})
	}
}
