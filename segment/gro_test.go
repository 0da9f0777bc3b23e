package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// groCase is a table test: a batch, the output packets wanted (as input
// indices: "0-2 3 4+6" is three output packets, 0 to 2 merged, 3 alone,
// 4 and 6 merged) and, optionally, the pass-through counter that must
// count n packets.
type groCase struct {
	name  string
	in    [][]byte
	want  string
	why   string
	n     int
	noTCP bool
	noUDP bool
}

func tcpStream(t testing.TB, v6 bool, n, mss int, mod func(*superSpec)) [][]byte {
	s := superSpec{v6: v6, proto: tcp, gso: GSOTCPv4, mss: mss, payload: n * mss, df: true, id: 0x4000, seq: 1000, seed: uint64(n)}
	if v6 {
		s.gso = GSOTCPv6
	}
	if mod != nil {
		mod(&s)
	}
	return cut(t, s)
}

func udpStream(t testing.TB, v6 bool, n, size int, mod func(*superSpec)) [][]byte {
	s := superSpec{v6: v6, proto: udp, gso: GSOUDPL4, mss: size, payload: n * size, id: 0x100, seed: uint64(n) + 1}
	if mod != nil {
		mod(&s)
	}
	return cut(t, s)
}

// long returns n segments of one flow, more than one super-packet can
// carry, as two Splits of super-packets that follow each other.
func long(t testing.TB, v6 bool, proto uint8, n, mss int) [][]byte {
	const first = 35
	stream := tcpStream
	id0 := uint16(0x4000)
	if proto == udp {
		stream, id0 = udpStream, 0x100
	}
	a := stream(t, v6, first, mss, nil)
	b := stream(t, v6, n-first, mss, func(s *superSpec) { s.seq, s.id, s.seed = 1000+first*uint32(mss), id0+first, 99 })
	return append(a, b...)
}

// editAt returns segs with the packets at the given indices edited.
func editAt(t testing.TB, segs [][]byte, edit func(p []byte, l Layout), at ...int) [][]byte {
	out := slices.Clone(segs)
	for _, i := range at {
		out[i] = edited(t, segs[i], edit)
	}
	return out
}

// pick returns the packets at the given indices, in that order.
func pick(segs [][]byte, at ...int) [][]byte {
	out := make([][]byte, len(at))
	for k, i := range at {
		out[k] = segs[i]
	}
	return out
}

func from(i, n int) []int {
	at := make([]int, n-i)
	for k := range at {
		at[k] = i + k
	}
	return at
}

// Edits of one header field.
func setTCPFlags(f uint8) func([]byte, Layout) {
	return func(p []byte, l Layout) { p[l.L3Len()+tcpFlagsOff] = f }
}
func orTCPFlags(f uint8) func([]byte, Layout) {
	return func(p []byte, l Layout) { p[l.L3Len()+tcpFlagsOff] |= f }
}
func addAt(off int, d uint8) func([]byte, Layout) {
	return func(p []byte, l Layout) { p[off] += d }
}
func addL4(off int, d uint8) func([]byte, Layout) {
	return func(p []byte, l Layout) { p[l.L3Len()+off] += d }
}
func setID(id uint16) func([]byte, Layout) {
	return func(p []byte, l Layout) { binary.BigEndian.PutUint16(p[ipv4IDOff:], id) }
}
func clearDF(p []byte, l Layout) { p[ipv4FragOff] &^= ipv4DF >> 8 }

// corrupt flips a payload bit without fixing the checksum.
func corrupt(segs [][]byte, i int) [][]byte {
	out := slices.Clone(segs)
	out[i] = bytes.Clone(segs[i])
	out[i][len(out[i])-1] ^= 0x10
	return out
}

// tcpAt builds a lone TCP segment of one flow with the given sequence
// number and payload length.
func tcpAt(v6 bool, seq uint32, payload int, flags uint8) []byte {
	p, _ := buildSuper(superSpec{v6: v6, proto: tcp, payload: payload, seq: seq, tcpFlags: flags, df: true, seed: uint64(seq)})
	return p
}

// udpOf builds a lone datagram of one flow.
func udpOf(v6 bool, payload int, id uint16) []byte {
	p, _ := buildSuper(superSpec{v6: v6, proto: udp, payload: payload, id: id, seed: uint64(payload)})
	return p
}

func tcpCases(t testing.TB, v6 bool) []groCase {
	s := tcpStream(t, v6, 5, 1448, nil)
	ts := tcpStream(t, v6, 5, 1400, func(s *superSpec) { s.tcpOpts = tcpOpts12 })
	ttl, ce := 8, uint8(0x03) // TTL or hop limit; ECN CE in the TOS or traffic class
	if v6 {
		ttl, ce = 7, 0x30
	}
	cs := []groCase{
		{name: "bulk", in: s, want: "0-4"},
		{name: "timestamps", in: ts, want: "0-4"},
		{name: "mss536", in: tcpStream(t, v6, 20, 536, nil), want: "0-19"},
		{name: "psh-last", in: tcpStream(t, v6, 5, 1448, func(s *superSpec) { s.tcpFlags = flagACK | flagPSH }), want: "0-4"},
		{name: "fin-last", in: tcpStream(t, v6, 5, 1448, func(s *superSpec) { s.tcpFlags = flagACK | flagPSH | flagFIN }), want: "0-4"},
		{name: "psh-middle", in: editAt(t, s, orTCPFlags(flagPSH), 2), want: "0-2 3-4"},
		{name: "psh-first", in: editAt(t, s, orTCPFlags(flagPSH), 0), want: "0 1-4", why: "Flags", n: 1},
		{name: "fin-no-payload", in: append(slices.Clone(s), tcpAt(v6, 1000+5*1448, 0, flagACK|flagFIN)), want: "0-4 5", why: "NoPayload", n: 1},
		{name: "cwr-first", in: tcpStream(t, v6, 5, 1448, func(s *superSpec) { s.tcpFlags, s.gso = flagACK|flagCWR|flagECE, s.gso|GSOECN }), want: "0 1-4", why: "Flags", n: 1},
		{name: "cwr-middle", in: editAt(t, s, orTCPFlags(flagCWR), 2), want: "0-1 2 3-4", why: "Flags", n: 1},
		{name: "cwr-last", in: editAt(t, s, orTCPFlags(flagCWR), 4), want: "0-3 4", why: "Flags", n: 1},
		{name: "cwr-all", in: editAt(t, s, orTCPFlags(flagCWR), from(0, 5)...), want: "0 1 2 3 4", why: "Flags", n: 5},
		{name: "ece-all", in: tcpStream(t, v6, 5, 1448, func(s *superSpec) { s.tcpFlags = flagACK | flagECE }), want: "0-4"},
		{name: "ece-middle", in: editAt(t, s, orTCPFlags(flagECE), 2), want: "0-1 2 3-4"},
		{name: "syn", in: editAt(t, s, orTCPFlags(flagSYN), 2), want: "0-1 2 3-4", why: "Flags", n: 1},
		{name: "rst", in: editAt(t, s, setTCPFlags(flagRST), 2), want: "0-1 2 3-4", why: "Flags", n: 1},
		{name: "urg", in: editAt(t, s, orTCPFlags(flagURG), 2), want: "0-1 2 3-4", why: "Flags", n: 1},
		{name: "gap", in: pick(s, 0, 1, 3, 4), want: "0-1 2-3"},
		{name: "retransmission", in: pick(s, 0, 1, 2, 1, 3), want: "0-2 3 4"},
		{name: "ack-changed", in: editAt(t, s, addL4(11, 1), 2), want: "0-1 2 3-4"},
		{name: "window-changed", in: editAt(t, s, addL4(15, 1), 2, 3, 4), want: "0-1 2-4"},
		{name: "tsval-changed", in: editAt(t, ts, addL4(27, 1), 2, 3, 4), want: "0-1 2-4"},
		{name: "urgent-pointer-changed", in: editAt(t, s, addL4(19, 1), 2, 3, 4), want: "0-1 2-4"},
		{name: "ttl-changed", in: editAt(t, s, addAt(ttl, 1), 2, 3, 4), want: "0-1 2-4"},
		{name: "tos-changed", in: editAt(t, s, addAt(1, 0x40), 2, 3, 4), want: "0-1 2-4"},
		{name: "ecn-ce-middle", in: editAt(t, s, addAt(1, ce), 2), want: "0-1 2 3-4"},
		{name: "pure-ack-middle", in: slices.Insert(slices.Clone(s), 2, tcpAt(v6, 1000+2*1448, 0, flagACK)), want: "0-1 2 3-5", why: "NoPayload", n: 1},
		{name: "pure-acks", in: [][]byte{tcpAt(v6, 1, 0, flagACK), tcpAt(v6, 1, 0, flagACK)}, want: "0 1", why: "NoPayload", n: 2},
		{name: "short-last", in: tcpStream(t, v6, 5, 1448, func(s *superSpec) { s.payload -= 100 }), want: "0-4"},
		{name: "short-middle", in: [][]byte{tcpAt(v6, 0, 1448, flagACK), tcpAt(v6, 1448, 1448, flagACK), tcpAt(v6, 2896, 1000, flagACK), tcpAt(v6, 3896, 1448, flagACK), tcpAt(v6, 5344, 1448, flagACK)}, want: "0-2 3-4"},
		{name: "longer-than-first", in: [][]byte{tcpAt(v6, 0, 1000, flagACK), tcpAt(v6, 1000, 1448, flagACK), tcpAt(v6, 2448, 1448, flagACK)}, want: "0 1-2"},
		{name: "over-64k", in: long(t, v6, tcp, 50, 1448), want: "0-44 45-49"},
		{name: "bad-checksum-middle", in: corrupt(s, 2), want: "0-1 2 3-4", why: "BadChecksum", n: 1},
		{name: "bad-checksum-first", in: corrupt(s, 0), want: "0 1-4", why: "BadChecksum", n: 1},
		{name: "bad-checksum-alone", in: corrupt(s[:1], 0), want: "0"},
		{name: "truncated-middle", in: func() [][]byte { c := slices.Clone(s); c[2] = c[2][:len(c[2])-1]; return c }(), want: "0-1 2 3-4", why: "Malformed", n: 1},
		{name: "tcp-off", in: s, want: "0 1 2 3 4", why: "Disabled", n: 5, noTCP: true},
	}
	if v6 {
		return append(cs, tcp6Cases(t, s)...)
	}
	return append(cs, tcp4Cases(t, s)...)
}

func tcp4Cases(t testing.TB, s [][]byte) []groCase {
	fixed := editAt(t, s, setID(0x4000), from(0, 5)...)
	return []groCase{
		{name: "id-fixed-df", in: fixed, want: "0-4"},
		{name: "id-fixed-no-df", in: editAt(t, fixed, clearDF, from(0, 5)...), want: "0-4"},
		{name: "id-incrementing-no-df", in: editAt(t, s, clearDF, from(0, 5)...), want: "0-4"},
		{name: "id-fixed-then-jump", in: editAt(t, fixed, setID(0x4002), 2), want: "0-1 2 3-4"},
		{name: "id-gap", in: editAt(t, s, setID(0x4009), 2), want: "0-1 2 3-4"},
		{name: "df-changed", in: editAt(t, s, clearDF, 2, 3, 4), want: "0-1 2-4"},
		{name: "ip-options", in: tcpStream(t, false, 5, 1448, func(s *superSpec) { s.ipOpts = ipOpts4 }), want: "0 1 2 3 4", why: "IPOptions", n: 5},
		{name: "ip-options-middle", in: slices.Insert(slices.Clone(s), 2, tcpStream(t, false, 1, 1448, func(s *superSpec) { s.ipOpts = ipOpts4 })...), want: "0-1 2 3-5", why: "IPOptions", n: 1},
		{name: "ip-bad-header-checksum", in: func() [][]byte { c := slices.Clone(s); c[2] = bytes.Clone(c[2]); c[2][ipv4CsumOff]++; return c }(), want: "0-1 2 3-4", why: "BadChecksum", n: 1},
		{name: "fragment", in: editAt(t, s, func(p []byte, _ Layout) { p[ipv4FragOff] |= ipv4MF >> 8 }, 2), want: "0-1 2 3-4", why: "Fragment", n: 1},
		{name: "reserved-flag", in: editAt(t, s, func(p []byte, _ Layout) { p[ipv4FragOff] |= 0x80 }, 2), want: "0-1 2 3-4", why: "Fragment", n: 1},
	}
}

func tcp6Cases(t testing.TB, s [][]byte) []groCase {
	ext := func(e ...extHdr) [][]byte {
		return tcpStream(t, true, 5, 1400, func(s *superSpec) { s.ext = e })
	}
	return []groCase{
		{name: "routing-dstopts", in: ext(extHdr{extDestOpts, 16}, extHdr{extRouting, 24}, extHdr{extDestOpts, 8}), want: "0-4"},
		{name: "ext-changed", in: editAt(t, ext(extHdr{extDestOpts, 16}), addAt(ipv6Len+4, 1), 2, 3, 4), want: "0-1 2-4"},
		{name: "hop-by-hop", in: ext(extHdr{extHopByHop, 8}, extHdr{extRouting, 8}), want: "0-4"},
		{name: "hop-by-hop-changed", in: editAt(t, ext(extHdr{extHopByHop, 16}), addAt(ipv6Len+4, 1), 2, 3, 4), want: "0-1 2-4"},
		{name: "hop-by-hop-second", in: editAt(t, ext(extHdr{extDestOpts, 8}, extHdr{extDestOpts, 8}), func(p []byte, _ Layout) { p[ipv6Len] = extHopByHop }, from(0, 5)...), want: "0 1 2 3 4", why: "IPOptions", n: 5},
		{name: "flow-label-changed", in: editAt(t, s, addAt(3, 1), 2, 3, 4), want: "0-1 2-4"},
	}
}

func udpCases(t testing.TB, v6 bool) []groCase {
	s := udpStream(t, v6, 5, 1200, nil)
	cs := []groCase{
		{name: "equal", in: s, want: "0-4"},
		{name: "short-last", in: udpStream(t, v6, 5, 1200, func(s *superSpec) { s.payload -= 700 }), want: "0-4"},
		{name: "short-then-more", in: append(udpStream(t, v6, 5, 1200, func(s *superSpec) { s.payload -= 700 }), udpOf(v6, 1200, 0x105)), want: "0-4 5"},
		{name: "shorter-middle", in: [][]byte{udpOf(v6, 1200, 1), udpOf(v6, 1000, 2), udpOf(v6, 1200, 3), udpOf(v6, 1200, 4)}, want: "0-1 2-3"},
		{name: "longer-than-first", in: [][]byte{udpOf(v6, 1000, 1), udpOf(v6, 1200, 2), udpOf(v6, 1200, 3)}, want: "0 1-2"},
		{name: "70-datagrams", in: udpStream(t, v6, 70, 100, nil), want: "0-63 64-69"},
		{name: "over-64k", in: long(t, v6, udp, 60, 1400), want: "0-45 46-59"},
		{name: "bad-checksum", in: corrupt(s, 2), want: "0-1 2 3-4", why: "BadChecksum", n: 1},
		{name: "no-payload", in: [][]byte{udpOf(v6, 0, 1), udpOf(v6, 0, 2)}, want: "0 1", why: "NoPayload", n: 2},
		{name: "udp-off", in: s, want: "0 1 2 3 4", why: "Disabled", n: 5, noUDP: true},
		{name: "length-lies", in: editAt(t, s, addL4(udpLenOff+1, 1), 2), want: "0-1 2 3-4", why: "Malformed", n: 1},
	}
	zero := slices.Clone(s)
	zero[2] = bytes.Clone(s[2])
	l := layoutOf(t, zero[2])
	clear(zero[2][l.L3Len()+udpCsumOffset:][:2])
	cs = append(cs, groCase{name: "zero-checksum-middle", in: zero, want: "0-1 2 3-4", why: "NoChecksum", n: 1})
	if !v6 {
		cs = append(cs, groCase{name: "id-fixed-df", in: editAt(t, udpStream(t, false, 5, 1200, func(s *superSpec) { s.df = true }), setID(7), from(0, 5)...), want: "0-4"})
	}
	return cs
}

// mixedCases mix flows, kinds and things that are not TCP or UDP.
func mixedCases(t testing.TB) []groCase {
	a := tcpStream(t, false, 3, 1448, nil)
	b := tcpStream(t, false, 3, 1448, func(s *superSpec) { s.srcPort = 40001 })
	u := udpStream(t, true, 3, 500, nil)
	icmp := edited(t, a[0], func(p []byte, l Layout) { p[9] = 1 })
	return []groCase{
		{name: "two-flows-interleaved", in: [][]byte{a[0], b[0], a[1], b[1], a[2], b[2]}, want: "0+2+4 1+3+5"},
		{name: "three-kinds", in: [][]byte{a[0], u[0], b[0], u[1], a[1], u[2], a[2], b[1]}, want: "0+4+6 1+3+5 2+7"},
		{name: "not-tcp-udp", in: [][]byte{a[0], icmp, a[1]}, want: "0+2 1", why: "NotTCPUDP", n: 1},
		{name: "empty", in: [][]byte{{}}, want: "0", why: "Malformed", n: 1},
		{name: "ip-version-5", in: [][]byte{{0x50, 0, 0, 20}}, want: "0", why: "Malformed", n: 1},
	}
}

// transportCases are the TCP and UDP table cases over IPv4 and IPv6,
// named by protocol and version.
func transportCases(t *testing.T) []groCase {
	var all []groCase
	for _, v6 := range []bool{false, true} {
		sfx := map[bool]string{false: "4", true: "6"}[v6]
		for _, c := range tcpCases(t, v6) {
			c.name = "tcp" + sfx + "/" + c.name
			all = append(all, c)
		}
		for _, c := range udpCases(t, v6) {
			c.name = "udp" + sfx + "/" + c.name
			all = append(all, c)
		}
	}
	return all
}

func TestCoalesceTable(t *testing.T) {
	all := transportCases(t)
	all = append(all, mixedCases(t)...)
	for _, c := range all {
		t.Run(c.name, func(t *testing.T) {
			for _, hs := range []int{HeaderSize, HeaderSizeMrg} {
				co, err := NewCoalescer(CoalescerConfig{HeaderSize: hs, TCP: !c.noTCP, UDP: !c.noUDP, MaxBatch: 128})
				if err != nil {
					t.Fatal(err)
				}
				outs := coalesce(t, co, c.in)
				checkCoalesced(t, c.in, outs)
				if got, want := groups(outs), parseGroups(t, c.want); !reflect.DeepEqual(got, want) {
					t.Fatalf("output packets %v, want %v", got, want)
				}
				st := co.Stats()
				checkStats(t, st)
				if c.why != "" {
					if got := reflect.ValueOf(st).FieldByName(c.why).Uint(); got != uint64(c.n) {
						t.Fatalf("%s = %d, want %d (%+v)", c.why, got, c.n, st)
					}
				}
			}
		})
	}
}

// parseGroups parses the output packets of a groCase.
func parseGroups(t testing.TB, s string) [][]int {
	var g [][]int
	for _, f := range strings.Fields(s) {
		var idx []int
		if a, b, ok := strings.Cut(f, "-"); ok {
			lo, hi := atoi(t, a), atoi(t, b)
			idx = from(lo, hi+1)
		} else {
			for _, n := range strings.Split(f, "+") {
				idx = append(idx, atoi(t, n))
			}
		}
		g = append(g, idx)
	}
	return g
}

func atoi(t testing.TB, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCoalesceHeaders checks a super-packet's header and rewritten
// headers field by field on a few shapes.
func TestCoalesceHeaders(t *testing.T) {
	co, _ := NewCoalescer(CoalescerConfig{HeaderSize: HeaderSize, TCP: true, UDP: true, MaxBatch: 64})
	for _, c := range []struct {
		name string
		in   [][]byte
		want Header
	}{
		{"tcp4", tcpStream(t, false, 4, 1448, nil), Header{Flags: FlagNeedsCsum, GSOType: GSOTCPv4, HdrLen: 40, GSOSize: 1448, CsumStart: 20, CsumOffset: 16}},
		{"tcp6-ece-ts", tcpStream(t, true, 4, 1000, func(s *superSpec) { s.tcpFlags, s.tcpOpts = flagACK|flagECE, tcpOpts12 }), Header{Flags: FlagNeedsCsum, GSOType: GSOTCPv6, HdrLen: 72, GSOSize: 1000, CsumStart: 40, CsumOffset: 16}},
		{"uso4", udpStream(t, false, 3, 1200, func(s *superSpec) { s.payload -= 10 }), Header{Flags: FlagNeedsCsum, GSOType: GSOUDPL4, HdrLen: 28, GSOSize: 1200, CsumStart: 20, CsumOffset: 6}},
		{"uso6-ext", udpStream(t, true, 3, 1200, func(s *superSpec) { s.ext = []extHdr{{extRouting, 8}} }), Header{Flags: FlagNeedsCsum, GSOType: GSOUDPL4, HdrLen: 56, GSOSize: 1200, CsumStart: 48, CsumOffset: 6}},
	} {
		outs := coalesce(t, co, c.in)
		if len(outs) != 1 || outs[0].hdr != c.want {
			t.Fatalf("%s: %d outputs, first header %+v, want %+v", c.name, len(outs), outs[0].hdr, c.want)
		}
		total := int(c.want.HdrLen)
		for _, p := range c.in {
			total += len(p) - int(c.want.HdrLen)
		}
		if len(outs[0].pkt) != total {
			t.Fatalf("%s: %d bytes, want %d", c.name, len(outs[0].pkt), total)
		}
	}
}

// TestCoalesceSplitInverse: Coalesce(Split(x)) is x itself, header and
// partial checksum included, for the shapes of the Split benchmarks
// (IPv6 ones 40 bytes shorter: GRO, like the kernel's, keeps the whole IP
// packet within 65535 bytes).
func TestCoalesceSplitInverse(t *testing.T) {
	co, _ := NewCoalescer(CoalescerConfig{HeaderSize: HeaderSize, TCP: true, UDP: true, MaxBatch: 128})
	for _, shape := range benchShapes() {
		if shape.spec.v6 {
			shape.spec.payload -= ipv6Len
		}
		pkt, h := buildSuper(shape.spec)
		outs := coalesce(t, co, cut(t, shape.spec))
		if len(outs) != 1 || !bytes.Equal(outs[0].pkt, pkt) {
			t.Fatalf("%s: %d outputs", shape.name, len(outs))
		}
		if outs[0].hdr != h {
			t.Fatalf("%s: header %+v, sender's %+v", shape.name, outs[0].hdr, h)
		}
	}
}

func TestCoalescerConfig(t *testing.T) {
	if _, err := NewCoalescer(CoalescerConfig{HeaderSize: 11, MaxBatch: 1}); !broke(err, ruleHeaderSize) {
		t.Fatalf("header size 11: %v", err)
	}
	if _, err := NewCoalescer(CoalescerConfig{HeaderSize: HeaderSize}); err == nil {
		t.Fatal("MaxBatch 0 accepted")
	}
	co, _ := NewCoalescer(CoalescerConfig{HeaderSize: HeaderSize, TCP: true, UDP: true, MaxBatch: 2})
	for name, call := range map[string]func() ([][][]byte, error){
		"too many packets": func() ([][][]byte, error) { return co.Coalesce(make([][]byte, 3), make([]int, 3), 10) },
		"short headroom":   func() ([][][]byte, error) { return co.Coalesce([][]byte{make([]byte, 40)}, []int{20}, 9) },
		"size beyond":      func() ([][][]byte, error) { return co.Coalesce([][]byte{make([]byte, 40)}, []int{31}, 10) },
		"negative size":    func() ([][][]byte, error) { return co.Coalesce([][]byte{make([]byte, 40)}, []int{-1}, 10) },
		"too few sizes":    func() ([][][]byte, error) { return co.Coalesce([][]byte{make([]byte, 40)}, nil, 10) },
	} {
		out, err := call()
		if out != nil || !broke(err, ruleBatch) || errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %d outputs, error %v", name, len(out), err)
		}
	}
	if st := co.Stats(); st != (CoalesceStats{}) {
		t.Errorf("refused batches were counted: %+v", st)
	}
	// SetTCP and SetUDP take effect at the next call.
	s := tcpStream(t, false, 2, 1000, nil)
	u := udpStream(t, false, 2, 1000, nil)
	co.SetTCP(false)
	if outs := coalesce(t, co, s); len(outs) != 2 {
		t.Fatalf("TCP off: %d outputs", len(outs))
	}
	co.SetUDP(false)
	co.SetTCP(true)
	if outs := coalesce(t, co, s); len(outs) != 1 {
		t.Fatalf("TCP on again: %d outputs", len(outs))
	}
	if outs := coalesce(t, co, u); len(outs) != 2 {
		t.Fatalf("UDP off: %d outputs", len(outs))
	}
	if st := co.Stats(); st.Packets != 6 || st.Disabled != 4 || st.SuperPackets != 1 || st.Flushes != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestCoalesceAllocs(t *testing.T) {
	co, _ := NewCoalescer(CoalescerConfig{HeaderSize: HeaderSizeMrg, TCP: true, UDP: true, MaxBatch: 64})
	in := append(tcpStream(t, false, 20, 1448, nil), udpStream(t, true, 20, 1200, nil)...)
	in = append(in, tcpAt(false, 1, 0, flagACK), corrupt(in, 3)[3])
	bufs := make([][]byte, len(in))
	sizes := make([]int, len(in))
	load := func() {
		for i, p := range in {
			copy(bufs[i][groHeadroom:], p)
		}
	}
	for i, p := range in {
		bufs[i] = make([]byte, groHeadroom+len(p))
		sizes[i] = len(p)
	}
	allocs := testing.AllocsPerRun(100, func() {
		load()
		if out, err := co.Coalesce(bufs, sizes, groHeadroom); len(out) != 4 || err != nil {
			t.Fatalf("%d outputs, %v", len(out), err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per Coalesce", allocs)
	}
}

// TestCoalesceIPChecked: a Coalescer told that its caller checked the IP
// headers (IPChecked) does not verify the IPv4 header checksum again; one
// that is not told passes a packet whose checksum is bad through. Either
// way, a super-packet leaves with a correct header checksum.
func TestCoalesceIPChecked(t *testing.T) {
	in := slices.Clone(tcpStream(t, false, 3, 1000, nil))
	in[0] = bytes.Clone(in[0])
	in[0][ipv4CsumOff] ^= 0x40 // what the caller's check would have dropped
	for _, c := range []struct {
		checked bool
		want    string
		bad     uint64
	}{
		{false, "0 1-2", 1},
		{true, "0-2", 0},
	} {
		co, err := NewCoalescer(CoalescerConfig{HeaderSize: HeaderSize, TCP: true, MaxBatch: 8, IPChecked: c.checked})
		if err != nil {
			t.Fatal(err)
		}
		outs := coalesce(t, co, in)
		if got, want := groups(outs), parseGroups(t, c.want); !reflect.DeepEqual(got, want) {
			t.Fatalf("IPChecked %v: output packets %v, want %v", c.checked, got, want)
		}
		if st := co.Stats(); st.BadChecksum != c.bad || st.SuperPackets != 1 {
			t.Fatalf("IPChecked %v: stats %+v, want BadChecksum %d and one super-packet", c.checked, st, c.bad)
		}
		super := outs[len(outs)-1].pkt
		if Checksum(super[:ipv4MinLen], 0) != 0 {
			t.Fatalf("IPChecked %v: super-packet's IPv4 header checksum does not verify", c.checked)
		}
	}
}
