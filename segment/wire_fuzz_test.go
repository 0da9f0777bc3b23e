package segment

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzWire: arbitrary bytes, mtu and mss. ForWire never panics; it either
// refuses with one of its errors or returns a header that validates and
// splits into packets of at most mtu bytes (with at most mss bytes of TCP
// payload), the same whatever the buffers held, that pass the package's
// invariants; ParseTCP, Announced,
// Resets, SegmentMSS and Clamp never panic, the MSS values stay in range,
// and Clamp only ever lowers MSS options. The seed corpus is
// the table cases and testdata/fuzz/FuzzWire.
func FuzzWire(f *testing.F) {
	for _, c := range wireCases() {
		f.Add(c.pkt, uint16(c.mtu), uint16(c.mss))
	}
	f.Add(flow4(1).syn(9000), uint16(1500), uint16(0))
	f.Add(flow6(1).pkt(flagSYN|flagACK, []byte{1, 2, 4, 0x23, 0x28, 1, 1, 1}, 0, partial), uint16(1280), uint16(0))
	s := &Segmenter{MaxSegments: 1 << 12}
	f.Fuzz(func(t *testing.T, pkt []byte, mtu, mss uint16) {
		fuzzForWire(t, s, pkt, int(mtu), int(mss), Header{})
		if tcp, ok := ParseTCP(pkt); ok {
			tcp.Resets(pkt)
			m, _ := tcp.Announced(pkt)
			if s := tcp.SegmentMSS(m); m < 0 || m > 0xffff || s < 0 || s > 0xffff {
				t.Fatalf("announced MSS %d, segment MSS %d", m, s)
			}
		}
		c := bytes.Clone(pkt)
		before := mssOptionsOf(c)
		if Clamp(c, int(mtu)) {
			after := mssOptionsOf(c)
			if len(after) != len(before) || len(c) != len(pkt) {
				t.Fatalf("Clamp changed the options' shape: %v → %v", before, after)
			}
			for i := range after {
				if after[i] > before[i] {
					t.Fatalf("Clamp raised an MSS: %v → %v", before, after)
				}
			}
		} else if !bytes.Equal(c, pkt) {
			t.Fatal("Clamp reported no change but changed the packet")
		}
	})
}

// FuzzWireFrom: FuzzWire's packets with a receiving kernel's header
// (ForWireFrom) of any GSO type and size.
func FuzzWireFrom(f *testing.F) {
	for _, c := range wireCases() {
		f.Add(c.pkt, uint16(c.mtu), uint16(c.mss), uint8(c.from.GSOType), c.from.GSOSize)
	}
	s := &Segmenter{MaxSegments: 1 << 12}
	f.Fuzz(func(t *testing.T, pkt []byte, mtu, mss uint16, kind uint8, gso uint16) {
		fuzzForWire(t, s, pkt, int(mtu), int(mss), Header{GSOType: GSOType(kind), GSOSize: gso})
	})
}

// fuzzForWire checks what ForWireFrom makes of one input.
func fuzzForWire(t *testing.T, s *Segmenter, pkt []byte, mtu, mss int, from Header) {
	t.Helper()
	in := bytes.Clone(pkt)
	h, st, err := s.ForWireFrom(pkt, mtu, mss, from)
	if !bytes.Equal(in, pkt) {
		t.Fatal("ForWire modified its input")
	}
	switch {
	case err == nil:
		checkWireSplit(t, s, pkt, h, mtu, mss)
	case errors.Is(err, ErrBadChecksum):
		if st != CsumBad {
			t.Fatalf("ErrBadChecksum with state %v", st)
		}
	case errors.Is(err, ErrTooBig):
		var tb *tooBigError
		uso := from.GSOType == GSOUDPL4 && from.GSOSize > 0
		if !errors.As(err, &tb) || tb.mtu != mtu || (len(pkt) <= mtu && !uso) {
			t.Fatalf("%v for a %d-byte packet and mtu %d", err, len(pkt), mtu)
		}
	case errors.Is(err, ErrInvalid):
		if _, verr := Validate(pkt, Header{}); verr == nil && !broke(err, ruleTooManySegments) && !broke(err, ruleTransport) && !broke(err, ruleNeedsCsum) {
			t.Fatalf("%v for a packet Validate accepts", err)
		}
	case broke(err, ruleSmallMTU):
		if mtu >= MinMTU {
			t.Fatalf("%v with mtu %d", err, mtu)
		}
	default:
		t.Fatalf("unexpected error %v", err)
	}
}

// mssOptionsOf returns the MSS option values of a TCP packet, or nil.
func mssOptionsOf(pkt []byte) []int {
	if _, _, _, ok := tcpOf(pkt); !ok {
		return nil
	}
	return mssValues(pkt)
}
