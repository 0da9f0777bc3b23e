package segment

import (
	"encoding/binary"
	"errors"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// The seed corpora are in testdata/fuzz: small packets of every GSO kind.

// accepted decodes a fuzzed header and validates a fuzzed packet with it.
// A rejection must match ErrInvalid.
// A header of HeaderSizeTunnel bytes or more is read as the tunnel form.
func accepted(t *testing.T, hb, pkt []byte) (Header, Layout, bool) {
	size := HeaderSize
	if len(hb) >= HeaderSizeTunnel {
		size = HeaderSizeTunnel
	}
	h, err := DecodeHeader(hb, size)
	if err != nil {
		return h, Layout{}, false
	}
	l, err := Validate(pkt, h)
	if err != nil && !errors.Is(err, ErrInvalid) {
		t.Fatalf("rejection %v does not match ErrInvalid", err)
	}
	return h, l, err == nil
}

// FuzzValidate: no input panics, and an accepted one has a sane layout.
func FuzzValidate(f *testing.F) {
	f.Fuzz(func(t *testing.T, hb, pkt []byte) {
		_, l, ok := accepted(t, hb, pkt)
		if !ok {
			return
		}
		if l.segments < 1 || l.segments > len(pkt) || l.kind == GSOUDPL4 && l.segments > udpMaxSegments || l.HdrLen() > len(pkt) || l.maxSegLen > len(pkt)+fragHdrLen {
			t.Fatalf("layout %+v for a %d-byte packet", l, len(pkt))
		}
	})
}

// FuzzSplit: every accepted input splits, into the same segments whatever
// its buffers held (splitFresh), and its segments satisfy the invariants
// the property tests check. The partial checksum of the input
// is set right first, since a wrong one rightly gives wrong checksums.
func FuzzSplit(f *testing.F) {
	f.Fuzz(func(t *testing.T, hb, pkt []byte) {
		h, l, ok := accepted(t, hb, pkt)
		if !ok {
			return
		}
		fixPartial(pkt, l)
		for _, partial := range []bool{false, true} {
			l, segs, err := splitFresh(&Segmenter{Partial: partial}, pkt, h)
			if err != nil {
				t.Fatalf("Split after Validate accepted: %v", err)
			}
			if err := checkSplit(pkt, l, segs, l.SegmentHeader(partial).NeedsCsum()); err != nil {
				t.Fatalf("partial=%v %+v: %v", partial, l, err)
			}
		}
	})
}

// fixPartial writes the pseudo-header sum a Linux sender would leave in a
// TCP or UDP packet with NEEDS_CSUM (and a matching UDP length), and in
// the outer UDP header of a tunnel packet with FlagUDPTunnelCsum; a
// tunnel packet's outer UDP length is a sender's too (a packet of one
// segment goes out as it came, as the kernel sends it).
func fixPartial(pkt []byte, l Layout) {
	if l.tunnel != 0 {
		binary.BigEndian.PutUint16(pkt[l.outerL3+udpLenOff:], uint16(len(pkt)-l.outerL3))
	}
	if l.tunnelCsum {
		setPartial(pkt, l.tunnel == GSOUDPTunnelIPv6, protoUDP, pkt[l.outerL3:], udpCsumOffset)
	}
	if !l.needsCsum || (l.proto != protoTCP && l.proto != protoUDP) || l.csumStart != l.l3Len {
		return
	}
	setPartial(pkt[l.inner:], l.ipv6, l.proto, pkt[l.l3Len:], l.csumOffset)
}

// setPartial writes the pseudo-header sum of the IP packet ip into the
// checksum field at csumOff of its transport header l4 (and, for UDP, the
// length).
func setPartial(ip []byte, v6 bool, proto uint8, l4 []byte, csumOff int) {
	if proto == protoUDP {
		binary.BigEndian.PutUint16(l4[udpLenOff:], uint16(len(l4)))
	}
	src, dst := addrs(ip, v6)
	ps := header.PseudoHeaderChecksum(tcpip.TransportProtocolNumber(proto), src, dst, uint16(len(l4)))
	binary.BigEndian.PutUint16(l4[csumOff:], ps)
}
