package chachapoly

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"testing"

	"golang.org/x/crypto/chacha20"
)

func skipNoAVX512(tb testing.TB) {
	tb.Helper()
	if !useAVX512 {
		tb.Skip("no AVX-512 F, VL and IFMA on this CPU")
	}
}

// words reads key or nonce bytes as little-endian words.
func words(b []byte, w []uint32) {
	for i := range w {
		w[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
}

// chachaXORBytes is chachaXOR with its key and nonce as bytes.
func chachaXORBytes(dst, src, key, nonce []byte, counter uint32) {
	var k [8]uint32
	var n [3]uint32
	words(key, k[:])
	words(nonce, n[:])
	chachaXOR(dst, src, &k, &n, counter)
}

// refXOR is x/crypto's ChaCha20 of src.
func refXOR(tb testing.TB, src, key, nonce []byte, counter uint32) []byte {
	tb.Helper()
	c, err := chacha20.NewUnauthenticatedCipher(key, nonce)
	if err != nil {
		tb.Fatal(err)
	}
	c.SetCounter(counter)
	out := make([]byte, len(src))
	c.XORKeyStream(out, src)
	return out
}

// blocks is the number of 64-byte blocks n bytes use.
func blocks(n int) uint64 { return (uint64(n) + 63) / 64 }

// randCounter is a counter that n bytes from it do not overflow, often near
// the end of the range.
func randCounter(r *rand.Rand, n int) uint32 {
	limit := 1<<32 - blocks(n) // the largest counter allowed
	switch r.IntN(3) {
	case 0:
		return uint32(limit)
	case 1:
		return uint32(r.IntN(2))
	}
	return uint32(r.Uint64N(limit + 1))
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// checkLen compares chachaXOR with x/crypto on n random bytes at random
// alignments, into a separate, longer garbage-filled dst and in place.
func checkLen(t *testing.T, r *rand.Rand, n int) {
	t.Helper()
	key, nonce := randBytes(r, 32), randBytes(r, 12)
	counter := randCounter(r, n)
	srcOff, dstOff := r.IntN(64), r.IntN(64)
	src := randBytes(r, srcOff+n)[srcOff:]
	want := refXOR(t, src, key, nonce, counter)

	const tail = 80
	garbage := randBytes(r, dstOff+n+tail)
	dstBuf := bytes.Clone(garbage)
	dst := dstBuf[dstOff:]
	chachaXORBytes(dst, src, key, nonce, counter)
	if !bytes.Equal(dst[:n], want) {
		t.Fatalf("len %d (src+%d, dst+%d, counter %#x): got %x, want %x", n, srcOff, dstOff, counter, dst[:n], want)
	}
	if !bytes.Equal(dstBuf[:dstOff], garbage[:dstOff]) || !bytes.Equal(dst[n:], garbage[dstOff+n:]) {
		t.Fatalf("len %d: bytes outside dst[:%d] changed", n, n)
	}

	inPlace := bytes.Clone(src)
	chachaXORBytes(inPlace, inPlace, key, nonce, counter)
	if !bytes.Equal(inPlace, want) {
		t.Fatalf("len %d in place (counter %#x): got %x, want %x", n, counter, inPlace, want)
	}
}

func TestChaChaXORLengths(t *testing.T) {
	skipNoAVX512(t)
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n <= 2200; n++ {
		checkLen(t, r, n)
	}
	for _, n := range []int{4095, 4096, 65535, 65536} {
		for range 4 {
			checkLen(t, r, n)
		}
	}
}

func TestChaChaXORAlignments(t *testing.T) {
	skipNoAVX512(t)
	r := rand.New(rand.NewPCG(3, 4))
	for off := 1; off < 64; off++ {
		for _, n := range []int{1, 63, 64, 65, 200, 1023, 1024, 1420, 3000} {
			key, nonce := randBytes(r, 32), randBytes(r, 12)
			buf := randBytes(r, off+n)
			src := buf[off:]
			want := refXOR(t, src, key, nonce, 7)
			chachaXORBytes(src, src, key, nonce, 7)
			if !bytes.Equal(src, want) {
				t.Fatalf("offset %d, len %d: got %x, want %x", off, n, src, want)
			}
		}
	}
}

// TestChaChaXORRFC8439 is the encryption example of RFC 8439 §2.4.2.
func TestChaChaXORRFC8439(t *testing.T) {
	skipNoAVX512(t)
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(i)
	}
	nonce := []byte{0, 0, 0, 0, 0, 0, 0, 0x4a, 0, 0, 0, 0}
	plaintext := []byte("Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.")
	want, _ := hex.DecodeString("" +
		"6e2e359a2568f98041ba0728dd0d6981e97e7aec1d4360c20a27afccfd9fae0b" +
		"f91b65c5524733ab8f593dabcd62b3571639d624e65152ab8f530c359f0861d8" +
		"07ca0dbf500d6a6156a38e088a22b65e52bc514d16ccf806818ce91ab7793736" +
		"5af90bbf74a35be6b40b8eedf2785e42874d")
	got := make([]byte, len(plaintext))
	chachaXORBytes(got, plaintext, key, nonce, 1)
	if !bytes.Equal(got, want) {
		t.Fatalf("got %x, want %x", got, want)
	}
}

func TestChaChaXORShortDst(t *testing.T) {
	skipNoAVX512(t)
	defer func() {
		if recover() == nil {
			t.Fatal("no panic with len(dst) < len(src)")
		}
	}()
	chachaXOR(make([]byte, 63), make([]byte, 64), new([8]uint32), new([3]uint32), 0)
}

func TestChaChaXORAllocs(t *testing.T) {
	skipNoAVX512(t)
	buf := make([]byte, 1420)
	key, nonce := new([8]uint32), new([3]uint32)
	if n := testing.AllocsPerRun(100, func() { chachaXOR(buf, buf, key, nonce, 1) }); n != 0 {
		t.Fatalf("%v allocations per call, want 0", n)
	}
}

func FuzzChaChaXOR(f *testing.F) {
	f.Add(make([]byte, 32), make([]byte, 12), uint32(0), []byte{})
	f.Add(bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 12), uint32(1), make([]byte, 1420))
	f.Add([]byte("k"), []byte("n"), uint32(1<<32-1), make([]byte, 64))
	f.Fuzz(func(t *testing.T, key, nonce []byte, counter uint32, data []byte) {
		skipNoAVX512(t)
		key = append(key, make([]byte, 32)...)[:32]
		nonce = append(nonce, make([]byte, 12)...)[:12]
		if limit := 1<<32 - blocks(len(data)); uint64(counter) > limit {
			counter = uint32(limit)
		}
		want := refXOR(t, data, key, nonce, counter)
		got := make([]byte, len(data))
		chachaXORBytes(got, data, key, nonce, counter)
		if !bytes.Equal(got, want) {
			t.Fatalf("got %x, want %x", got, want)
		}
	})
}

var benchSizes = []int{64, 1420, 8192, 65536}

func BenchmarkChaChaXOR(b *testing.B) {
	skipNoAVX512(b)
	key, nonce := new([8]uint32), new([3]uint32)
	for _, n := range benchSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			buf := make([]byte, n)
			b.SetBytes(int64(n))
			for b.Loop() {
				chachaXOR(buf, buf, key, nonce, 1)
			}
		})
	}
}

// BenchmarkXCryptoChaCha20 is x/crypto's ChaCha20 on the same sizes, a cipher
// per call as per packet.
func BenchmarkXCryptoChaCha20(b *testing.B) {
	key, nonce := make([]byte, 32), make([]byte, 12)
	for _, n := range benchSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			buf := make([]byte, n)
			b.SetBytes(int64(n))
			for b.Loop() {
				c, _ := chacha20.NewUnauthenticatedCipher(key, nonce)
				c.SetCounter(1)
				c.XORKeyStream(buf, buf)
			}
		})
	}
}

// TestChaChaXORKeyed: every length the keyed call takes, into a dirty dst
// (its bytes past the input untouched) and in place, against x/crypto's
// keystream from the counter: the block first, the data after it.
func TestChaChaXORKeyed(t *testing.T) {
	skipNoAVX512(t)
	r := rand.New(rand.NewPCG(9, 10))
	for n := 1; n <= maxKeyed; n++ {
		key, nonce := randBytes(r, 32), randBytes(r, 12)
		var k [8]uint32
		var nn [3]uint32
		words(key, k[:])
		words(nonce, nn[:])
		counter := randCounter(r, 64+n)
		src := randBytes(r, n)
		want := refXOR(t, append(make([]byte, 64), src...), key, nonce, counter)

		var block [64]byte
		dst := randBytes(r, n+37)
		tail := bytes.Clone(dst[n:])
		chachaXORKeyed(dst, src, &block, &k, &nn, counter)
		if !bytes.Equal(block[:], want[:64]) || !bytes.Equal(dst[:n], want[64:]) || !bytes.Equal(dst[n:], tail) {
			t.Fatalf("len %d counter %d: keyed output differs from x/crypto's", n, counter)
		}
		block = [64]byte{}
		chachaXORKeyed(src, src, &block, &k, &nn, counter)
		if !bytes.Equal(block[:], want[:64]) || !bytes.Equal(src, want[64:]) {
			t.Fatalf("len %d: keyed in place differs", n)
		}
	}
}
