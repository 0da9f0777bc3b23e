package segment

import (
	"fmt"
	"testing"
)

// BenchmarkCoalesce merges the segments of the BenchmarkSplit shapes (64
// KiB super-packets cut by Split; the IPv6 ones make two super-packets,
// since a merged IP packet stays within 65535 bytes): ns/op is per 64 KiB
// of segments. Beside it, verify-only is the floor of any verifying GRO:
// summing every segment's transport bytes with its pseudo-header, nothing
// else. Each iteration first restores the segments' headers, which
// Coalesce rewrites in place (about 50 bytes per segment).
func BenchmarkCoalesce(b *testing.B) {
	co, err := NewCoalescer(CoalescerConfig{HeaderSize: HeaderSizeMrg, TCP: true, UDP: true, MaxBatch: 128})
	if err != nil {
		b.Fatal(err)
	}
	for _, shape := range benchShapes() {
		segs := cut(b, shape.spec)
		bufs := make([][]byte, len(segs))
		sizes := make([]int, len(segs))
		var total int
		for i, s := range segs {
			bufs[i] = make([]byte, groHeadroom+len(s))
			copy(bufs[i][groHeadroom:], s)
			sizes[i] = len(s)
			total += len(s)
		}
		kind, l4Len := groTCP, tcpMinLen
		if shape.spec.proto == udp {
			kind, l4Len = groUDP, udpLen
		}
		if shape.spec.v6 {
			kind |= groV6
		}
		l3 := layoutOf(b, segs[0]).L3Len()
		hdrLen := l3 + l4Len
		restore := func() {
			for i, s := range segs {
				copy(bufs[i][groHeadroom:], s[:hdrLen])
			}
		}
		b.Run(fmt.Sprintf("%s/gsoplane", shape.name), func(b *testing.B) {
			b.SetBytes(int64(total))
			b.ReportAllocs()
			for b.Loop() {
				restore()
				if out, err := co.Coalesce(bufs, sizes, groHeadroom); len(out) > 2 || err != nil {
					b.Fatalf("%d output packets, %v", len(out), err)
				}
			}
		})
		b.Run(fmt.Sprintf("%s/verify-only", shape.name), func(b *testing.B) {
			b.SetBytes(int64(total))
			b.ReportAllocs()
			for b.Loop() {
				restore()
				for i := range segs {
					p := groPacket{b: bufs[i][groHeadroom : groHeadroom+sizes[i]], l3: l3, kind: kind}
					if !p.checksumOK() {
						b.Fatal("bad checksum")
					}
				}
			}
		})
	}
}
