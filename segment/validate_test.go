package segment

import (
	"encoding/binary"
	"errors"
	"testing"
)

// TestValidateRejects breaks one rule at a time and checks that Validate
// names it.
func TestValidateRejects(t *testing.T) {
	tso4 := superSpec{proto: tcp, gso: GSOTCPv4, mss: 1448, payload: 5000, needsCsum: true}
	tso6 := superSpec{v6: true, proto: tcp, gso: GSOTCPv6, mss: 1448, payload: 5000, needsCsum: true}
	uso4 := superSpec{proto: udp, gso: GSOUDPL4, mss: 1400, payload: 5000, needsCsum: true}
	ufo6 := superSpec{v6: true, proto: udp, gso: GSOUDP, mss: 1448, payload: 5000}
	cases := []struct {
		name string
		spec superSpec
		bend func(pkt []byte, h *Header) []byte
		want rule
	}{
		{"unknown gso_type", tso4, func(p []byte, h *Header) []byte { h.GSOType = 2; return p }, ruleGSOType},
		{"gso_type 6", tso4, func(p []byte, h *Header) []byte { h.GSOType = 6; return p }, ruleGSOType},
		{"ECN without GSO", tso4, func(p []byte, h *Header) []byte { h.GSOType = GSOECN; return p }, ruleGSOType},
		{"ECN on USO", uso4, func(p []byte, h *Header) []byte { h.GSOType |= GSOECN; return p }, ruleGSOType},
		{"gso_size 0", tso4, func(p []byte, h *Header) []byte { h.GSOSize = 0; return p }, ruleGSOSize},
		{"gso_size GSO_BY_FRAGS", tso4, func(p []byte, h *Header) []byte { h.GSOSize = 0xffff; return p }, ruleGSOSize},
		{"UFO gso_size not a multiple of 8", ufo6, func(p []byte, h *Header) []byte { h.GSOSize = 1001; return p }, ruleGSOSize},
		{"hdr_len beyond packet", tso4, func(p []byte, h *Header) []byte { h.HdrLen = uint16(len(p) + 1); return p }, ruleHdrLen},
		{"empty", tso4, func(p []byte, h *Header) []byte { h.HdrLen = 0; return p[:0] }, ruleShortPacket},
		{"truncated IPv4 header", tso4, func(p []byte, h *Header) []byte { h.HdrLen = 0; return p[:19] }, ruleShortPacket},
		{"truncated IPv6 header", tso6, func(p []byte, h *Header) []byte { h.HdrLen = 0; return p[:39] }, ruleShortPacket},
		{"truncated packet", tso4, func(p []byte, h *Header) []byte { return p[:len(p)-1] }, ruleIPLength},
		{"IPv4 total length short", tso4, func(p []byte, h *Header) []byte { binary.BigEndian.PutUint16(p[2:], 100); return fixIPv4Csum(p) }, ruleIPLength},
		{"IPv6 payload length", tso6, func(p []byte, h *Header) []byte { binary.BigEndian.PutUint16(p[4:], 0); return p }, ruleIPLength},
		{"IPv4 ihl 4", tso4, func(p []byte, h *Header) []byte { p[0] = 0x44; return p }, ruleIPHeader},
		{"IPv4 header checksum", tso4, func(p []byte, h *Header) []byte { p[10] ^= 1; return p }, ruleIPChecksum},
		{"IP version 5", tso4, func(p []byte, h *Header) []byte { h.GSOType = GSOUDPL4; p[0] = 0x55; return p }, ruleIPHeader},
		{"TCPv4 over IPv6", tso6, func(p []byte, h *Header) []byte { h.GSOType = GSOTCPv4; return p }, ruleIPVersion},
		{"TCPv6 over IPv4", tso4, func(p []byte, h *Header) []byte { h.GSOType = GSOTCPv6; return p }, ruleIPVersion},
		{"IPv4 fragment MF", tso4, func(p []byte, h *Header) []byte { p[6] |= 0x20; return fixIPv4Csum(p) }, ruleFragmented},
		{"IPv4 fragment offset", tso4, func(p []byte, h *Header) []byte { p[7] = 1; return fixIPv4Csum(p) }, ruleFragmented},
		{"IPv6 fragment header", superSpec{v6: true, proto: tcp, gso: GSOTCPv6, mss: 1000, payload: 3000, needsCsum: true, ext: []extHdr{{extFragment, 8}}}, nil, ruleFragmented},
		{"hop-by-hop not first", superSpec{v6: true, proto: tcp, gso: GSOTCPv6, mss: 1000, payload: 3000, needsCsum: true, ext: []extHdr{{extDestOpts, 8}, {extHopByHop, 8}}}, nil, ruleExtHeader},
		{"extension header past the end", superSpec{v6: true, proto: tcp, gso: GSOTCPv6, mss: 50, payload: 100, needsCsum: true}, func(p []byte, h *Header) []byte { p[6] = extDestOpts; p[41] = 255; return p }, ruleExtHeader},
		{"UFO over IPv6 with extension headers", superSpec{v6: true, proto: udp, gso: GSOUDP, mss: 1448, payload: 5000, ext: []extHdr{{extDestOpts, 8}}}, nil, ruleExtHeader},
		{"TSO of UDP", uso4, func(p []byte, h *Header) []byte { h.GSOType = GSOTCPv4; return p }, ruleProtocol},
		{"USO of TCP", tso4, func(p []byte, h *Header) []byte { h.GSOType = GSOUDPL4; return p }, ruleProtocol},
		{"USO without NEEDS_CSUM", uso4, func(p []byte, h *Header) []byte { h.Flags = 0; return p }, ruleNeedsCsum},
		{"TCP data offset 4", tso4, func(p []byte, h *Header) []byte { p[20+12] = 4 << 4; return p }, ruleTransport},
		{"TCP header past the end", superSpec{proto: tcp, gso: GSOTCPv4, mss: 10, payload: 20, needsCsum: true}, func(p []byte, h *Header) []byte { p[20+12] = 15 << 4; return p }, ruleTransport},
		{"csum beyond packet", tso4, func(p []byte, h *Header) []byte { h.CsumStart = uint16(len(p)) - 17; return p }, ruleCsumRange},
		{"csum_start below the IP header", tso4, func(p []byte, h *Header) []byte { h.CsumStart = 16; return p }, ruleCsumStart},
		{"csum_start past the transport header", tso6, func(p []byte, h *Header) []byte { h.CsumStart += 4; return p }, ruleCsumStart},
		{"TCP csum_offset 6", tso4, func(p []byte, h *Header) []byte { h.CsumOffset = 6; return p }, ruleCsumOffset},
		{"USO csum_offset 16", uso4, func(p []byte, h *Header) []byte { h.CsumOffset = 16; return p }, ruleCsumOffset},
		{"USO over 128 segments", superSpec{proto: udp, gso: GSOUDPL4, mss: 400, payload: 128*400 + 1, needsCsum: true}, nil, ruleTooManySegments},
		{"UDP header cut", superSpec{proto: udp, gso: GSOUDPL4, mss: 100, payload: 0, needsCsum: true}, func(p []byte, h *Header) []byte {
			p, h.HdrLen = p[:24], 0
			binary.BigEndian.PutUint16(p[2:], 24)
			return fixIPv4Csum(p)
		}, ruleShortPacket},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pkt, h := buildSuper(c.spec)
			if c.bend != nil {
				pkt = c.bend(pkt, &h)
			}
			_, err := Validate(pkt, h)
			if !broke(err, c.want) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate = %v, want %v", err, c.want)
			}
			if n, err := Split(pkt, h, make([][]byte, 64), make([]int, 64), 0); n != 0 || !broke(err, c.want) {
				t.Fatalf("Split = %d, %v", n, err)
			}
		})
	}
}

// broke reports whether err is an *Error or a *BufferError of rule r.
func broke(err error, r rule) bool {
	var e *Error
	var be *BufferError
	return errors.As(err, &e) && e.rule == r || errors.As(err, &be) && be.rule == r
}

func fixIPv4Csum(p []byte) []byte {
	ipv4Checksum(p[:int(p[0]&0xf)*4])
	return p
}

// TestValidateAccepts covers inputs that pass through untouched.
func TestValidateAccepts(t *testing.T) {
	frag, h := buildSuper(superSpec{proto: udp, payload: 100})
	frag[6] = 0x20 // a first fragment, forwarded as it is
	fixIPv4Csum(frag)
	if l, err := Validate(frag, h); err != nil || l.kind != GSONone || l.segments != 1 {
		t.Fatalf("plain IPv4 fragment: %+v, %v", l, err)
	}
	other, h := buildSuper(superSpec{v6: true, proto: udp, payload: 10})
	other[6] = 59 // no next header: not a transport Split knows
	if _, err := Validate(other, h); err != nil {
		t.Fatalf("IPv6 with no next header: %v", err)
	}
}

// TestValidateManySegments: like the kernel, Validate caps the segments
// of USO only. A 64 KiB TSO super-packet at a small gso_size, down to 1,
// and a UFO datagram in 8-byte fragments are accepted with every segment
// counted.
func TestValidateManySegments(t *testing.T) {
	for _, c := range []struct {
		name string
		spec superSpec
		segs int
	}{
		{"TSO4 mss 1", superSpec{proto: tcp, gso: GSOTCPv4, mss: 1, payload: 65535 - 40, needsCsum: true}, 65535 - 40},
		{"TSO6 mss 1", superSpec{v6: true, proto: tcp, gso: GSOTCPv6, mss: 1, payload: 65535 - 20, needsCsum: true}, 65535 - 20},
		{"TSO4 mss 88", superSpec{proto: tcp, gso: GSOTCPv4, mss: 88, payload: 65535 - 40, needsCsum: true}, 745},
		{"TSO6 mss 100", superSpec{v6: true, proto: tcp, gso: GSOTCPv6, mss: 100, payload: 65535 - 20, needsCsum: true}, 656},
		{"TSO4 mss 400 without NEEDS_CSUM", superSpec{proto: tcp, gso: GSOTCPv4, mss: 400, payload: 60000}, 150},
		{"TSO4 129 segments", superSpec{proto: tcp, gso: GSOTCPv4, mss: 1, payload: 129, needsCsum: true}, 129},
		{"UFO4 gso 8", superSpec{proto: udp, gso: GSOUDP, mss: 8, payload: 65535 - 28}, (65535 - 20 + 7) / 8},
		{"USO 128 segments", superSpec{proto: udp, gso: GSOUDPL4, mss: 400, payload: 128 * 400, needsCsum: true}, 128},
	} {
		t.Run(c.name, func(t *testing.T) {
			pkt, h := buildSuper(c.spec)
			l, err := Validate(pkt, h)
			if err != nil || l.Segments() != c.segs {
				t.Fatalf("Validate = %d segments, %v; want %d", l.Segments(), err, c.segs)
			}
		})
	}
}
