package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

const (
	tcp = protoTCP
	udp = protoUDP
)

var (
	tcpOpts12 = []byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2} // NOP NOP timestamps
	tcpOpts40 = bytes.Repeat([]byte{1}, 40)
	ipOpts4   = []byte{1, 1, 1, 0}          // NOP NOP NOP EOL
	ipOpts40  = bytes.Repeat([]byte{1}, 40) // NOPs
	extAll    = []extHdr{{extHopByHop, 8}, {extDestOpts, 16}, {extRouting, 24}, {extDestOpts, 8}}
)

// splitCases are the table tests: every GSO type, IP version, option and
// extension-header shape, last-segment size and MSS extreme.
func splitCases() map[string]superSpec {
	c := map[string]superSpec{
		"tcp4-64k-mss1448":       {proto: tcp, gso: GSOTCPv4, mss: 1448, payload: 65535 - 40},
		"tcp4-last-full":         {proto: tcp, gso: GSOTCPv4, mss: 1448, payload: 1448 * 5},
		"tcp4-last-1byte":        {proto: tcp, gso: GSOTCPv4, mss: 1448, payload: 1448*5 + 1},
		"tcp4-mss1":              {proto: tcp, gso: GSOTCPv4, mss: 1, payload: 100},
		"tcp4-mss-jumbo":         {proto: tcp, gso: GSOTCPv4, mss: 8948, payload: 60000},
		"tcp4-mss-65000":         {proto: tcp, gso: GSOTCPv4, mss: 65000, payload: 65400},
		"tcp4-fin-psh":           {proto: tcp, gso: GSOTCPv4, mss: 536, payload: 5000, tcpFlags: flagACK | flagFIN | flagPSH},
		"tcp4-ecn-cwr":           {proto: tcp, gso: GSOTCPv4 | GSOECN, mss: 1000, payload: 5000, tcpFlags: flagACK | flagCWR | flagECE},
		"tcp4-options":           {proto: tcp, gso: GSOTCPv4, mss: 1448, payload: 9000, tcpOpts: tcpOpts12, ipOpts: ipOpts4},
		"tcp4-max-options":       {proto: tcp, gso: GSOTCPv4, mss: 1400, payload: 9000, tcpOpts: tcpOpts40, ipOpts: ipOpts40},
		"tcp4-id-wraps":          {proto: tcp, gso: GSOTCPv4, mss: 1448, payload: 9000, id: 0xfffe, seq: 0xfffffff0, df: true},
		"tcp4-one-segment":       {proto: tcp, gso: GSOTCPv4, mss: 1448, payload: 1448},
		"tcp6-64k-mss1448":       {v6: true, proto: tcp, gso: GSOTCPv6, mss: 1448, payload: 65535 - 32},
		"tcp6-ext-headers":       {v6: true, proto: tcp, gso: GSOTCPv6, mss: 1300, payload: 7000, ext: extAll, tcpOpts: tcpOpts12},
		"tcp6-ecn-fin":           {v6: true, proto: tcp, gso: GSOTCPv6 | GSOECN, mss: 536, payload: 2000, tcpFlags: flagACK | flagCWR | flagFIN | flagPSH},
		"uso4":                   {proto: udp, gso: GSOUDPL4, mss: 1400, payload: 46 * 1400},
		"uso4-short-last":        {proto: udp, gso: GSOUDPL4, mss: 1400, payload: 10*1400 + 7},
		"uso4-ip-options":        {proto: udp, gso: GSOUDPL4, mss: 1000, payload: 3001, ipOpts: ipOpts4},
		"uso6":                   {v6: true, proto: udp, gso: GSOUDPL4, mss: 1232, payload: 20 * 1232},
		"uso6-ext-headers":       {v6: true, proto: udp, gso: GSOUDPL4, mss: 1200, payload: 4801, ext: extAll},
		"ufo4":                   {proto: udp, gso: GSOUDP, mss: 1480, payload: 8000},
		"ufo4-df":                {proto: udp, gso: GSOUDP, mss: 1480, payload: 3000, df: true, needsCsum: true},
		"ufo4-options":           {proto: udp, gso: GSOUDP, mss: 1472, payload: 9000, ipOpts: ipOpts4},
		"ufo4-last-8":            {proto: udp, gso: GSOUDP, mss: 1480, payload: 1480 * 2},
		"ufo6":                   {v6: true, proto: udp, gso: GSOUDP, mss: 1448, payload: 60000},
		"ufo6-needs-csum":        {v6: true, proto: udp, gso: GSOUDP, mss: 1232, payload: 5000, needsCsum: true},
		"none-plain-tcp4":        {proto: tcp, payload: 100},
		"none-csum-tcp4":         {proto: tcp, payload: 1001, needsCsum: true},
		"none-csum-udp6":         {v6: true, proto: udp, payload: 999, needsCsum: true, ext: extAll},
		"none-csum-udp4-empty":   {proto: udp, payload: 0, needsCsum: true},
		"tso-below-mss-passes":   {proto: tcp, gso: GSOTCPv4, mss: 1448, payload: 1000},
		"uso-below-mss-passes":   {v6: true, proto: udp, gso: GSOUDPL4, mss: 1400, payload: 1400},
		"ufo-below-mss-passes":   {proto: udp, gso: GSOUDP, mss: 1480, payload: 1472},
		"uso4-max-segments":      {proto: udp, gso: GSOUDPL4, mss: 1000, payload: 64 * 1000},
		"tcp4-default-max-segs":  {proto: tcp, gso: GSOTCPv4, mss: 500, payload: 128 * 500},
		"tcp6-1byte-payload-mss": {v6: true, proto: tcp, gso: GSOTCPv6, mss: 1, payload: 2},
		"uso4-128-segments":      {proto: udp, gso: GSOUDPL4, mss: 500, payload: 128 * 500},
		"tcp4-without-csum":      {proto: tcp, gso: GSOTCPv4, mss: 1448, payload: 5000, tcpOpts: tcpOpts12},
		"tcp6-without-csum":      {v6: true, proto: tcp, gso: GSOTCPv6, mss: 1000, payload: 5000, ext: extAll},
	}
	for name, s := range c {
		tso := s.gso.Kind() == GSOTCPv4 || s.gso.Kind() == GSOTCPv6
		if tso && !strings.HasSuffix(name, "without-csum") || s.gso == GSOUDPL4 {
			s.needsCsum = true
		}
		s.seed = uint64(len(name))
		c[name] = s
	}
	return c
}

func TestSplitTable(t *testing.T) {
	for name, spec := range splitCases() {
		for _, partial := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/partial=%v", name, partial), func(t *testing.T) {
				pkt, h := buildSuper(spec)
				s := &Segmenter{Partial: partial}
				l, segs, err := splitFresh(s, pkt, h)
				if err != nil {
					t.Fatal(err)
				}
				if err := checkSplit(pkt, l, segs, l.SegmentHeader(partial).NeedsCsum()); err != nil {
					t.Fatal(err)
				}
				if want := wantSegments(spec); len(segs) != want {
					t.Fatalf("%d segments, want %d", len(segs), want)
				}
			})
		}
	}
}

// wantSegments counts segments from the spec alone.
func wantSegments(s superSpec) int {
	data := s.payload
	if s.gso == GSOUDP {
		data += udpLen
	}
	if s.gso == GSONone || data <= s.mss {
		return 1
	}
	return (data + s.mss - 1) / s.mss
}

// TestSplitInPlace splits with the input living in the first output buffer.
func TestSplitInPlace(t *testing.T) {
	for name, spec := range splitCases() {
		t.Run(name, func(t *testing.T) {
			pkt, h := buildSuper(spec)
			l, want, err := splitFresh(&Segmenter{}, pkt, h)
			if err != nil {
				t.Fatal(err)
			}
			if segs := splitInPlace(t, pkt, l); !equalSegs(segs, want) {
				t.Fatal("other segments than the out-of-place split")
			}
		})
	}
}

// TestSplitProperties checks the invariants over many random valid
// super-packets.
func TestSplitProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	n := 3000
	if testing.Short() {
		n = 300
	}
	for i := range n {
		spec := randomSpec(r)
		partial := r.IntN(2) == 0
		pkt, h := buildSuper(spec)
		l, segs, err := splitFresh(&Segmenter{Partial: partial}, pkt, h)
		if err != nil {
			t.Fatalf("case %d %+v: %v", i, spec, err)
		}
		if err := checkSplit(pkt, l, segs, l.SegmentHeader(partial).NeedsCsum()); err != nil {
			t.Fatalf("case %d %+v: %v", i, spec, err)
		}
		if len(segs) != wantSegments(spec) {
			t.Fatalf("case %d %+v: %d segments, want %d", i, spec, len(segs), wantSegments(spec))
		}
	}
}

// randomSpec draws a valid super-packet within the default caps.
func randomSpec(r *rand.Rand) superSpec {
	s := superSpec{v6: r.IntN(2) == 0, seed: r.Uint64(), id: uint16(r.Uint32()), seq: r.Uint32(), df: r.IntN(2) == 0}
	kinds := []GSOType{GSONone, GSOTCPv4, GSOUDP, GSOUDPL4}
	s.gso = kinds[r.IntN(len(kinds))]
	s.proto = udp
	if s.gso == GSOTCPv4 || (s.gso == GSONone && r.IntN(2) == 0) {
		s.proto = tcp
		s.tcpOpts = tcpOpts40[:4*r.IntN(11)]
		s.tcpFlags = uint8(r.IntN(256)) &^ (flagSYN | flagRST)
		if s.v6 && s.gso == GSOTCPv4 {
			s.gso = GSOTCPv6
		}
		if s.gso != GSONone && r.IntN(4) == 0 {
			s.gso |= GSOECN
		}
	}
	if s.v6 && s.gso != GSOUDP && r.IntN(3) == 0 {
		s.ext = extAll[:r.IntN(len(extAll)+1)]
	}
	if !s.v6 && r.IntN(3) == 0 {
		s.ipOpts = ipOpts40[:4*r.IntN(11)]
	}
	s.needsCsum = s.gso == GSOUDPL4 || r.IntN(4) != 0
	s.mss = 1 + r.IntN(9000)
	if s.gso == GSOUDP {
		s.mss = 8 * (1 + r.IntN(1100))
	}
	room := 65535 - 40 - 40 - 40 - 40 - 40
	if s.gso == GSOUDPL4 {
		room = min(room, s.mss*udpMaxSegments-8)
	}
	s.payload = r.IntN(room + 1)
	return s
}

func TestSplitAllocs(t *testing.T) {
	for _, name := range []string{"tcp4-64k-mss1448", "uso6", "ufo6", "none-csum-tcp4"} {
		spec := splitCases()[name]
		pkt, h := buildSuper(spec)
		l, _, err := splitFresh(&Segmenter{}, pkt, h)
		if err != nil {
			t.Fatal(err)
		}
		bufs, sizes := splitBuffers(l, 0)
		for _, s := range []*Segmenter{{}, {Partial: true}} {
			allocs := testing.AllocsPerRun(100, func() {
				if _, err := s.Split(pkt, l, bufs, sizes, 0); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("%s partial=%v: %.1f allocations per Split", name, s.Partial, allocs)
			}
		}
	}
}

func TestSplitBuffers(t *testing.T) {
	pkt, h := buildSuper(splitCases()["tcp4-last-1byte"])
	l, err := Validate(pkt, h)
	if err != nil {
		t.Fatal(err)
	}
	big := func(n, size int) [][]byte {
		b := make([][]byte, n)
		for i := range b {
			b[i] = make([]byte, size)
		}
		return b
	}
	var be *BufferError
	_, err = Split(pkt, h, big(l.segments-1, l.maxSegLen), make([]int, l.segments), 0)
	if !broke(err, ruleTooFewBuffers) || !errors.As(err, &be) || be.Need != l.segments {
		t.Fatalf("too few buffers: %v", err)
	}
	_, err = Split(pkt, h, big(l.segments, l.maxSegLen+9), make([]int, l.segments), 10)
	if !broke(err, ruleShortBuffer) || !errors.As(err, &be) || be.Size != l.maxSegLen {
		t.Fatalf("short buffers: %v", err)
	}
	if _, err := Split(pkt, h, big(l.segments, l.maxSegLen), make([]int, l.segments), -1); !broke(err, ruleTooFewBuffers) {
		t.Fatalf("negative offset: %v", err)
	}
	if errors.Is(err, ErrInvalid) {
		t.Fatal("a buffer error is not an invalid packet")
	}
}

// TestSplitLayout: Segmenter.Split takes only a layout that Validate made
// for a packet of that length, so a stale or forged one cannot make it
// index out of range.
func TestSplitLayout(t *testing.T) {
	pkt, h := buildSuper(splitCases()["tcp4-64k-mss1448"])
	var s Segmenter
	l, err := s.Validate(pkt, h)
	if err != nil {
		t.Fatal(err)
	}
	bufs, sizes := splitBuffers(l, 0)
	for name, c := range map[string]struct {
		pkt []byte
		l   Layout
	}{
		"zero layout": {pkt, Layout{}},
		"shorter":     {pkt[:len(pkt)-1], l},
		"longer":      {append(pkt[:len(pkt):len(pkt)], 0), l},
		"empty":       {nil, l},
	} {
		if _, err := s.Split(c.pkt, c.l, bufs, sizes, 0); !broke(err, ruleLayout) {
			t.Errorf("%s: %v, want the layout rule", name, err)
		}
	}
	if n, err := s.Split(pkt, l, bufs, sizes, 0); err != nil || n != l.Segments() {
		t.Fatalf("Split with its own layout: %d, %v", n, err)
	}
}

func TestSegmenterMaxSegments(t *testing.T) {
	pkt, h := buildSuper(splitCases()["tcp4-64k-mss1448"])
	s := &Segmenter{MaxSegments: 10}
	if _, err := s.Validate(pkt, h); !broke(err, ruleTooManySegments) {
		t.Fatalf("cap 10: %v", err)
	}
	pkt, h = buildSuper(superSpec{proto: tcp, gso: GSOTCPv4, mss: 100, payload: 20000, needsCsum: true})
	if l, err := Validate(pkt, h); err != nil || l.Segments() != 200 {
		t.Fatalf("200 TSO segments without a cap: %d, %v", l.Segments(), err)
	}
	s.MaxSegments = 199
	if _, err := s.Validate(pkt, h); !broke(err, ruleTooManySegments) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("200 segments under a cap of 199: %v", err)
	}
}

func TestSegmentHeader(t *testing.T) {
	for name, want := range map[string]Header{
		"tcp6-ext-headers": {Flags: FlagNeedsCsum, HdrLen: 40 + 56 + 32, CsumStart: 40 + 56, CsumOffset: 16},
		"uso4":             {Flags: FlagNeedsCsum, HdrLen: 28, CsumStart: 20, CsumOffset: 6},
		"ufo4-df":          {HdrLen: 28},
		"none-plain-tcp4":  {HdrLen: 20},
	} {
		pkt, h := buildSuper(splitCases()[name])
		l, err := Validate(pkt, h)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.SegmentHeader(true); got != want {
			t.Errorf("%s: partial segment header %+v, want %+v", name, got, want)
		}
		if got := l.SegmentHeader(false); got.Flags != 0 {
			t.Errorf("%s: full-checksum segment header %+v has flags", name, got)
		}
	}
}

func TestHeaderCodec(t *testing.T) {
	h := Header{Flags: FlagNeedsCsum, GSOType: GSOTCPv6 | GSOECN, HdrLen: 74, GSOSize: 1428, CsumStart: 40, CsumOffset: 16, NumBuffers: 3}
	for _, size := range []int{HeaderSize, HeaderSizeMrg} {
		b := make([]byte, size)
		if err := h.Encode(b, size); err != nil {
			t.Fatal(err)
		}
		got, err := DecodeHeader(b, size)
		want := h
		if size == HeaderSize {
			want.NumBuffers = 0
		}
		if err != nil || got != want {
			t.Fatalf("size %d: decoded %+v, %v; want %+v", size, got, err, want)
		}
		if _, err := DecodeHeader(b[:size-1], size); !broke(err, ruleShortPacket) {
			t.Fatalf("short decode: %v", err)
		}
		if err := h.Encode(b[:size-1], size); !broke(err, ruleShortBuffer) {
			t.Fatalf("short encode: %v", err)
		}
	}
	if _, err := DecodeHeader(make([]byte, 20), 11); !broke(err, ruleHeaderSize) {
		t.Fatalf("size 11: %v", err)
	}
	// The wire form is little-endian, field by field.
	b := make([]byte, HeaderSize)
	h.Encode(b, HeaderSize)
	if want := []byte{1, 0x84, 74, 0, 0x94, 5, 40, 0, 16, 0}; !bytes.Equal(b, want) {
		t.Fatalf("encoded % x, want % x", b, want)
	}
	if s := (GSOTCPv6 | GSOECN).String(); s != "tcpv6|ecn" {
		t.Fatalf("String() = %q", s)
	}
}

// TestUDPZeroChecksum makes a UDP checksum come out as zero and checks it
// is sent as 0xffff (USO segment, UFO datagram, completed pass-through).
func TestUDPZeroChecksum(t *testing.T) {
	for _, name := range []string{"uso4", "uso6-ext-headers", "ufo4", "ufo6", "none-csum-udp6"} {
		t.Run(name, func(t *testing.T) {
			pkt, h := buildSuper(splitCases()[name])
			l, segs, err := splitFresh(&Segmenter{}, pkt, h)
			if err != nil {
				t.Fatal(err)
			}
			// Adding the first packet's checksum c to a payload word of it
			// makes its sum all ones, so its checksum becomes zero.
			at, uh := l.HdrLen(), l.l3Len
			if l.kind == GSOUDP && l.ipv6 {
				uh += fragHdrLen
			}
			c := binary.BigEndian.Uint16(segs[0][uh+udpCsumOffset:])
			w := uint32(binary.BigEndian.Uint16(pkt[at:])) + uint32(c)
			binary.BigEndian.PutUint16(pkt[at:], uint16(w+w>>16))
			l, segs, err = splitFresh(&Segmenter{}, pkt, h)
			if err != nil {
				t.Fatal(err)
			}
			if got := binary.BigEndian.Uint16(segs[0][uh+udpCsumOffset:]); got != 0xffff {
				t.Fatalf("checksum %#04x, want 0xffff", got)
			}
			if err := checkSplit(pkt, l, segs, false); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSplitFrom: cut a chunk at a time into buffers full of junk, a
// super-packet of hundreds or thousands of segments comes out exactly as
// one Split writes it, whatever the chunk size.
func TestSplitFrom(t *testing.T) {
	tso4 := superSpec{proto: tcp, gso: GSOTCPv4, mss: 88, payload: 65535 - 40, needsCsum: true, df: true, id: 0xff00, seq: 0xfffff000, tcpFlags: flagACK | flagPSH | flagFIN, seed: 1}
	vxlan := tunnelSpec{csum: true, inner: tso4}
	vxlan.inner.mss, vxlan.inner.payload = 100, 30000
	type input struct {
		pkt []byte
		h   Header
	}
	super := func(s superSpec) input { pkt, h := buildSuper(s); return input{pkt, h} }
	tunnel := func(s tunnelSpec) input { pkt, h := buildTunnel(s); return input{pkt, h} }
	for name, in := range map[string]input{
		"tcp4-mss88-64k":          super(tso4),
		"tcp4-ecn-mss1":           super(superSpec{proto: tcp, gso: GSOTCPv4 | GSOECN, mss: 1, payload: 3000, needsCsum: true, tcpFlags: flagACK | flagCWR, seed: 2}),
		"tcp6-mss100-64k":         super(superSpec{v6: true, proto: tcp, gso: GSOTCPv6, mss: 100, payload: 65535 - 20, needsCsum: true, tcpFlags: flagACK, seed: 3}),
		"tcp4-without-needs-csum": super(superSpec{proto: tcp, gso: GSOTCPv4, mss: 400, payload: 60000, tcpFlags: flagACK, seed: 4}),
		"uso6-128":                super(superSpec{v6: true, proto: udp, gso: GSOUDPL4, mss: 100, payload: 12800, needsCsum: true, seed: 5}),
		"ufo4-gso8":               super(superSpec{proto: udp, gso: GSOUDP, mss: 8, payload: 5000, id: 7, seed: 6}),
		"ufo6-gso8":               super(superSpec{v6: true, proto: udp, gso: GSOUDP, mss: 8, payload: 5000, seed: 7}),
		"vxlan-tcp4-mss100":       tunnel(vxlan),
	} {
		pkt, h := in.pkt, in.h
		for _, partial := range []bool{false, true} {
			s := &Segmenter{Partial: partial}
			l, want, err := splitFresh(s, pkt, h)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if l.Segments() <= 128 && name != "uso6-128" {
				t.Fatalf("%s: %d segments, want more than 128", name, l.Segments())
			}
			for _, chunk := range []int{1, 7, 128} {
				bufs, sizes := make([][]byte, chunk), make([]int, chunk)
				var got [][]byte
				for first := 0; first < l.Segments(); first += chunk {
					for i := range bufs {
						bufs[i] = bytes.Repeat([]byte{0xa5}, 3+l.MaxSegLen())
					}
					n, err := s.SplitFrom(pkt, l, first, bufs, sizes, 3)
					if err != nil || n != min(chunk, l.Segments()-first) {
						t.Fatalf("%s: SplitFrom(%d) of %d segments in chunks of %d = %d, %v", name, first, l.Segments(), chunk, n, err)
					}
					for i := range n {
						got = append(got, bufs[i][3:3+sizes[i]])
					}
				}
				for i := range want {
					if !bytes.Equal(got[i], want[i]) {
						t.Fatalf("%s partial=%v, chunks of %d: segment %d differs from Split's", name, partial, chunk, i)
					}
				}
			}
		}
	}
}

// TestSplitFromMisuse: a first segment out of range is the caller's
// mistake, and too few or too short buffers a *BufferError.
func TestSplitFromMisuse(t *testing.T) {
	pkt, h := buildSuper(superSpec{proto: tcp, gso: GSOTCPv4, mss: 100, payload: 20000, needsCsum: true})
	l, err := Validate(pkt, h)
	if err != nil {
		t.Fatal(err)
	}
	bufs, sizes := splitBuffers(l, 0)
	for _, first := range []int{-1, l.Segments()} {
		if _, err := std.SplitFrom(pkt, l, first, bufs, sizes, 0); !broke(err, ruleFirstSegment) || errors.Is(err, ErrInvalid) {
			t.Errorf("first %d: %v", first, err)
		}
	}
	if _, err := std.SplitFrom(pkt, l, 5, nil, nil, 0); !broke(err, ruleTooFewBuffers) {
		t.Errorf("no buffers: %v", err)
	}
	if _, err := std.SplitFrom(pkt, l, 5, [][]byte{make([]byte, l.MaxSegLen()-1)}, sizes, 0); !broke(err, ruleShortBuffer) {
		t.Errorf("a short buffer: %v", err)
	}
	if n, err := std.SplitFrom(pkt, l, l.Segments()-3, bufs, sizes, 0); n != 3 || err != nil {
		t.Errorf("the last 3 segments with more buffers: %d, %v", n, err)
	}
}
