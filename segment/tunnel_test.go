package segment

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/internal/testing/dirtybuf"
)

// tunnelSpecs are tunnel packets of every shape: VXLAN and Geneve, outer
// and inner IPv4 and IPv6, inner TSO and USO, with and without the outer
// checksum, cut or fitting one segment.
func tunnelSpecs() map[string]tunnelSpec {
	const tcp, udp = uint8(header.TCPProtocolNumber), uint8(header.UDPProtocolNumber)
	specs := make(map[string]tunnelSpec)
	inners := map[string]superSpec{
		"tcp4":      {proto: tcp, gso: GSOTCPv4, mss: 1398, payload: 1398*9 + 321, needsCsum: true, df: true, id: 0xfffe, seq: 0xfffff000, tcpFlags: flagACK | flagPSH | flagFIN},
		"tcp6":      {v6: true, proto: tcp, gso: GSOTCPv6 | GSOECN, mss: 1378, payload: 1378*7 + 5, needsCsum: true, tcpFlags: flagACK | flagCWR},
		"uso4":      {proto: udp, gso: GSOUDPL4, mss: 1400, payload: 1400*5 + 99, needsCsum: true, id: 7},
		"uso6":      {v6: true, proto: udp, gso: GSOUDPL4, mss: 1380, payload: 1380 * 4, needsCsum: true},
		"tcp4-fits": {proto: tcp, gso: GSOTCPv4, mss: 1398, payload: 1000, needsCsum: true, id: 3},
	}
	for name, in := range inners {
		for _, outer6 := range []bool{false, true} {
			for _, geneve := range []bool{false, true} {
				for _, csum := range []bool{false, true} {
					s := tunnelSpec{outer6: outer6, geneve: geneve, csum: csum, outerID: 0xffff, inner: in}
					if geneve {
						s.geneveOpts = 8
					}
					s.inner.seed = uint64(len(specs))
					specs[fmt.Sprintf("%s/%s/%s/csum-%v", tunnelName(s), ipName(outer6), name, csum)] = s
				}
			}
		}
	}
	return specs
}

func tunnelName(s tunnelSpec) string {
	if s.geneve {
		return "geneve"
	}
	return "vxlan"
}

func ipName(v6 bool) string {
	if v6 {
		return "ipv6"
	}
	return "ipv4"
}

// TestTunnelSplit: the segments of every shape keep the invariants, a
// Segmenter in partial mode writes the same complete segments, and
// splitting in place writes the same.
func TestTunnelSplit(t *testing.T) {
	for name, spec := range tunnelSpecs() {
		t.Run(name, func(t *testing.T) {
			pkt, h := buildTunnel(spec)
			l, segs, err := splitFresh(&Segmenter{}, pkt, h)
			if err != nil {
				t.Fatal(err)
			}
			if !l.Tunnel() || l.L3Len() != int(h.CsumStart) || l.HdrLen() != int(h.HdrLen) {
				t.Fatalf("layout %+v for header %+v", l, h)
			}
			if err := checkSplit(pkt, l, segs, false); err != nil {
				t.Fatal(err)
			}
			if l.Segments() > 1 && l.GSOHeader() != h {
				t.Errorf("GSOHeader %+v, input %+v", l.GSOHeader(), h)
			}
			if sh := l.SegmentHeader(true); sh.NeedsCsum() {
				t.Errorf("SegmentHeader(true) %+v: tunnel segments are complete", sh)
			}
			_, partial, err := splitFresh(&Segmenter{Partial: true}, pkt, h)
			if err != nil || !equalSegs(partial, segs) {
				t.Errorf("partial mode: %v, or other segments", err)
			}
			if inPlace := splitInPlace(t, pkt, l); !equalSegs(inPlace, segs) {
				t.Errorf("in place: other segments")
			}
		})
	}
}

func equalSegs(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func TestTunnelSplitAllocs(t *testing.T) {
	for _, name := range []string{"vxlan/ipv4/tcp4/csum-true", "geneve/ipv6/uso6/csum-false", "vxlan/ipv6/tcp4-fits/csum-true"} {
		pkt, h := buildTunnel(tunnelSpecs()[name])
		l, err := Validate(pkt, h)
		if err != nil {
			t.Fatal(err)
		}
		bufs, sizes := splitBuffers(l, 0)
		var s Segmenter
		if n := testing.AllocsPerRun(100, func() { s.Split(pkt, l, bufs, sizes, 0) }); n != 0 {
			t.Errorf("%s: %.1f allocations per Split", name, n)
		}
	}
}

// TestTunnelHeader: the 24-byte header carries the offsets (and zero hash
// fields); the shorter ones do not.
func TestTunnelHeader(t *testing.T) {
	h := Header{Flags: FlagNeedsCsum | FlagUDPTunnelCsum, GSOType: GSOUDPTunnelIPv6 | GSOTCPv4 | GSOECN, HdrLen: 1, GSOSize: 2, CsumStart: 3, CsumOffset: 4, NumBuffers: 5, OuterTH: 0x1234, InnerNH: 0x5678}
	b := bytes.Repeat([]byte{0xee}, HeaderSizeTunnel)
	if err := h.Encode(b, HeaderSizeTunnel); err != nil {
		t.Fatal(err)
	}
	if want := []byte{9, 0xc1, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x34, 0x12, 0x78, 0x56}; !bytes.Equal(b, want) {
		t.Fatalf("encoded %x, want %x", b, want)
	}
	if got, err := DecodeHeader(b, HeaderSizeTunnel); err != nil || got != h {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, h)
	}
	if got, _ := DecodeHeader(b, HeaderSizeMrg); got.OuterTH != 0 || got.InnerNH != 0 || got.NumBuffers != 5 {
		t.Errorf("12-byte header decoded %+v", got)
	}
	if s := h.GSOType.String(); s != "tcpv4|udp_tunnel_ipv6|ecn" {
		t.Errorf("String %q", s)
	}
	if h.GSOType.Kind() != GSOTCPv4 {
		t.Errorf("Kind %v", h.GSOType.Kind())
	}
}

// TestHeaderEncodeDirty: Encode writes every byte of each header form.
func TestHeaderEncodeDirty(t *testing.T) {
	h := Header{Flags: FlagNeedsCsum, GSOType: GSOUDPTunnelIPv4 | GSOUDPL4, HdrLen: 1, GSOSize: 2, CsumStart: 3, CsumOffset: 4, NumBuffers: 5, OuterTH: 6, InnerNH: 7}
	for _, size := range []int{HeaderSize, HeaderSizeMrg, HeaderSizeTunnel} {
		dirtybuf.Check(t, dirtybuf.New(1, size), dirtybuf.Leave(0, bytes.Repeat([]byte{0xee}, size)), func(bufs [][]byte) [][]byte {
			if err := h.Encode(bufs[0], size); err != nil {
				t.Fatal(err)
			}
			return [][]byte{bufs[0][:size]}
		})
	}
}

// TestTunnelValidateStricter: what Validate refuses beyond the kernel's
// rules (see Validate).
func TestTunnelValidateStricter(t *testing.T) {
	spec := tunnelSpecs()["vxlan/ipv4/tcp4/csum-true"]
	cases := map[string]func(p []byte, h *Header) []byte{
		"outer-th-not-outer-udp":    func(p []byte, h *Header) []byte { h.OuterTH += 4; return p },
		"inner-nh-odd":              func(p []byte, h *Header) []byte { h.InnerNH--; return p },
		"outer-version-mismatch":    func(p []byte, h *Header) []byte { h.GSOType ^= GSOUDPTunnelIPv4 | GSOUDPTunnelIPv6; return p },
		"outer-not-udp":             func(p []byte, h *Header) []byte { p[9] = protoTCP; ipv4Checksum(p[:20]); return p },
		"outer-length-short":        func(p []byte, h *Header) []byte { return append(p, 0, 0) },
		"inner-nh-beyond-packet":    func(p []byte, h *Header) []byte { h.InnerNH, h.CsumStart = uint16(len(p)), uint16(len(p))+20; return p },
		"csum-start-not-inner-l4":   func(p []byte, h *Header) []byte { h.CsumStart += 4; return p },
		"inner-ip-length-mismatch":  func(p []byte, h *Header) []byte { p[h.InnerNH+3]++; return p },
		"outer-ipv4-fragment":       func(p []byte, h *Header) []byte { p[6] |= 0x20; ipv4Checksum(p[:20]); return p },
		"inner-tcpv6-in-ipv4-outer": func(p []byte, h *Header) []byte { h.GSOType = GSOUDPTunnelIPv4 | GSOTCPv6; return p },
	}
	for name, mut := range cases {
		pkt, h := buildTunnel(spec)
		pkt = mut(pkt, &h)
		if _, err := Validate(pkt, h); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Validate: %v", name, err)
		}
	}
}

// TestTunnelPlain: a VXLAN packet that is not a super-packet, with its
// inner checksum partial (as a TUN with the tunnel offloads hands it
// over), passes through with that checksum completed.
func TestTunnelPlain(t *testing.T) {
	for _, name := range []string{"vxlan/ipv4/tcp4-fits/csum-false", "geneve/ipv6/uso6/csum-false"} {
		spec := tunnelSpecs()[name]
		spec.plain = true
		pkt, h := buildTunnel(spec)
		l, segs, err := splitFresh(&Segmenter{}, pkt, h)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if l.Tunnel() || l.Kind() != GSONone || len(segs) != 1 {
			t.Fatalf("%s: layout %+v, %d packets", name, l, len(segs))
		}
		if err := checkSplit(pkt, l, segs, false); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		inner := int(h.CsumStart) - l.L3Len() // the inner transport header
		if sh := l.SegmentHeader(true); sh.CsumStart != h.CsumStart || inner <= 0 {
			t.Errorf("%s: SegmentHeader(true) %+v, input %+v", name, sh, h)
		}
	}
}

// BenchmarkSplitTunnel cuts 64 KiB VXLAN super-packets (TSO inside) with
// and without the outer checksum, beside the same inner packet alone.
func BenchmarkSplitTunnel(b *testing.B) {
	inner := superSpec{proto: protoTCP, gso: GSOTCPv4, mss: 1398, payload: 65535 - 40 - 50 - 40, needsCsum: true, seed: 1}
	for _, c := range []struct {
		name string
		pkt  func() ([]byte, Header)
	}{
		{"plain-tcp4", func() ([]byte, Header) { return buildSuper(inner) }},
		{"vxlan4-tcp4", func() ([]byte, Header) { return buildTunnel(tunnelSpec{inner: inner}) }},
		{"vxlan4-tcp4-csum", func() ([]byte, Header) { return buildTunnel(tunnelSpec{csum: true, inner: inner}) }},
		{"vxlan6-tcp4-csum", func() ([]byte, Header) { return buildTunnel(tunnelSpec{outer6: true, csum: true, inner: inner}) }},
	} {
		pkt, h := c.pkt()
		l, err := Validate(pkt, h)
		if err != nil {
			b.Fatal(err)
		}
		bufs, sizes := splitBuffers(l, 0)
		var s Segmenter
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(pkt)))
			for b.Loop() {
				s.Split(pkt, l, bufs, sizes, 0)
			}
		})
	}
}
