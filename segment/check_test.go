package segment

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/internal/testing/dirtybuf"
)

// This file holds the independent checker the table, property and fuzz
// tests share: it reads every output packet with gVisor's header views and
// gVisor's checksum (not ours) and checks the package's invariants.

// splitFresh runs s.Split into buffers longer than it needs, with
// headroom, in every dirtybuf state (stale: holding another packet's
// segments), checks that it writes the same segments each time and leaves
// its input alone, and returns them.
func splitFresh(s *Segmenter, pkt []byte, h Header) (Layout, [][]byte, error) {
	l, err := s.Validate(pkt, h)
	if err != nil {
		return l, nil, err
	}
	bufs, sizes := splitBuffers(l, 3)
	in := bytes.Clone(pkt)
	segs, derr := dirtybuf.Same(bufs, dirtybuf.Leave(3, staleSegments()...), func(bufs [][]byte) [][]byte {
		var n int
		n, err = repeatable(s).Split(in, l, bufs, sizes, 3)
		return written(bufs, sizes, n, 3)
	})
	switch {
	case err != nil:
		return l, nil, err
	case derr != nil:
		return l, nil, derr
	case !bytes.Equal(in, pkt):
		return l, nil, fmt.Errorf("Split modified its input")
	}
	return l, segs, nil
}

// splitInPlace splits a copy of pkt that is bufs[0][2:] itself, in
// buffers in every dirtybuf state, checks that it writes the same
// segments each time, and returns them.
func splitInPlace(t *testing.T, pkt []byte, l Layout) [][]byte {
	t.Helper()
	const off = 2
	bufs := dirtybuf.New(l.Segments(), off+max(l.MaxSegLen(), len(pkt)))
	sizes := make([]int, len(bufs))
	return dirtybuf.Check(t, bufs, dirtybuf.Leave(off, staleSegments()...), func(bufs [][]byte) [][]byte {
		copy(bufs[0][off:], pkt)
		n, err := repeatable(&Segmenter{}).Split(bufs[0][off:off+len(pkt)], l, bufs, sizes, off)
		if err != nil {
			t.Fatal(err)
		}
		return written(bufs, sizes, n, off)
	})
}

// written returns the n segments Split wrote into bufs at offset.
func written(bufs [][]byte, sizes []int, n, offset int) [][]byte {
	segs := make([][]byte, n)
	for i := range segs {
		segs[i] = bufs[i][offset : offset+sizes[i]]
	}
	return segs
}

// repeatable returns a Segmenter like s whose IPv6 fragment IDs are the
// same for every one returned, so that its output can be compared.
func repeatable(s *Segmenter) *Segmenter {
	r := &Segmenter{Partial: s.Partial, MaxSegments: s.MaxSegments}
	r.fragID.Store(1)
	return r
}

// staleSegments are what splitFresh leaves in its buffers before a run:
// the segments of a TCP super-packet with options.
var staleSegments = sync.OnceValue(func() [][]byte {
	pkt, h := buildSuper(superSpec{proto: tcp, gso: GSOTCPv4, mss: 1000, payload: 9000, tcpOpts: tcpOpts12, ipOpts: ipOpts4, needsCsum: true, seed: 3})
	l, err := Validate(pkt, h)
	if err != nil {
		panic(err)
	}
	bufs, sizes := splitBuffers(l, 0)
	n, err := std.Split(pkt, l, bufs, sizes, 0)
	if err != nil {
		panic(err)
	}
	return written(bufs, sizes, n, 0)
})

// splitBuffers allocates what Split needs for l's segments, each buffer
// headroom and dirtybuf.Slack bytes longer than the longest segment.
func splitBuffers(l Layout, headroom int) (bufs [][]byte, sizes []int) {
	return dirtybuf.New(l.Segments(), headroom+l.MaxSegLen()), make([]int, l.Segments())
}

// checkSplit returns the first invariant the segments of pkt break.
func checkSplit(pkt []byte, l Layout, segs [][]byte, partial bool) error {
	if l.tunnel != 0 {
		return checkTunnelSplit(pkt, l, segs)
	}
	if len(segs) != l.segments {
		return fmt.Errorf("%d segments, layout says %d", len(segs), l.segments)
	}
	for i, seg := range segs {
		if len(seg) > l.maxSegLen {
			return fmt.Errorf("segment %d: %d bytes > MaxSegLen %d", i, len(seg), l.maxSegLen)
		}
		if err := checkIP(seg, l); err != nil {
			return fmt.Errorf("segment %d: %w", i, err)
		}
	}
	switch l.kind {
	case GSONone:
		return checkPassThrough(pkt, l, segs[0], partial)
	case GSOUDP:
		return checkFragments(pkt, l, segs)
	}
	return checkL4Segments(pkt, l, segs, partial)
}

// checkIP checks the lengths and the IPv4 header checksum of one packet.
func checkIP(seg []byte, l Layout) error {
	if l.ipv6 {
		if got := int(header.IPv6(seg).PayloadLength()); got != len(seg)-header.IPv6MinimumSize {
			return fmt.Errorf("IPv6 payload length %d for %d bytes", got, len(seg))
		}
		return nil
	}
	ip := header.IPv4(seg)
	if int(ip.TotalLength()) != len(seg) {
		return fmt.Errorf("IPv4 total length %d for %d bytes", ip.TotalLength(), len(seg))
	}
	if !ip.IsChecksumValid() {
		return fmt.Errorf("bad IPv4 header checksum")
	}
	return nil
}

func addrs(pkt []byte, v6 bool) (src, dst tcpip.Address) {
	if v6 {
		ip := header.IPv6(pkt)
		return ip.SourceAddress(), ip.DestinationAddress()
	}
	ip := header.IPv4(pkt)
	return ip.SourceAddress(), ip.DestinationAddress()
}

// l4Verifies reports whether the transport checksum of a whole packet is
// complete and correct (UDP: and not zero).
func l4Verifies(pkt []byte, l Layout, l4 []byte) bool {
	src, dst := addrs(pkt, l.ipv6)
	ps := header.PseudoHeaderChecksum(tcpip.TransportProtocolNumber(l.proto), src, dst, uint16(len(l4)))
	if l.proto == protoUDP && binary.BigEndian.Uint16(l4[udpCsumOffset:]) == 0 {
		return false
	}
	return checksum.Checksum(l4, ps) == 0xffff
}

// l4Partial reports whether the checksum field holds the pseudo-header sum.
func l4Partial(pkt []byte, l Layout, l4 []byte) bool {
	src, dst := addrs(pkt, l.ipv6)
	ps := header.PseudoHeaderChecksum(tcpip.TransportProtocolNumber(l.proto), src, dst, uint16(len(l4)))
	got := binary.BigEndian.Uint16(l4[l.csumOffset:])
	return got == ps || (got == 0xffff && ps == 0) || (got == 0 && ps == 0xffff)
}

func checkPassThrough(pkt []byte, l Layout, seg []byte, partial bool) error {
	if len(seg) != len(pkt) {
		return fmt.Errorf("passed-through packet is %d bytes, input %d", len(seg), len(pkt))
	}
	if !l.needsCsum || partial {
		if !bytes.Equal(seg, pkt) {
			return fmt.Errorf("passed-through packet differs from the input")
		}
		return nil
	}
	field := l.csumStart + l.csumOffset
	if !bytes.Equal(seg[:field], pkt[:field]) || !bytes.Equal(seg[field+2:], pkt[field+2:]) {
		return fmt.Errorf("checksum completion changed more than the checksum")
	}
	if l.csumStart != l.l3Len { // encapsulated: the partial sum was the inner packet's
		if Checksum(seg[l.csumStart:], binary.BigEndian.Uint16(pkt[field:])) != 0 {
			return fmt.Errorf("completed encapsulated checksum does not verify")
		}
		return nil
	}
	if (l.proto == protoTCP || l.proto == protoUDP) && !l4Verifies(seg, l, seg[l.l3Len:]) {
		return fmt.Errorf("completed checksum does not verify")
	}
	return nil
}

// checkL4Segments checks TSO and USO segments against the input.
func checkL4Segments(pkt []byte, l Layout, segs [][]byte, partial bool) error {
	hl := l.HdrLen()
	var payload []byte
	for i, seg := range segs {
		if err := checkSegHeader(pkt, l, seg, i, len(segs)); err != nil {
			return fmt.Errorf("segment %d: %w", i, err)
		}
		if i < len(segs)-1 && len(seg)-hl != l.mss {
			return fmt.Errorf("segment %d: %d payload bytes, not a full %d", i, len(seg)-hl, l.mss)
		}
		l4 := seg[l.l3Len:]
		if partial && !l4Partial(seg, l, l4) {
			return fmt.Errorf("segment %d: checksum field is not the pseudo-header sum", i)
		}
		if !partial && !l4Verifies(seg, l, l4) {
			return fmt.Errorf("segment %d: transport checksum does not verify", i)
		}
		payload = append(payload, seg[hl:]...)
	}
	if !bytes.Equal(payload, pkt[hl:]) {
		return fmt.Errorf("payloads do not concatenate to the input's")
	}
	return nil
}

// checkSegHeader compares segment i's headers with the input's: only
// lengths, IDs, checksums, sequence numbers and FIN/PSH/CWR may differ.
func checkSegHeader(pkt []byte, l Layout, seg []byte, i, n int) error {
	want := bytes.Clone(pkt[:l.HdrLen()])
	got := bytes.Clone(seg[:l.HdrLen()])
	if !l.ipv6 {
		if id := header.IPv4(seg).ID(); id != header.IPv4(pkt).ID()+uint16(i) {
			return fmt.Errorf("IPv4 ID %d, want %d", id, header.IPv4(pkt).ID()+uint16(i))
		}
		for _, b := range [][]byte{want, got} {
			clear(b[2:6])   // total length, ID
			clear(b[10:12]) // header checksum
		}
	} else {
		clear(want[4:6])
		clear(got[4:6])
	}
	l4w, l4g := want[l.l3Len:], got[l.l3Len:]
	clear(l4w[l.csumOffset : l.csumOffset+2])
	clear(l4g[l.csumOffset : l.csumOffset+2])
	if l.proto == protoUDP {
		if int(header.UDP(l4g).Length()) != len(seg)-l.l3Len {
			return fmt.Errorf("UDP length %d for %d bytes", header.UDP(l4g).Length(), len(seg)-l.l3Len)
		}
		clear(l4w[4:6])
		clear(l4g[4:6])
	} else {
		if err := checkTCP(header.TCP(l4w), header.TCP(l4g), uint32(i*l.mss), i, n); err != nil {
			return err
		}
		clear(l4w[4:8])
		clear(l4g[4:8])
		l4w[13], l4g[13] = 0, 0
	}
	if !bytes.Equal(want, got) {
		return fmt.Errorf("headers differ beyond the rewritten fields:\n got %x\nwant %x", got, want)
	}
	return nil
}

func checkTCP(in, out header.TCP, sent uint32, i, n int) error {
	if out.SequenceNumber() != in.SequenceNumber()+sent {
		return fmt.Errorf("seq %d, want %d", out.SequenceNumber(), in.SequenceNumber()+sent)
	}
	flags := in.Flags()
	if i != n-1 {
		flags &^= header.TCPFlagFin | header.TCPFlagPsh
	}
	if i != 0 {
		flags &^= header.TCPFlagCwr
	}
	if out.Flags() != flags {
		return fmt.Errorf("flags %v, want %v", out.Flags(), flags)
	}
	return nil
}

// checkFragments reassembles UFO fragments and checks the datagram.
func checkFragments(pkt []byte, l Layout, segs [][]byte) error {
	var data []byte
	var id uint32
	for i, seg := range segs {
		frag, off, more, fid, err := fragmentOf(seg, l)
		if err != nil {
			return fmt.Errorf("fragment %d: %w", i, err)
		}
		if i == 0 {
			id = fid
		}
		if !sameFragHeader(pkt, seg, l) {
			return fmt.Errorf("fragment %d: IP header differs beyond the rewritten fields", i)
		}
		switch {
		case off != len(data):
			return fmt.Errorf("fragment %d at offset %d, want %d", i, off, len(data))
		case more != (i < len(segs)-1):
			return fmt.Errorf("fragment %d: MF %v", i, more)
		case fid != id:
			return fmt.Errorf("fragment %d: ID %#x, first had %#x", i, fid, id)
		case more && len(frag) != l.mss:
			return fmt.Errorf("fragment %d: %d bytes, not a full %d", i, len(frag), l.mss)
		}
		data = append(data, frag...)
	}
	in := pkt[l.l3Len:]
	if !bytes.Equal(data[:udpCsumOffset], in[:udpCsumOffset]) || !bytes.Equal(data[udpCsumOffset+2:], in[udpCsumOffset+2:]) {
		return fmt.Errorf("fragments do not reassemble to the input datagram")
	}
	if !l4Verifies(pkt, l, data) {
		return fmt.Errorf("reassembled UDP checksum does not verify")
	}
	return nil
}

// fragmentOf returns a fragment's data, byte offset, MF flag and ID.
func fragmentOf(seg []byte, l Layout) (data []byte, off int, more bool, id uint32, err error) {
	if !l.ipv6 {
		ip := header.IPv4(seg)
		if ip.Flags()&header.IPv4FlagDontFragment != 0 {
			return nil, 0, false, 0, fmt.Errorf("DF set on a fragment")
		}
		return seg[l.l3Len:], int(ip.FragmentOffset()), ip.More(), uint32(ip.ID()), nil
	}
	if seg[6] != header.IPv6FragmentHeader {
		return nil, 0, false, 0, fmt.Errorf("next header %d, want a Fragment header", seg[6])
	}
	fh := header.IPv6Fragment(seg[header.IPv6MinimumSize:])
	if fh.NextHeader() != protoUDP {
		return nil, 0, false, 0, fmt.Errorf("fragment next header %d", fh.NextHeader())
	}
	return fh.Payload(), int(fh.FragmentOffset()) * 8, fh.More(), fh.ID(), nil
}

// sameFragHeader reports whether a fragment's IP header is the input's
// but for the fields fragmentation rewrites.
func sameFragHeader(pkt, seg []byte, l Layout) bool {
	n := l.l3Len
	want, got := bytes.Clone(pkt[:n]), bytes.Clone(seg[:n])
	rewritten := [][2]int{{2, 4}, {6, 8}, {10, 12}} // length, fragment field, checksum
	if l.ipv6 {
		rewritten = [][2]int{{4, 7}} // payload length, next header
	}
	for _, r := range rewritten {
		clear(want[r[0]:r[1]])
		clear(got[r[0]:r[1]])
	}
	return bytes.Equal(want, got)
}
