package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// buildBig builds a BIG TCP super-packet as a packet socket shows it:
// the headers of a TSO super-packet, payload bytes of payload, the IP
// length field 0 and, for IPv6 with jumbo, a Hop-by-Hop header with a
// Jumbo Payload option behind the IPv6 header (csum_start past it).
func buildBig(v6, jumbo bool, payload int, flags uint8) ([]byte, Header) {
	s := superSpec{v6: v6, proto: protoTCP, gso: GSOTCPv4, mss: 1428, payload: 1, tcpOpts: make([]byte, 12),
		needsCsum: true, tcpFlags: flags, id: 0xfff0, seq: 0xffff0000, df: true}
	if v6 {
		s.gso = GSOTCPv6
	}
	small, h := buildSuper(s)
	hl := int(h.HdrLen)
	pkt := make([]byte, hl, hl+jumboHdrLen+payload)
	copy(pkt, small[:hl])
	if v6 && jumbo {
		hbh := make([]byte, jumboHdrLen)
		hbh[0], hbh[2], hbh[3] = pkt[ipv6NextOff], optJumbo, 4
		binary.BigEndian.PutUint32(hbh[4:], uint32(len(pkt)+jumboHdrLen+payload-ipv6Len))
		pkt = append(pkt[:ipv6Len], append(hbh, pkt[ipv6Len:]...)...)
		pkt[ipv6NextOff] = protoHopByHop
		h.CsumStart += jumboHdrLen
		h.HdrLen += jumboHdrLen
	}
	pkt = pkt[:len(pkt)+payload]
	fillPayload(pkt[len(pkt)-payload:], 7)
	if v6 {
		binary.BigEndian.PutUint16(pkt[ipv6PLenOff:], 0)
	} else {
		binary.BigEndian.PutUint16(pkt[ipv4TotalOff:], 0)
		ipv4Checksum(pkt[:ipv4MinLen])
	}
	return pkt, h
}

// TestValidateBig cuts BIG TCP packets, IPv4 and IPv6 with and without
// the Jumbo Payload header, into TSO super-packets that Validate takes
// and whose segments are those of the whole packet: sequence numbers,
// IPv4 IDs, flags and payload run on across the cut, every checksum
// verifies.
func TestValidateBig(t *testing.T) {
	for _, c := range []struct {
		name      string
		v6, jumbo bool
		payload   int
		maxLen    int
	}{
		{"v4", false, false, 184000, 65535},
		{"v6", true, false, 184000, 65535},
		{"v6/jumbo", true, true, 184000, 65535},
		{"v6/jumbo/512K", true, true, 524000, 65535},
		{"v4/small-pieces", false, false, 70000, 9000},
		{"v6/max-above-65535", true, true, 100000, 1 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			pkt, h := buildBig(c.v6, c.jumbo, c.payload, flagACK|flagPSH|flagFIN|flagCWR)
			if !IsBig(pkt) {
				t.Fatalf("IsBig(%d-byte packet) = false", len(pkt))
			}
			p, l, err := std.ValidateBig(pkt, h, c.maxLen)
			if err != nil {
				t.Fatalf("ValidateBig: %v", err)
			}
			if c.jumbo && (len(p) != len(pkt)-jumboHdrLen || p[ipv6NextOff] != protoTCP) {
				t.Fatalf("the Jumbo Payload header stayed: %d of %d bytes, next header %d", len(p), len(pkt), p[ipv6NextOff])
			}
			bufs, sizes := splitBuffers(l, 0)
			for _, b := range bufs {
				for i := range b {
					b[i] = 0xa5 // dirty buffers
				}
			}
			n, err := std.Split(p, l, bufs, sizes, 0)
			if err != nil {
				t.Fatal(err)
			}
			ph := l.SegmentHeader(false)
			if ph.GSOType != h.GSOType || ph.GSOSize != h.GSOSize || !ph.NeedsCsum() || int(ph.CsumStart) != l.L3Len() {
				t.Fatalf("piece header %+v, input header %+v", ph, h)
			}
			var segs [][]byte
			for i := range n {
				piece := bufs[i][:sizes[i]]
				if len(piece) > min(c.maxLen, 65535) {
					t.Fatalf("piece %d: %d bytes", i, len(piece))
				}
				if i < n-1 && (len(piece)-l.HdrLen())%l.MSS() != 0 {
					t.Fatalf("piece %d: %d payload bytes, not a whole number of %d-byte segments", i, len(piece)-l.HdrLen(), l.MSS())
				}
				_, s, err := splitFresh(&std, piece, ph)
				if err != nil {
					t.Fatalf("piece %d: %v", i, err)
				}
				segs = append(segs, s...)
			}
			if want := (c.payload + l.MSS() - 1) / l.MSS(); len(segs) != want {
				t.Fatalf("%d segments from %d pieces, want %d", len(segs), n, want)
			}
			if err := checkL4Segments(p, l, segs, false); err != nil {
				t.Fatal(err)
			}
			if ip := header.IPv4(segs[0]); !c.v6 && ip.ID() != 0xfff0 {
				t.Fatalf("first IPv4 ID %#x", ip.ID())
			}
		})
	}
}

// TestValidateBigRefuses: what is not a BIG TCP TSO packet gets an
// error matching ErrInvalid.
func TestValidateBigRefuses(t *testing.T) {
	big := func(v6, jumbo bool) ([]byte, Header) { return buildBig(v6, jumbo, 100000, flagACK) }
	for _, c := range []struct {
		name string
		mod  func(pkt []byte, h *Header) []byte
	}{
		{"not big", func(pkt []byte, h *Header) []byte { return pkt[:60000] }},
		{"length field set", func(pkt []byte, h *Header) []byte { pkt[ipv4TotalOff] = 1; return pkt }},
		{"USO", func(pkt []byte, h *Header) []byte { h.GSOType = GSOUDPL4; return pkt }},
		{"no GSO", func(pkt []byte, h *Header) []byte { h.GSOType = GSONone; return pkt }},
		{"gso_size above the cut", func(pkt []byte, h *Header) []byte { h.GSOSize = 65500; return pkt }},
		{"bad IPv4 checksum", func(pkt []byte, h *Header) []byte { pkt[ipv4CsumOff]++; return pkt }},
		{"csum_start", func(pkt []byte, h *Header) []byte { h.CsumStart += 4; return pkt }},
	} {
		t.Run(c.name, func(t *testing.T) {
			pkt, h := big(false, false)
			pkt = c.mod(pkt, &h)
			if _, _, err := std.ValidateBig(pkt, h, 65535); !errors.Is(err, ErrInvalid) {
				t.Fatalf("ValidateBig: %v, want ErrInvalid", err)
			}
		})
	}
	pkt, h := big(true, true)
	binary.BigEndian.PutUint32(pkt[ipv6Len+4:], 5) // the Jumbo Payload length disagrees
	if _, _, err := std.ValidateBig(bytes.Clone(pkt), h, 65535); !errors.Is(err, ErrInvalid) {
		t.Fatalf("ValidateBig with a wrong jumbo length: %v, want ErrInvalid", err)
	}
	if _, _, err := std.ValidateBig(pkt, h, 0); err == nil {
		t.Fatal("ValidateBig with maxLen 0 took the packet")
	}
}

// FuzzValidateBig: a fuzzed header, packet head and length (the head
// grown with payload to more than 64 KiB) never panics ValidateBig; a
// rejection matches ErrInvalid, and an accepted packet cuts into pieces
// of at most maxLen bytes that Validate takes with SegmentHeader and
// whose payloads are the packet's.
func FuzzValidateBig(f *testing.F) {
	for _, v6 := range []bool{false, true} {
		pkt, h := buildBig(v6, v6, 1000, flagACK)
		hb := make([]byte, HeaderSize)
		h.Encode(hb, HeaderSize)
		f.Add(hb, pkt[:h.HdrLen], uint32(100000), uint16(65535))
	}
	f.Fuzz(func(t *testing.T, hb, head []byte, n uint32, maxLen uint16) {
		h, err := DecodeHeader(hb, HeaderSize)
		if err != nil {
			return
		}
		size := maxLegacyLen + 1 + int(n%(maxBigLenForTest-maxLegacyLen))
		if len(head) > size {
			return
		}
		pkt := make([]byte, size)
		copy(pkt, head)
		fillPayload(pkt[len(head):], uint64(n))
		if len(head) > ipv6Len && pkt[0]>>4 == 6 && pkt[ipv6NextOff] == protoHopByHop {
			binary.BigEndian.PutUint32(pkt[ipv6Len+4:], uint32(size-ipv6Len)) // a jumbo header that fits
		}
		p, l, err := std.ValidateBig(pkt, h, int(maxLen))
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("rejection %v does not match ErrInvalid", err)
			}
			return
		}
		bufs, sizes := splitBuffers(l, 0)
		k, err := std.Split(p, l, bufs, sizes, 0)
		if err != nil {
			t.Fatalf("Split after ValidateBig accepted: %v", err)
		}
		var data []byte
		for i := range k {
			piece := bufs[i][:sizes[i]]
			pl, err := Validate(piece, l.SegmentHeader(false))
			if err != nil || len(piece) > int(maxLen) {
				t.Fatalf("piece %d of %d bytes (maxLen %d): %v", i, len(piece), maxLen, err)
			}
			data = append(data, piece[pl.HdrLen():]...)
		}
		if !bytes.Equal(data, p[l.HdrLen():]) {
			t.Fatal("the pieces' payloads are not the packet's")
		}
	})
}

// maxBigLenForTest bounds the fuzzed packets: the kernel's 512 KiB.
const maxBigLenForTest = 512 << 10
