//go:build amd64

package segment

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/tailscale/wireguard-go/tun"
	"golang.org/x/sys/cpu"
	gvisorcsum "gvisor.dev/gvisor/pkg/tcpip/checksum"
)

// refSum is the plain RFC 1071 one's complement sum of b as big-endian
// 16-bit words (an odd last byte is padded with a zero), plus initial.
func refSum(b []byte, initial uint16) uint16 {
	s := uint32(initial)
	for i := 0; i < len(b); i += 2 {
		w := uint32(b[i]) << 8
		if i+1 < len(b) {
			w |= uint32(b[i+1])
		}
		s += w
		s = (s & 0xffff) + (s >> 16)
	}
	return uint16(s)
}

// csumImpl is one implementation of sum and copySum.
type csumImpl struct {
	name    string
	sum     func(b []byte, acc uint64) uint64
	copySum func(dst, src []byte, acc uint64) uint64
}

// csumImpls lists the dispatching functions, the portable Go code and each
// assembly kernel this CPU can run.
func csumImpls() []csumImpl {
	impls := []csumImpl{
		{"dispatch", sum, copySum},
		{"generic", sumGeneric, copySumGeneric},
		{"sse2", sumSSE2, copySumSSE2},
	}
	if cpu.X86.HasAVX2 {
		impls = append(impls, csumImpl{"avx2", sumAVX2, copySumAVX2})
	}
	return impls
}

// forImpls runs f as a subtest for each implementation, with its own
// deterministic random source.
func forImpls(t *testing.T, seed uint64, f func(t *testing.T, r *rand.Rand, im csumImpl)) {
	for _, im := range csumImpls() {
		t.Run(im.name, func(t *testing.T) { f(t, rand.New(rand.NewPCG(seed, 1)), im) })
	}
}

// randAcc returns an initial accumulator: often an edge value.
func randAcc(r *rand.Rand) uint64 {
	switch r.IntN(6) {
	case 0:
		return 0
	case 1:
		return ^uint64(0)
	case 2:
		return ^uint64(0) - uint64(r.IntN(0x10000))
	case 3:
		return uint64(r.IntN(0x10000))
	default:
		return r.Uint64()
	}
}

// want is what any implementation must fold to: fold(acc) added to the
// reference sum of b, as a network-order 16-bit value.
func want(b []byte, acc uint64) uint16 { return refSum(b, fold(acc)) }

// check runs every sum and copySum implementation on buf[off:off+n] with
// the given accumulator and compares them with the reference. The results
// must match exactly: every implementation adds nonnegative integers with
// end-around carry, so none turns a nonzero sum into 0 (one's complement
// -0 is 0xffff, and +0 only results when acc and all the data are zero).
func check(t *testing.T, r *rand.Rand, im csumImpl, buf []byte, off, n int, acc uint64) {
	t.Helper()
	src := buf[off : off+n]
	w := want(src, acc)
	if g := fold(im.sum(src, acc)); g != w {
		t.Fatalf("%s: sum(len %d, off %d, acc %#x) = %#04x, want %#04x", im.name, n, off, acc, g, w)
	}

	// Disjoint: dst at its own misalignment; the guard bytes around
	// dst[:len(src)] must stay untouched.
	const guard = 64
	doff := r.IntN(64)
	dbuf := bytes.Repeat([]byte{0xa5}, doff+n+guard)
	dst := dbuf[doff:] // len(dst) > len(src)
	if g := fold(im.copySum(dst, src, acc)); g != w {
		t.Fatalf("%s: copySum(len %d, off %d, doff %d, acc %#x) = %#04x, want %#04x", im.name, n, off, doff, acc, g, w)
	}
	if !bytes.Equal(dst[:n], src) {
		t.Fatalf("%s: copySum(len %d, off %d, doff %d): dst[:len(src)] != src", im.name, n, off, doff)
	}
	for i, c := range dbuf {
		if (i < doff || i >= doff+n) && c != 0xa5 {
			t.Fatalf("%s: copySum(len %d, off %d, doff %d): wrote dst[%d]", im.name, n, off, doff, i-doff)
		}
	}

	// Aliased: dst and src are the same slice.
	orig := bytes.Clone(src)
	if g := fold(im.copySum(src, src, acc)); g != w {
		t.Fatalf("%s: copySum(aliased, len %d, off %d, acc %#x) = %#04x, want %#04x", im.name, n, off, acc, g, w)
	}
	if !bytes.Equal(src, orig) {
		t.Fatalf("%s: copySum(aliased, len %d, off %d): data changed", im.name, n, off)
	}
}

func randBuf(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestCsumAllLengths(t *testing.T) {
	forImpls(t, 1, func(t *testing.T, r *rand.Rand, im csumImpl) {
		buf := randBuf(r, 64+300)
		for n := 0; n <= 300; n++ {
			for _, acc := range []uint64{0, ^uint64(0), 0xffff, r.Uint64()} {
				check(t, r, im, buf, r.IntN(64), n, acc)
			}
		}
	})
}

func TestCsumMisaligned(t *testing.T) {
	forImpls(t, 2, func(t *testing.T, r *rand.Rand, im csumImpl) {
		buf := randBuf(r, 64+2000)
		for off := 0; off < 64; off++ {
			for _, n := range []int{0, 1, 31, 32, 33, 127, 128, 129, 255, 1448, 1999} {
				check(t, r, im, buf, off, n, randAcc(r))
			}
		}
	})
}

func TestCsumRandom(t *testing.T) {
	iters := 300
	if testing.Short() {
		iters = 30
	}
	forImpls(t, 3, func(t *testing.T, r *rand.Rand, im csumImpl) {
		buf := randBuf(r, 64+70000)
		for range iters {
			check(t, r, im, buf, r.IntN(64), r.IntN(70001), randAcc(r))
		}
	})
}

// TestCsumExtremes sums data that maximizes the carries: all-0xff bytes,
// and patterns where only the high or only the low 32-bit halves are set.
func TestCsumExtremes(t *testing.T) {
	forImpls(t, 4, func(t *testing.T, r *rand.Rand, im csumImpl) {
		for _, pat := range [][]byte{
			{0xff},
			{0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff},
			{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0},
			{0xff, 0xfe},
			{0x00},
		} {
			buf := bytes.Repeat(pat, (64+70000)/len(pat)+1)
			for _, n := range []int{0, 1, 7, 8, 31, 32, 64, 128, 1448, 65535, 65536, 70000} {
				for _, acc := range []uint64{0, ^uint64(0), ^uint64(0) - 1, 1 << 63} {
					check(t, r, im, buf, 8*r.IntN(8), n, acc)
				}
			}
		}
	})
}

// TestCsumDispatchFallback runs sum and copySum with AVX2 turned off, as on
// a CPU without it.
func TestCsumDispatchFallback(t *testing.T) {
	defer func(v bool) { useAVX2 = v }(useAVX2)
	useAVX2 = false
	r := rand.New(rand.NewPCG(5, 1))
	im := csumImpl{"dispatch-noavx2", sum, copySum}
	buf := randBuf(r, 64+70000)
	for n := 0; n <= 300; n++ {
		check(t, r, im, buf, r.IntN(64), n, randAcc(r))
	}
	for range 20 {
		check(t, r, im, buf, r.IntN(64), r.IntN(70001), randAcc(r))
	}
}

func TestChecksum(t *testing.T) {
	for _, tc := range []struct {
		b       []byte
		initial uint16
		want    uint16
	}{
		// RFC 1071 section 3: the sum is 0xddf2, so the checksum is 0x220d.
		{[]byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}, 0, 0x220d},
		{nil, 0, 0xffff},
		{[]byte{0xff, 0xff}, 0, 0x0000},
		{[]byte{0x01}, 0, 0xfeff},
		{[]byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}, 0x1234, ^uint16(0xddf2 + 0x1234)},
		// IPv4 header example (checksum field zeroed): checksum 0xb861.
		{[]byte{0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
			0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7}, 0, 0xb861},
	} {
		if got := Checksum(tc.b, tc.initial); got != tc.want {
			t.Errorf("Checksum(% x, %#x) = %#04x, want %#04x", tc.b, tc.initial, got, tc.want)
		}
	}
	// Against the reference and the other implementations on random data.
	r := rand.New(rand.NewPCG(9, 10))
	for range 1000 {
		b := randBuf(r, r.IntN(3000))
		init := uint16(r.Uint32())
		if got, want := Checksum(b, init), ^refSum(b, init); got != want {
			t.Fatalf("Checksum(len %d, %#x) = %#04x, want %#04x", len(b), init, got, want)
		}
		// tun.Checksum returns the sum, not its complement.
		if got, ts := Checksum(b, init), ^tun.Checksum(b, init); got != ts {
			t.Fatalf("Checksum(len %d, %#x) = %#04x, tailscale %#04x", len(b), init, got, ts)
		}
	}
}

func FuzzCopySum(f *testing.F) {
	f.Add([]byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}, uint64(0), uint8(0))
	f.Add(bytes.Repeat([]byte{0xff}, 300), ^uint64(0), uint8(5))
	f.Add(make([]byte, 129), uint64(0xffff), uint8(63))
	f.Fuzz(func(t *testing.T, data []byte, acc uint64, off uint8) {
		o := int(off % 64)
		buf := make([]byte, o+len(data))
		copy(buf[o:], data)
		r := rand.New(rand.NewPCG(uint64(len(data)), acc))
		for _, im := range csumImpls() {
			check(t, r, im, buf, o, len(data), acc)
		}
	})
}

var benchSink uint64

func BenchmarkCsum(b *testing.B) {
	for _, size := range []int{64, 1448, 8948, 65536} {
		r := rand.New(rand.NewPCG(11, uint64(size)))
		src := randBuf(r, size)
		dst := make([]byte, size)
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			run := func(name string, f func()) {
				b.Run(name, func(b *testing.B) {
					b.SetBytes(int64(size))
					b.ReportAllocs()
					for b.Loop() {
						f()
					}
				})
			}
			run("copysum", func() { benchSink += copySum(dst, src, 0) })
			run("sum", func() { benchSink += sum(src, 0) })
			run("generic-copysum", func() { benchSink += copySumGeneric(dst, src, 0) })
			if cpu.X86.HasAVX2 {
				// The SSE2 fallback, for comparison on this machine.
				run("sse2-copysum", func() { benchSink += copySumSSE2(dst, src, 0) })
			}
			run("tailscale-copy+csum", func() {
				copy(dst, src)
				benchSink += uint64(tun.Checksum(dst, 0))
			})
			run("gvisor-copy+csum", func() {
				copy(dst, src)
				benchSink += uint64(gvisorcsum.Checksum(dst, 0))
			})
		})
	}
}
