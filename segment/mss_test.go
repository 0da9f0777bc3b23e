package segment

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/internal/iphdr"
)

// tcpOf is ParseTCP with the header's offset, length and IP version as
// values.
func tcpOf(pkt []byte) (l3, l4 int, v6, ok bool) {
	t, ok := ParseTCP(pkt)
	return t.L3, t.l4, t.v6, ok
}

// mssOpt is an MSS option announcing m.
func mssOpt(m uint16) []byte { return []byte{tcpOptMSS, 4, byte(m >> 8), byte(m)} }

// flowSpec is one direction of a TCP connection for the MSS tests.
type flowSpec struct {
	v6       bool
	src, dst netip.Addr
	sp, dp   uint16
}

func flow4(i int) flowSpec {
	return flowSpec{src: netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), dst: defaultDst4, sp: uint16(40000 + i), dp: 443}
}

func flow6(i int) flowSpec {
	a := defaultSrc6.As16()
	a[14], a[15] = byte(i>>8), byte(i)
	return flowSpec{v6: true, src: netip.AddrFrom16(a), dst: defaultDst6, sp: uint16(40000 + i), dp: 443}
}

// back is the same connection in the other direction.
func (f flowSpec) back() flowSpec {
	return flowSpec{v6: f.v6, src: f.dst, dst: f.src, sp: f.dp, dp: f.sp}
}

// pkt builds a TCP packet of the flow.
func (f flowSpec) pkt(flags uint8, opts []byte, payload int, mod ...func(*superSpec)) []byte {
	s := superSpec{v6: f.v6, proto: tcp, src: f.src, dst: f.dst, srcPort: f.sp, dstPort: f.dp,
		tcpFlags: flags, tcpOpts: opts, payload: payload, seed: uint64(f.sp)}
	for _, m := range mod {
		m(&s)
	}
	return wirePacket(s)
}

func partial(s *superSpec) { s.needsCsum = true }

// mssBook is an MSS table for the tests: what the pipeline's MSSTable
// does with ParseTCP, Announced, Resets and SegmentMSS, in a map keyed by
// the flow's addresses and ports. Not safe for concurrent use.
type mssBook map[string]int

// key returns the flow of pkt, a TCP packet, or with reverse of the flow
// in the other direction.
func (mssBook) key(pkt []byte, tcp TCP, reverse bool) string {
	a, ports := iphdr.Addrs(pkt), pkt[tcp.L3:tcp.L3+4]
	src, dst, sp, dp := a[:len(a)/2], a[len(a)/2:], ports[:2], ports[2:]
	if reverse {
		src, dst, sp, dp = dst, src, dp, sp
	}
	return string(src) + string(dst) + string(sp) + string(dp)
}

func (b mssBook) Observe(pkt []byte) {
	tcp, ok := ParseTCP(pkt)
	if !ok {
		return
	}
	switch mss, syn := tcp.Announced(pkt); {
	case syn:
		b[b.key(pkt, tcp, true)] = mss
	case tcp.Resets(pkt):
		delete(b, b.key(pkt, tcp, false))
		delete(b, b.key(pkt, tcp, true))
	}
}

func (b mssBook) MSS(pkt []byte) int {
	tcp, ok := ParseTCP(pkt)
	if !ok {
		return 0
	}
	if m := b[b.key(pkt, tcp, false)]; m != 0 {
		return tcp.SegmentMSS(m)
	}
	return 0
}

// TestTCPHandshake: what SYNs, SYN-ACKs and RSTs announce, through an
// mssBook.
func TestTCPHandshake(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		mk, def := flow4, tcpMSSDefault4
		if v6 {
			mk, def = flow6, tcpMSSDefault6
		}
		c := mk(1)    // client → server
		s := c.back() // server → client
		tbl := mssBook{}
		data := func(f flowSpec, opts []byte, mod ...func(*superSpec)) int {
			return tbl.MSS(f.pkt(flagACK, opts, 3000, mod...))
		}
		if got := data(c, nil); got != 0 {
			t.Fatalf("v6=%v: unknown flow: MSS %d, want 0", v6, got)
		}
		// The client's SYN announces what the server may send it.
		tbl.Observe(c.pkt(flagSYN, mssOpt(1000), 0))
		if got, want := data(s, nil), 1000; got != want {
			t.Fatalf("v6=%v: server → client after the SYN: %d, want %d", v6, got, want)
		}
		if got := data(c, nil); got != 0 {
			t.Fatalf("v6=%v: client → server after the SYN only: %d, want 0", v6, got)
		}
		// The SYN-ACK, with a partial checksum as a veth peer leaves it.
		tbl.Observe(s.pkt(flagSYN|flagACK, append(mssOpt(1460), 1, 1, 1, 0), 0, partial))
		if got := data(c, nil); got != 1460 {
			t.Fatalf("v6=%v: client → server after the SYN-ACK: %d, want 1460", v6, got)
		}
		// Options in the data packet come off the MSS.
		if got := data(c, tsOpt); got != 1460-12 {
			t.Fatalf("v6=%v: with timestamps: %d, want %d", v6, got, 1460-12)
		}
		if v6 {
			ext := func(s *superSpec) { s.ext = []extHdr{{extHopByHop, 8}, {extDestOpts, 16}} }
			if got := data(c, tsOpt, ext); got != 1460-24-12 {
				t.Fatalf("with extension headers: %d, want %d", got, 1460-24-12)
			}
		} else {
			if got := data(c, tsOpt, func(s *superSpec) { s.ipOpts = ipOptsNOP }); got != 1460-8-12 {
				t.Fatalf("with IPv4 options: %d, want %d", got, 1460-8-12)
			}
		}
		// A retransmitted SYN-ACK with another MSS replaces it.
		tbl.Observe(s.pkt(flagSYN|flagACK, mssOpt(1200), 0))
		if got := data(c, nil); got != 1200 {
			t.Fatalf("v6=%v: after a second SYN-ACK: %d, want 1200", v6, got)
		}
		// A RST from either side forgets both directions.
		tbl.Observe(c.pkt(flagRST|flagACK, nil, 0))
		if a, b := data(c, nil), data(s, nil); a != 0 || b != 0 {
			t.Fatalf("v6=%v: after a RST: %d, %d; want 0, 0", v6, a, b)
		}

		// Defaults, odd options, ignored packets: each on a fresh flow.
		for i, tc := range []struct {
			name string
			syn  []byte
			want int // MSS of the data back to the SYN's sender
		}{
			{"no option", mk(10).pkt(flagSYN, nil, 0), def},
			{"MSS 0", mk(11).pkt(flagSYN, mssOpt(0), 0), def},
			{"last MSS counts", mk(12).pkt(flagSYN, append(mssOpt(1400), mssOpt(900)...), 0), 900},
			{"MSS 0 after one", mk(13).pkt(flagSYN, append(mssOpt(1400), mssOpt(0)...), 0), 1400},
			{"after NOPs and SACK-permitted", mk(14).pkt(flagSYN, []byte{1, 1, 4, 2, 2, 4, 0x05, 0xb4}, 0), 1460},
			{"after end of options", mk(15).pkt(flagSYN, []byte{0, 0, 0, 0, 2, 4, 1, 0}, 0), def},
			{"option overruns the header", mk(16).pkt(flagSYN, []byte{1, 1, 2, 4, 1, 0, 2, 9}, 0), 256},
			{"tiny MSS", mk(17).pkt(flagSYN, mssOpt(10), 0), tcpMinSndMSS},
			{"SYN with data", mk(18).pkt(flagSYN, mssOpt(1300), 100), 1300},
			{"bad checksum", corruptLast(mk(19).pkt(flagSYN, mssOpt(1300), 4)), 0},
			{"SYN+FIN", mk(20).pkt(flagSYN|flagFIN, mssOpt(1300), 0), 0},
			{"SYN+RST", mk(21).pkt(flagSYN|flagRST, mssOpt(1300), 0), 0},
			{"ACK", mk(22).pkt(flagACK, mssOpt(1300), 0), 0},
			{"fragment", func() []byte {
				if v6 {
					return mk(23).pkt(flagSYN, mssOpt(1300), 0, func(s *superSpec) { s.ext = []extHdr{{extFragment, 8}} })
				}
				return setIPv4FragField(mk(23).pkt(flagSYN, mssOpt(1300), 0), ipv4MF)
			}(), 0},
			{"truncated", mk(24).pkt(flagSYN, mssOpt(1300), 0)[:30], 0},
		} {
			f := mk(10 + i)
			tbl.Observe(tc.syn)
			if got := data(f.back(), nil); got != tc.want {
				t.Errorf("v6=%v %s: MSS %d, want %d", v6, tc.name, got, tc.want)
			}
		}
	}
	// A bad IPv4 header checksum.
	tbl := mssBook{}
	syn := flow4(1).pkt(flagSYN, mssOpt(1300), 0)
	syn[8]--
	tbl.Observe(syn)
	if got := tbl.MSS(flow4(1).back().pkt(flagACK, nil, 100)); got != 0 {
		t.Errorf("SYN with a bad IPv4 header checksum recorded: %d", got)
	}
	// Not TCP.
	tbl.Observe(rawIP(false, 17, 100, false))
	tbl.Observe(nil)
	if tbl.MSS(rawIP(true, 17, 100, false)) != 0 || tbl.MSS(nil) != 0 {
		t.Error("MSS of a non-TCP packet")
	}
}

func (f flowSpec) syn(m uint16) []byte { return f.pkt(flagSYN, mssOpt(m), 0) }

func TestMSSAllocs(t *testing.T) {
	f := flow4(1)
	syn, rst := f.syn(1400), f.pkt(flagRST, nil, 0)
	clamp := flow6(1).syn(8000)
	for name, fn := range map[string]func(){
		"Announced": func() { tcp, _ := ParseTCP(syn); tcp.Announced(syn) },
		"Resets":    func() { tcp, _ := ParseTCP(rst); tcp.Resets(rst) },
		"Clamp":     func() { binary.BigEndian.PutUint16(clamp[40+22:], 8000); Clamp(clamp, 1500) },
	} {
		if n := testing.AllocsPerRun(100, fn); n != 0 {
			t.Errorf("%s: %v allocations", name, n)
		}
	}
}

// tcpVerifies reports whether a TCP packet's checksum is complete and
// correct, by gVisor's checksum.
func tcpVerifies(t *testing.T, pkt []byte) bool {
	t.Helper()
	l3, _, v6, ok := tcpOf(pkt)
	if !ok {
		t.Fatal("not a TCP packet")
	}
	var src, dst tcpip.Address
	if v6 {
		src, dst = tcpip.AddrFrom16Slice(pkt[8:24]), tcpip.AddrFrom16Slice(pkt[24:40])
	} else {
		src, dst = tcpip.AddrFrom4Slice(pkt[12:16]), tcpip.AddrFrom4Slice(pkt[16:20])
	}
	l4 := pkt[l3:]
	return checksum.Checksum(l4, header.PseudoHeaderChecksum(header.TCPProtocolNumber, src, dst, uint16(len(l4)))) == 0xffff
}

// mssValues returns the values of the MSS options of a TCP packet.
func mssValues(pkt []byte) []int {
	l3, l4, _, _ := tcpOf(pkt)
	opts := pkt[l3+20 : l3+l4]
	var v []int
	for it := (tcpOptIter{b: opts}); ; {
		kind, off, n, ok := it.next()
		if !ok {
			return v
		}
		if kind == tcpOptMSS && n == 4 {
			v = append(v, int(binary.BigEndian.Uint16(opts[off+2:])))
		}
	}
}

func TestClamp(t *testing.T) {
	aoOpt := []byte{tcpOptAO, 16, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}
	for _, tc := range []struct {
		name    string
		pkt     []byte
		mtu     int
		changed bool
		want    []int // MSS options after
		csum    CsumState
	}{
		{"v4 complete", flow4(1).syn(8960), 1500, true, []int{1460}, CsumComplete},
		{"v4 partial", flow4(1).pkt(flagSYN|flagACK, mssOpt(8960), 0, partial), 1500, true, []int{1460}, CsumPartial},
		{"v4 bad", corruptLast(flow4(1).pkt(flagSYN, mssOpt(8960), 10)), 1500, true, []int{1460}, CsumBad},
		{"v6 complete", flow6(1).syn(8940), 1500, true, []int{1440}, CsumComplete},
		{"v6 partial", flow6(1).pkt(flagSYN, mssOpt(8940), 0, partial), 1280, true, []int{1220}, CsumPartial},
		{"v6 with extension headers", flow6(1).pkt(flagSYN, mssOpt(8940), 0, func(s *superSpec) { s.ext = []extHdr{{extDestOpts, 8}} }), 1500, true, []int{1440}, CsumComplete},
		{"odd offset", flow4(1).pkt(flagSYN, []byte{1, 2, 4, 0x23, 0x28, 1, 1, 1}, 0), 1500, true, []int{1460}, CsumComplete},
		{"odd offset partial", flow4(1).pkt(flagSYN, []byte{1, 2, 4, 0x23, 0x28, 1, 1, 1}, 0, partial), 1500, true, []int{1460}, CsumPartial},
		{"two options", flow4(1).pkt(flagSYN, append(mssOpt(9000), mssOpt(1600)...), 0), 1500, true, []int{1460, 1460}, CsumComplete},
		{"one of two above", flow4(1).pkt(flagSYN, append(mssOpt(1000), 1, mssOpt(1600)[0], mssOpt(1600)[1], mssOpt(1600)[2], mssOpt(1600)[3], 1, 1, 1), 0), 1500, true, []int{1000, 1460}, CsumComplete},
		{"already below", flow4(1).syn(1400), 1500, false, []int{1400}, CsumComplete},
		{"equal", flow4(1).syn(1460), 1500, false, []int{1460}, CsumComplete},
		{"no option", flow4(1).pkt(flagSYN, nil, 0), 1500, false, nil, CsumComplete},
		{"TCP-AO", flow4(1).pkt(flagSYN, append(mssOpt(9000), aoOpt...), 0), 1500, false, []int{9000}, CsumComplete},
		{"not a SYN", flow4(1).pkt(flagACK, mssOpt(9000), 0), 1500, false, []int{9000}, CsumComplete},
		{"mtu 40", flow4(1).syn(9000), 40, false, []int{9000}, CsumComplete},
		{"mtu 41", flow4(1).syn(9000), 41, true, []int{1}, CsumComplete},
		{"v6 mtu 60", flow6(1).syn(9000), 60, false, []int{9000}, CsumComplete},
		{"huge mtu", flow4(1).syn(9000), 70000, false, []int{9000}, CsumComplete},
		{"fragment", setIPv4FragField(flow4(1).syn(9000), ipv4MF), 1500, false, nil, CsumNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := bytes.Clone(tc.pkt)
			p := tc.pkt
			if got := Clamp(p, tc.mtu); got != tc.changed {
				t.Fatalf("Clamp = %v, want %v", got, tc.changed)
			}
			if !tc.changed && !bytes.Equal(in, p) {
				t.Fatal("Clamp reported no change but changed the packet")
			}
			if tc.csum == CsumNone {
				return
			}
			if got := mssValues(p); !equalInts(got, tc.want) {
				t.Fatalf("MSS options %v, want %v", got, tc.want)
			}
			l3, _, v6, _ := tcpOf(p)
			if st := l4Csum(p, l3, protoTCP, v6); st != tc.csum {
				t.Fatalf("checksum %v after Clamp, want %v", st, tc.csum)
			}
			switch tc.csum {
			case CsumComplete:
				if !tcpVerifies(t, p) {
					t.Fatal("complete checksum does not verify after Clamp")
				}
			case CsumPartial:
				// ForWire and Split complete it over the clamped option.
				h, _, err := std.ForWire(p, tc.mtu, 0)
				if err != nil {
					t.Fatal(err)
				}
				checkWireSplit(t, &Segmenter{}, p, h, tc.mtu, 0)
			case CsumBad:
				// It stays bad by the same amount: undoing the corruption
				// of the input makes the clamped packet verify.
				p[len(p)-1] ^= 0x5a
				if !tcpVerifies(t, p) {
					t.Fatal("bad checksum was not adjusted by the change")
				}
			}
		})
	}
	if Clamp(nil, 1500) || Clamp(rawIP(false, 17, 10, false), 1500) {
		t.Fatal("Clamp changed a non-TCP packet")
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
