package segment

import (
	"fmt"
	"testing"

	tstun "github.com/tailscale/wireguard-go/tun"
)

// benchShapes are 64 KiB super-packets as a Linux sender hands them to a
// TUN device: TSO over IPv4 and IPv6 and USO, at three MSS.
func benchShapes() []struct {
	name string
	spec superSpec
} {
	tso := func(v6 bool, mss int) superSpec {
		gso, room := GSOTCPv4, 65535-40
		if v6 {
			gso, room = GSOTCPv6, 65535-20
		}
		return superSpec{v6: v6, proto: tcp, gso: gso, mss: mss, payload: room, needsCsum: true, seed: 1}
	}
	uso := func(v6 bool, mss int) superSpec {
		room := 65535 - 28
		if v6 {
			room = 65535 - 8
		}
		return superSpec{v6: v6, proto: udp, gso: GSOUDPL4, mss: mss, payload: room, needsCsum: true, seed: 2}
	}
	return []struct {
		name string
		spec superSpec
	}{
		{"tcp4-64k-mss1448", tso(false, 1448)},
		{"tcp6-64k-mss1448", tso(true, 1448)},
		{"uso4-64k-mss1448", uso(false, 1448)},
		{"uso6-64k-mss1448", uso(true, 1448)},
		{"tcp4-64k-mss536", tso(false, 536)},
		{"tcp4-64k-mss8948", tso(false, 8948)},
	}
}

// BenchmarkSplit compares Split, with full and with partial checksums,
// with Tailscale's tun.GSOSplit on identical input in the same run, and
// with copy-only, the cost of the copies alone.
func BenchmarkSplit(b *testing.B) {
	for _, shape := range benchShapes() {
		pkt, h := buildSuper(shape.spec)
		l, err := Validate(pkt, h)
		if err != nil {
			b.Fatal(err)
		}
		bufs, sizes := splitBuffers(l, 0)
		run := func(impl string, split func() (int, error)) {
			b.Run(fmt.Sprintf("%s/%s", shape.name, impl), func(b *testing.B) {
				b.SetBytes(int64(len(pkt)))
				b.ReportAllocs()
				for b.Loop() {
					if n, err := split(); err != nil || n != l.segments {
						b.Fatalf("%d segments, %v", n, err)
					}
				}
			})
		}
		for _, s := range []*Segmenter{{}, {Partial: true}} {
			impl := "gsoplane"
			if s.Partial {
				impl = "gsoplane-partial"
			}
			run(impl, func() (int, error) { // validated once, as the forwarder does
				l, err := s.Validate(pkt, h)
				if err != nil {
					return 0, err
				}
				return s.Split(pkt, l, bufs, sizes, 0)
			})
		}
		opts := tailscaleOptions(h)
		run("tailscale", func() (int, error) { return tstun.GSOSplit(pkt, opts, bufs, sizes, 0) })
		// The floor of any copying split: the same bytes copied into the
		// same buffers, headers untouched, nothing summed.
		run("copy-only", func() (int, error) { return copyOnly(pkt, l, bufs), nil })
	}
}

func tailscaleOptions(h Header) tstun.GSOOptions {
	gso := map[GSOType]tstun.GSOType{GSOTCPv4: tstun.GSOTCPv4, GSOTCPv6: tstun.GSOTCPv6, GSOUDPL4: tstun.GSOUDPL4}
	return tstun.GSOOptions{
		GSOType:    gso[h.GSOType.Kind()],
		HdrLen:     h.HdrLen,
		CsumStart:  h.CsumStart,
		CsumOffset: h.CsumOffset,
		GSOSize:    h.GSOSize,
		NeedsCsum:  h.NeedsCsum(),
	}
}

// copyOnly copies each segment's headers and payload chunk into its buffer
// and nothing more.
func copyOnly(pkt []byte, l Layout, bufs [][]byte) int {
	hl := l.HdrLen()
	for i := range l.segments {
		start := hl + i*l.mss
		end := min(start+l.mss, len(pkt))
		copy(bufs[i][copy(bufs[i], pkt[:hl]):], pkt[start:end])
	}
	return l.segments
}
