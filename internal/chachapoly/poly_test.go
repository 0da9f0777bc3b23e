package chachapoly

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"testing"

	"golang.org/x/crypto/chacha20"
	"golang.org/x/crypto/chacha20poly1305"
	"golang.org/x/crypto/poly1305" //nolint:staticcheck // the reference
)

// update is one way to absorb a piece: the dispatch, the scalar code only,
// and on CPUs with AVX-512 the vector code on every whole group of 8 blocks
// (poly_amd64_test.go).
type update struct {
	name string
	f    func(p *poly, msg []byte)
}

var updates = []update{
	{"dispatch", (*poly).updatePadded},
	{"scalar", (*poly).updateScalar},
}

// padded returns the pieces, each zero-padded to a multiple of 16 bytes,
// one after the other: what the AEAD hands Poly1305.
func padded(pieces [][]byte) []byte {
	var m []byte
	for _, p := range pieces {
		m = append(m, p...)
		m = append(m, make([]byte, -len(p)&15)...)
	}
	return m
}

// want is x/crypto's tag of the padded pieces.
func want(key *[32]byte, pieces [][]byte) [16]byte {
	var tag [16]byte
	poly1305.Sum(&tag, padded(pieces), key)
	return tag
}

// tagOf is our tag of the pieces, one updatePadded (or u) call each.
func tagOf(u update, key *[32]byte, pieces [][]byte) [16]byte {
	var p poly
	p.init(key)
	for _, m := range pieces {
		u.f(&p, m)
	}
	var tag [16]byte
	p.sum(&tag)
	return tag
}

// split cuts msg into n pieces at random points.
func split(rng *rand.Rand, msg []byte, n int) [][]byte {
	var pieces [][]byte
	for ; n > 1; n-- {
		i := rng.IntN(len(msg) + 1)
		pieces = append(pieces, msg[:i])
		msg = msg[i:]
	}
	return append(pieces, msg)
}

// check compares every update with x/crypto on the pieces.
func check(t *testing.T, key *[32]byte, pieces [][]byte) {
	t.Helper()
	w := want(key, pieces)
	for _, u := range updates {
		if got := tagOf(u, key, pieces); got != w {
			lens := make([]int, len(pieces))
			for i, p := range pieces {
				lens[i] = len(p)
			}
			t.Fatalf("%s: pieces %v key %x: tag %x, want %x", u.name, lens, *key, got, w)
		}
	}
}

func lengths() []int {
	var ls []int
	for n := 0; n <= 2200; n++ {
		ls = append(ls, n)
	}
	return append(ls, 4096, 65536)
}

// TestPolyLengths: every length 0..2200, 4096 and 65536, random keys and
// bytes, in 1 to 3 pieces.
func TestPolyLengths(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range lengths() {
		var key [32]byte
		msg := make([]byte, n)
		fill(rng, key[:])
		fill(rng, msg)
		check(t, &key, split(rng, msg, 1+n%3))
	}
}

// TestPolyExtremes: r at its clamped maximum and s = 2^128-1, and zero
// keys, with messages of all 0xff (h near p and the limbs at their bounds)
// and all zeros.
func TestPolyExtremes(t *testing.T) {
	var keys [3][32]byte
	for i := range 32 {
		keys[0][i] = 0xff
	}
	for i := 16; i < 32; i++ {
		keys[2][i] = 0xff // r = 0
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range lengths() {
		ones := bytes.Repeat([]byte{0xff}, n)
		zeros := make([]byte, n)
		for _, key := range keys {
			check(t, &key, [][]byte{ones})
			check(t, &key, [][]byte{zeros})
			check(t, &key, split(rng, ones, 3))
		}
	}
}

// TestPolyRFC8439 checks known answers: the example of §2.5.2 (whose last
// block is partial: it is added without 2^128 by hand), the vectors of
// appendix A.3 whose messages are whole blocks, and the Poly1305 input of
// the AEAD example of §2.8.2.
func TestPolyRFC8439(t *testing.T) {
	t.Run("2.5.2", func(t *testing.T) {
		key := unhex(t, "85d6be7857556d337f4452fe42d506a80103808afb0db2fd4abff6af4149f51b")
		msg := []byte("Cryptographic Forum Research Group")
		var p poly
		p.init((*[32]byte)(key))
		p.updatePadded(msg[:32])
		p.h[0] += 0x01_70_75 // "up" and its 0x01, no 2^128
		p.h[0], p.h[1], p.h[2] = mulr(p.h[0], p.h[1], p.h[2], p.r[0], p.r[1])
		var tag [16]byte
		p.sum(&tag)
		if w := "a8061dc1305136c6c22b8baf0c0127a9"; hex.EncodeToString(tag[:]) != w {
			t.Errorf("tag %x, want %s", tag, w)
		}
	})
	for _, v := range []struct{ name, key, msg, tag string }{
		{"A.3#1", "", zeros(64), zeros(16)},
		{"A.3#5", "02" + zeros(31), ffs(16), "03" + zeros(15)},
		{"A.3#6", "02" + zeros(15) + ffs(16), "02" + zeros(15), "03" + zeros(15)},
		{"A.3#7", "01" + zeros(31), ffs(16) + "f0" + ffs(15) + "11" + zeros(15), "05" + zeros(15)},
		{"A.3#8", "01" + zeros(31), ffs(16) + "fb" + rep("fe", 15) + rep("01", 16), zeros(16)},
		{"A.3#9", "02" + zeros(31), "fd" + ffs(15), "fa" + ffs(15)},
		{"A.3#10", "01" + zeros(7) + "04" + zeros(23),
			"e33594d7505e43b9" + zeros(8) + "3394d7505e4379cd01" + zeros(7) + zeros(16) + "01" + zeros(15),
			"14" + zeros(7) + "55" + zeros(7)},
		{"A.3#11", "01" + zeros(7) + "04" + zeros(23),
			"e33594d7505e43b9" + zeros(8) + "3394d7505e4379cd01" + zeros(7) + zeros(16),
			"13" + zeros(15)},
	} {
		t.Run(v.name, func(t *testing.T) {
			key := (*[32]byte)(append(unhex(t, v.key), make([]byte, 32-len(v.key)/2)...))
			for _, u := range updates {
				if tag := tagOf(u, key, [][]byte{unhex(t, v.msg)}); hex.EncodeToString(tag[:]) != v.tag {
					t.Errorf("%s: tag %x, want %s", u.name, tag, v.tag)
				}
			}
		})
	}
	t.Run("2.8.2", func(t *testing.T) {
		key := unhex(t, "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f")
		nonce := unhex(t, "070000004041424344454647")
		ad := unhex(t, "50515253c0c1c2c3c4c5c6c7")
		pt := []byte("Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.")
		const tag = "1ae10b594f09e26a7e902ecbd0600691"
		aead, _ := chacha20poly1305.New(key)
		sealed := aead.Seal(nil, nonce, pt, ad)
		ct := sealed[:len(pt)]
		if got := hex.EncodeToString(sealed[len(pt):]); got != tag {
			t.Fatalf("x/crypto's tag %s, want %s", got, tag)
		}
		var otk [32]byte // §2.6: the first 32 bytes of block 0
		c, _ := chacha20.NewUnauthenticatedCipher(key, nonce)
		c.XORKeyStream(otk[:], otk[:])
		lens := binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, uint64(len(ad))), uint64(len(ct)))
		for _, u := range updates {
			if got := tagOf(u, &otk, [][]byte{ad, ct, lens}); hex.EncodeToString(got[:]) != tag {
				t.Errorf("%s: tag %x, want %s", u.name, got, tag)
			}
		}
	})
}

// TestPolyAllocs: the state lives on the stack.
func TestPolyAllocs(t *testing.T) {
	var key [32]byte
	msg := make([]byte, 1500)
	var tag [16]byte
	if n := testing.AllocsPerRun(10, func() {
		var p poly
		p.init(&key)
		p.updatePadded(msg[:13])
		p.updatePadded(msg[13:])
		p.updatePadded(msg[:16])
		p.sum(&tag)
	}); n != 0 {
		t.Errorf("%v allocations, want 0", n)
	}
}

// FuzzPoly compares every update with x/crypto on the message cut into 1
// to 3 pieces at points drawn from split.
func FuzzPoly(f *testing.F) {
	f.Add(make([]byte, 32), []byte("abc"), uint64(0))
	f.Add(bytes.Repeat([]byte{0xff}, 32), bytes.Repeat([]byte{0xff}, 300), uint64(7<<32|5))
	f.Add(bytes.Repeat([]byte{0x5a}, 32), bytes.Repeat([]byte{0xa5}, 2000), uint64(1500<<32|40<<2|2))
	f.Fuzz(func(t *testing.T, key, msg []byte, split uint64) {
		var k [32]byte
		copy(k[:], key)
		pieces := [][]byte{msg}
		if n := split % 3; n > 0 {
			i := int(split>>2) % (len(msg) + 1)
			pieces = [][]byte{msg[:i], msg[i:]}
			if n > 1 {
				j := i + int(split>>32)%(len(msg)-i+1)
				pieces = [][]byte{msg[:i], msg[i:j], msg[j:]}
			}
		}
		check(t, &k, pieces)
	})
}

// BenchmarkPoly: the tag of one message, ours against x/crypto's.
func BenchmarkPoly(b *testing.B) {
	var key [32]byte
	fill(rand.New(rand.NewPCG(5, 6)), key[:])
	for _, n := range []int{64, 1440, 8192, 65536} {
		msg := make([]byte, n)
		var tag [16]byte
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.Run("ours", func(b *testing.B) {
				b.SetBytes(int64(n))
				for b.Loop() {
					var p poly
					p.init(&key)
					p.updatePadded(msg)
					p.sum(&tag)
				}
			})
			b.Run("x-crypto", func(b *testing.B) {
				b.SetBytes(int64(n))
				for b.Loop() {
					poly1305.Sum(&tag, msg, &key)
				}
			})
		})
	}
}

func fill(rng *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func rep(s string, n int) string { return string(bytes.Repeat([]byte(s), n)) }
func zeros(n int) string         { return rep("00", n) }
func ffs(n int) string           { return rep("ff", n) }
