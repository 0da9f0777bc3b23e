package chachapoly

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

func init() {
	if useAVX512 {
		updates = append(updates, update{"vector", updateVector})
	}
}

// updateVector is updatePadded with the vector code taking every whole
// group of 8 blocks, however few.
func updateVector(p *poly, msg []byte) {
	n := len(msg) &^ 127
	if n > 0 {
		p.blocksVec(msg[:n])
	}
	p.updateScalar(msg[n:])
}

// TestPolyVector compares the vector code with the scalar code on the
// state h itself (reduced mod p), from the extreme states h may enter with:
// 0, p - 1, p, 2^130 + 2^128 and 2^131 - 1.
func TestPolyVector(t *testing.T) {
	if !useAVX512 {
		t.Skip("no AVX-512 IFMA")
	}
	const m = 1<<64 - 1
	entries := [][3]uint64{{0, 0, 0}, {m - 5, m, 3}, {m - 4, m, 3}, {0, 0, 5}, {m, m, 7}}
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{128, 256, 384, 1024, 1408, 8192, 65536} {
		for _, fillMsg := range []func([]byte){
			func(b []byte) { fill(rng, b) },
			func(b []byte) { copy(b, bytes.Repeat([]byte{0xff}, len(b))) },
			func([]byte) {},
		} {
			msg := make([]byte, n)
			fillMsg(msg)
			for _, key := range vectorKeys(rng) {
				for _, h := range entries {
					var vec, sca poly
					vec.init(&key)
					vec.h = h
					sca = vec
					vec.blocksVec(msg)
					sca.blocks(msg)
					got := fmt.Sprint(reduce(vec.h[0], vec.h[1], vec.h[2]))
					if w := fmt.Sprint(reduce(sca.h[0], sca.h[1], sca.h[2])); got != w {
						t.Fatalf("%d bytes %x.. key %x h %x: vector %s, scalar %s", n, msg[:4], key, h, got, w)
					}
					if vec.h[2] > 7 {
						t.Fatalf("h %x not below 2^131", vec.h)
					}
				}
			}
		}
	}
}

// vectorKeys: a random key, r at its clamped maximum, and r = 1.
func vectorKeys(rng *rand.Rand) [][32]byte {
	keys := make([][32]byte, 3)
	fill(rng, keys[0][:])
	copy(keys[1][:], bytes.Repeat([]byte{0xff}, 32))
	keys[2][0] = 1
	return keys
}

// BenchmarkPolyCrossover: one message of a few blocks, in the scalar code
// or in the vector code with its powers of r, for vecMinBlocks.
func BenchmarkPolyCrossover(b *testing.B) {
	if !useAVX512 {
		b.Skip("no AVX-512 IFMA")
	}
	var key [32]byte
	fill(rand.New(rand.NewPCG(9, 10)), key[:])
	var tag [16]byte
	for _, blocks := range []int{8, 16, 24, 32} {
		msg := make([]byte, 16*blocks)
		b.Run(fmt.Sprintf("%d/scalar", blocks), func(b *testing.B) {
			b.SetBytes(int64(len(msg)))
			for b.Loop() {
				var p poly
				p.init(&key)
				p.updateScalar(msg)
				p.sum(&tag)
			}
		})
		b.Run(fmt.Sprintf("%d/vector", blocks), func(b *testing.B) {
			b.SetBytes(int64(len(msg)))
			for b.Loop() {
				var p poly
				p.init(&key)
				updateVector(&p, msg)
				p.sum(&tag)
			}
		})
	}
}
