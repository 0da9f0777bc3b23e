package segment

import (
	"bytes"
	"encoding/binary"
	"slices"
	"testing"
)

// fuzzReader hands out the fuzz input a few bytes at a time, and zeros
// once it is used up.
type fuzzReader struct{ b []byte }

func (r *fuzzReader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *fuzzReader) u16() int { return int(r.byte())<<8 | int(r.byte()) }

// take returns up to n of the remaining bytes.
func (r *fuzzReader) take(n int) []byte {
	n = min(n, len(r.b))
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

// FuzzCoalesce derives a batch from the input: the segments of one or two
// super-packets that the input shapes, then edits the input picks (bytes
// changed with or without fixing the checksums, packets cut short,
// repeated, dropped, swapped, raw bytes added). Coalesce must not panic,
// must write the same whatever its buffers held (coalesce), every packet
// must come out exactly once, no flow may be reordered, and
// every super-packet must re-split into exactly its input packets
// (checkCoalesced). The seed corpus is in testdata/fuzz/FuzzCoalesce.
func FuzzCoalesce(f *testing.F) {
	co, _ := NewCoalescer(CoalescerConfig{HeaderSize: HeaderSize, TCP: true, UDP: true, MaxBatch: 128})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &fuzzReader{b: data}
		in := fuzzSegments(t, r)
		if r.byte()&1 != 0 {
			in = append(in, fuzzSegments(t, r)...)
		}
		for ops := r.byte() % 16; ops > 0 && len(in) > 0; ops-- {
			in = fuzzEdit(t, r, in)
		}
		outs := coalesce(t, co, in[:min(len(in), 128)])
		checkCoalesced(t, in[:min(len(in), 128)], outs)
		checkStats(t, co.Stats())
	})
}

// fuzzSegments cuts a super-packet shaped by the input.
func fuzzSegments(t *testing.T, r *fuzzReader) [][]byte {
	shape := r.byte()
	s := superSpec{v6: shape&1 != 0, proto: udp, gso: GSOUDPL4, srcPort: uint16(1 + shape>>5), df: shape&4 != 0,
		id: uint16(r.u16()), seq: uint32(r.u16()) << 16, seed: uint64(r.byte())}
	if shape&2 != 0 {
		s.proto, s.gso = tcp, GSOTCPv4
		if s.v6 {
			s.gso = GSOTCPv6
		}
		s.tcpOpts = tcpOpts12[:4*(r.byte()%4)]
		s.tcpFlags = r.byte() &^ (flagSYN | flagRST | flagURG)
		if s.tcpFlags&flagCWR != 0 {
			s.gso |= GSOECN
		}
	}
	switch {
	case shape&8 != 0 && s.v6:
		s.ext = []extHdr{{extDestOpts, 8}, {extRouting, 16}}
	case shape&8 != 0 && shape&16 != 0:
		s.ipOpts = ipOpts4
	}
	s.mss = 1 + r.u16()%1500
	s.payload = min(1+r.u16()%(12*s.mss), 60000)
	if s.proto == udp {
		s.payload = min(s.payload, udpGROMax*s.mss)
	}
	return cut(t, s)
}

// fuzzEdit applies one edit the input picks to the batch.
func fuzzEdit(t *testing.T, r *fuzzReader, in [][]byte) [][]byte {
	op, i, pos, val := r.byte()%8, int(r.byte())%len(in), r.u16(), r.byte()
	p := bytes.Clone(in[i])
	switch op {
	case 0, 1: // a byte changed; the checksums fixed or not
		if len(p) > 0 {
			p[pos%len(p)] ^= val | 1
		}
		refixIf(p, in[i], op == 0)
	case 2: // cut short, the IP length fixed or not
		p = p[:pos%(len(p)+1)]
		switch {
		case val&1 == 0 || len(p) < ipv6Len:
		case p[0]>>4 == 6:
			binary.BigEndian.PutUint16(p[ipv6PLenOff:], uint16(len(p)-ipv6Len))
		default:
			binary.BigEndian.PutUint16(p[ipv4TotalOff:], uint16(len(p)))
		}
	case 3:
		return slices.Insert(in, pos%(len(in)+1), p)
	case 4:
		return slices.Delete(in, i, i+1)
	case 5:
		j := pos % len(in)
		in[i], in[j] = in[j], in[i]
		return in
	case 6:
		return slices.Insert(in, i, bytes.Clone(r.take(int(val))))
	default: // an IPv4 ID, IPv6 address or TCP/UDP field bumped, the checksums fixed
		if len(p) > 28 {
			p[4+int(val)%24]++
			refixIf(p, in[i], true)
		}
	}
	in[i] = p
	return in
}

// refixIf fixes the checksums of p, an edited copy of orig, with orig's
// layout, if fix is set and orig is a TCP or UDP packet long enough.
func refixIf(p, orig []byte, fix bool) {
	l, err := Validate(orig, Header{})
	if fix && err == nil && (l.Proto() == protoTCP || l.Proto() == protoUDP) && len(p) >= l.L3Len()+tcpMinLen {
		refix(p, l)
	}
}
