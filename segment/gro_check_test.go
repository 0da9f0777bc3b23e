package segment

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"reflect"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/internal/testing/dirtybuf"
)

// This file holds what the GRO tests share: building segment streams,
// editing segments, running Coalesce on copies, and the checker that maps
// every output packet back to the input packets it carries and re-splits
// it with Split.

// groHeadroom is the tests' offset: more than any virtio-net header needs.
const groHeadroom = 16

// resplitter re-segments super-packets in the checks, without a cap on
// segments (a TCP merge has no cap but 64 KiB).
var resplitter = Segmenter{MaxSegments: 1 << 16}

// cut builds the super-packet s with a partial checksum and cuts it into
// wire packets with Split.
func cut(t testing.TB, s superSpec) [][]byte {
	t.Helper()
	s.needsCsum = true
	pkt, h := buildSuper(s)
	_, segs, err := splitFresh(&resplitter, pkt, h)
	if err != nil {
		t.Fatalf("cut %+v: %v", s, err)
	}
	return segs
}

// layoutOf returns the IP layout of a whole packet.
func layoutOf(t testing.TB, pkt []byte) Layout {
	t.Helper()
	l, err := Validate(pkt, Header{})
	if err != nil {
		t.Fatalf("layout of %x: %v", pkt, err)
	}
	return l
}

// edited returns a copy of pkt changed by edit, with its IPv4 header and
// transport checksums recomputed with gVisor's checksum.
func edited(t testing.TB, pkt []byte, edit func(p []byte, l Layout)) []byte {
	t.Helper()
	p := bytes.Clone(pkt)
	l := layoutOf(t, p)
	edit(p, l)
	refix(p, l)
	return p
}

// refix recomputes the checksums of a TCP or UDP packet with layout l
// (which the packet's IP header need no longer agree with).
func refix(p []byte, l Layout) {
	if !l.IPv6() {
		binary.BigEndian.PutUint16(p[ipv4CsumOff:], 0)
		binary.BigEndian.PutUint16(p[ipv4CsumOff:], ^checksum.Checksum(p[:l.L3Len()], 0))
	}
	off := tcpCsumOffset
	if l.Proto() == protoUDP {
		off = udpCsumOffset
	}
	l4 := p[l.L3Len():]
	src, dst := addrs(p, l.IPv6())
	binary.BigEndian.PutUint16(l4[off:], 0)
	c := ^checksum.Checksum(l4, header.PseudoHeaderChecksum(tcpip.TransportProtocolNumber(l.Proto()), src, dst, uint16(len(l4))))
	if c == 0 && l.Proto() == protoUDP {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(l4[off:], c)
}

// groOut is one output packet of Coalesce, mapped back to its input.
type groOut struct {
	idx []int  // the input packets it carries, in order
	hdr Header // its virtio-net header
	pkt []byte // the IP packet, flattened
}

// coalesce runs c on copies of in, with headroom and spare room behind
// every packet, and decodes the result. It runs c in buffers in every
// dirtybuf state (stale: holding other packets) and checks that it writes
// the same each time, counting once. It checks the layout of the
// slices: the first begins at the header in the headroom and runs to the
// end of its packet, the others end where their packets end.
func coalesce(t testing.TB, c *Coalescer, in [][]byte) []groOut {
	t.Helper()
	bufs := make([][]byte, len(in))
	sizes := make([]int, len(in))
	for i, p := range in {
		bufs[i] = make([]byte, groHeadroom+len(p)+dirtybuf.Slack)
		sizes[i] = len(p)
	}
	stats := c.stats
	var res [][][]byte
	dirtybuf.Check(t, bufs, dirtybuf.Leave(groHeadroom, staleSegments()...), func(bufs [][]byte) [][]byte {
		for i, p := range in {
			copy(bufs[i][groHeadroom:], p)
		}
		c.stats = stats
		var err error
		if res, err = c.Coalesce(bufs, sizes, groHeadroom); err != nil {
			t.Fatal(err)
		}
		flat := make([][]byte, len(res))
		for k, iov := range res {
			flat[k] = bytes.Join(iov, nil)
		}
		return flat
	})
	outs := make([]groOut, len(res))
	for k, iov := range res {
		o := &outs[k]
		var flat []byte
		for s, b := range iov {
			j := whichBuf(bufs, b)
			if j < 0 || cap(b)-len(b) != len(bufs[j])-groHeadroom-sizes[j] ||
				s == 0 && cap(b) != len(bufs[j])-groHeadroom+c.hdrSize {
				t.Fatalf("output %d slice %d (%d bytes) is not where an input packet is", k, s, len(b))
			}
			o.idx = append(o.idx, j)
			flat = append(flat, b...)
		}
		h, err := DecodeHeader(flat, c.hdrSize)
		if err != nil {
			t.Fatalf("output %d: %v", k, err)
		}
		o.hdr, o.pkt = h, flat[c.hdrSize:]
	}
	return outs
}

// whichBuf returns the index of the buffer b is a slice of, or -1.
func whichBuf(bufs [][]byte, b []byte) int {
	if cap(b) == 0 {
		return -1
	}
	end := &b[:cap(b)][cap(b)-1]
	for j, buf := range bufs {
		if &buf[len(buf)-1] == end {
			return j
		}
	}
	return -1
}

// groups returns the input indices of every output packet.
func groups(outs []groOut) [][]int {
	g := make([][]int, len(outs))
	for k, o := range outs {
		g[k] = o.idx
	}
	return g
}

// checkCoalesced checks Coalesce's promises on one batch: every input
// packet comes out exactly once; output packets are in the order of their
// first packets and no flow is reordered; a packet passed through is
// unchanged behind an all-zero header; a super-packet has the header the
// kernel's GRO gives it and Split turns it back into its input packets
// (IPv4 IDs of a fixed-ID merge count up; equivalent checksum encodings
// may differ).
func checkCoalesced(t testing.TB, in [][]byte, outs []groOut) {
	t.Helper()
	seen := make([]bool, len(in))
	for k, o := range outs {
		if k > 0 && o.idx[0] <= outs[k-1].idx[0] {
			t.Fatalf("output %d starts with packet %d, after output %d with %d", k, o.idx[0], k-1, outs[k-1].idx[0])
		}
		for _, i := range o.idx {
			if seen[i] {
				t.Fatalf("packet %d comes out twice", i)
			}
			seen[i] = true
		}
		var err error
		if len(o.idx) == 1 {
			err = checkPassed(o, in[o.idx[0]])
		} else {
			err = checkSuper(o, in)
		}
		if err != nil {
			t.Fatalf("output %d (packets %v): %v", k, o.idx, err)
		}
	}
	for i, ok := range seen {
		if !ok {
			t.Fatalf("packet %d is missing", i)
		}
	}
	if flowReordered(in, outs) {
		t.Fatalf("a flow is reordered: %v", groups(outs))
	}
}

func checkPassed(o groOut, want []byte) error {
	if o.hdr != (Header{}) {
		return fmt.Errorf("single packet with header %+v", o.hdr)
	}
	if !bytes.Equal(o.pkt, want) {
		return fmt.Errorf("single packet changed:\n got %x\nwant %x", o.pkt, want)
	}
	return nil
}

// checkSuper checks a super-packet's header and re-splits it.
func checkSuper(o groOut, in [][]byte) error {
	l, segs, err := splitFresh(&resplitter, o.pkt, o.hdr)
	if err != nil {
		return fmt.Errorf("re-split: %v (header %+v)", err, o.hdr)
	}
	first := in[o.idx[0]]
	want := Header{Flags: FlagNeedsCsum, GSOType: superKind(l), HdrLen: uint16(l.HdrLen()),
		GSOSize: uint16(len(first) - l.HdrLen()), CsumStart: uint16(l.L3Len()), CsumOffset: uint16(l.csumOffset)}
	if o.hdr != want {
		return fmt.Errorf("header %+v, want %+v", o.hdr, want)
	}
	if !l4Partial(o.pkt, l, o.pkt[l.L3Len():]) {
		return fmt.Errorf("checksum field is not the pseudo-header sum")
	}
	if len(segs) != len(o.idx) {
		return fmt.Errorf("re-split into %d packets", len(segs))
	}
	for k, seg := range segs {
		if err := sameSegment(seg, in[o.idx[k]], first, k); err != nil {
			return fmt.Errorf("segment %d: %v", k, err)
		}
	}
	return nil
}

func superKind(l Layout) GSOType {
	switch {
	case l.Proto() == protoUDP:
		return GSOUDPL4
	case l.IPv6():
		return GSOTCPv6
	}
	return GSOTCPv4
}

// sameSegment compares segment k of a re-split with the input packet it
// came from. IPv4 IDs may count up from the first packet's where the
// input's were fixed; checksum fields need only verify.
func sameSegment(got, want, first []byte, k int) error {
	if bytes.Equal(got, want) {
		return nil
	}
	if len(got) != len(want) {
		return fmt.Errorf("%d bytes, input %d", len(got), len(want))
	}
	l, err := Validate(got, Header{})
	if err != nil {
		return err
	}
	if err := checkIP(got, l); err != nil {
		return err
	}
	if !l4Verifies(got, l, got[l.L3Len():]) {
		return fmt.Errorf("transport checksum does not verify")
	}
	g, w := bytes.Clone(got), bytes.Clone(want)
	off := l.L3Len() + tcpCsumOffset
	if l.Proto() == protoUDP {
		off = l.L3Len() + udpCsumOffset
	}
	clear(g[off : off+2])
	clear(w[off : off+2])
	if !l.IPv6() {
		clear(g[ipv4CsumOff : ipv4CsumOff+2])
		clear(w[ipv4CsumOff : ipv4CsumOff+2])
		id0, gid, wid := binary.BigEndian.Uint16(first[ipv4IDOff:]), binary.BigEndian.Uint16(got[ipv4IDOff:]), binary.BigEndian.Uint16(want[ipv4IDOff:])
		if wid == id0 && gid == id0+uint16(k) {
			clear(g[ipv4IDOff : ipv4IDOff+2])
			clear(w[ipv4IDOff : ipv4IDOff+2])
		}
	}
	if !bytes.Equal(g, w) {
		return fmt.Errorf("differs from the input:\n got %x\nwant %x", got, want)
	}
	return nil
}

// flowReordered reports whether outs deliver a packet of a flow after a
// later packet of the same flow.
func flowReordered(in [][]byte, outs []groOut) bool {
	last := map[string]int{}
	for _, o := range outs {
		for _, i := range o.idx {
			key := flowKey(in[i])
			if j, ok := last[key]; ok && key != "" && j > i {
				return true
			}
			last[key] = i
		}
	}
	return false
}

// flowKey returns IP version, protocol, addresses and ports of a TCP or
// UDP packet that is not a fragment, or "". (Validate gives an IPv6
// fragment the Fragment header's protocol number.)
func flowKey(p []byte) string {
	l, err := Validate(p, Header{})
	if err != nil || (l.Proto() != protoTCP && l.Proto() != protoUDP) || len(p) < l.L3Len()+4 ||
		!l.IPv6() && binary.BigEndian.Uint16(p[ipv4FragOff:])&0x3fff != 0 {
		return ""
	}
	a := p[12:20]
	if l.IPv6() {
		a = p[8:40]
	}
	return fmt.Sprintf("%d/%d/%x/%x", p[0]>>4, l.Proto(), a, p[l.L3Len():l.L3Len()+4])
}

// checkStats checks that every packet is counted exactly once.
func checkStats(t testing.TB, s CoalesceStats) {
	t.Helper()
	var passed uint64
	v := reflect.ValueOf(s)
	for _, f := range []string{"NotTCPUDP", "BadChecksum", "NoChecksum", "IPOptions", "Fragment", "Flags", "NoPayload", "Disabled", "Malformed"} {
		passed += v.FieldByName(f).Uint()
	}
	if s.Packets != s.Merged+s.Unmerged+passed {
		t.Fatalf("stats do not add up: %+v", s)
	}
}
