package chachapoly

import (
	"bytes"
	"crypto/cipher"
	"encoding/hex"
	"math/rand/v2"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"testing"

	"golang.org/x/crypto/chacha20poly1305"
)

// pair returns New's AEAD and x/crypto's for one random key; it skips
// where New is x/crypto's.
func pair(t testing.TB, rng *rand.Rand) (ours, ref cipher.AEAD) {
	if !useAVX512 {
		t.Skip("no AVX-512 (F, VL, IFMA) here: New is x/crypto's")
	}
	key := make([]byte, KeySize)
	fill(rng, key)
	ours, err := New(key)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ = chacha20poly1305.New(key)
	return ours, ref
}

// TestRFC8439 is the AEAD example of RFC 8439 §2.8.2.
func TestRFC8439(t *testing.T) {
	key, _ := hex.DecodeString("808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f")
	nonce, _ := hex.DecodeString("070000004041424344454647")
	ad, _ := hex.DecodeString("50515253c0c1c2c3c4c5c6c7")
	plain := []byte("Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.")
	a, err := New(key)
	if err != nil {
		t.Fatal(err)
	}
	out := a.Seal(nil, nonce, plain, ad)
	if got, want := hex.EncodeToString(out[:16]), "d31a8d34648e60db7b86afbc53ef7ec2"; got != want {
		t.Errorf("ciphertext starts %s, want %s", got, want)
	}
	if got, want := hex.EncodeToString(out[len(plain):]), "1ae10b594f09e26a7e902ecbd0600691"; got != want {
		t.Errorf("tag %s, want %s", got, want)
	}
	back, err := a.Open(nil, nonce, out, ad)
	if err != nil || !bytes.Equal(back, plain) {
		t.Errorf("Open: %q, %v", back, err)
	}
}

// TestAgainstXCrypto seals and opens every length to 2,200 bytes, and
// longer ones, with several lengths of additional data, into dirty
// buffers and in place, and wants x/crypto's bytes.
func TestAgainstXCrypto(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ours, ref := pair(t, rng)
	lengths := []int{4095, 4096, 16384, 65535, 65536}
	for n := 0; n <= 2200; n++ {
		lengths = append(lengths, n)
	}
	nonce := make([]byte, NonceSize)
	for i, n := range lengths {
		fill(rng, nonce)
		ad := make([]byte, []int{0, 1, 12, 16, 33}[i%5])
		fill(rng, ad)
		plain := make([]byte, n)
		fill(rng, plain)
		want := ref.Seal(nil, nonce, plain, ad)

		dirty := make([]byte, 3, 3+n+Overhead+37)
		fill(rng, dirty[:cap(dirty)])
		got := ours.Seal(dirty, nonce, plain, ad)
		if !bytes.Equal(got[3:], want) || !bytes.Equal(got[:3], dirty) {
			t.Fatalf("len %d ad %d: Seal differs from x/crypto's", n, len(ad))
		}
		inPlace := append(make([]byte, 0, n+Overhead), plain...)
		if got := ours.Seal(inPlace[:0], nonce, inPlace, ad); !bytes.Equal(got, want) {
			t.Fatalf("len %d: Seal in place differs", n)
		}
		opened, err := ours.Open(inPlace[:0], nonce, want, ad)
		if err != nil || !bytes.Equal(opened, plain) {
			t.Fatalf("len %d: Open: %v", n, err)
		}
		if n > 0 {
			copy(inPlace, want)
			if back, err := ours.Open(inPlace[:0], nonce, inPlace[:n+Overhead], ad); err != nil || !bytes.Equal(back, plain) {
				t.Fatalf("len %d: Open in place: %v", n, err)
			}
		}
	}
}

// TestOpenRefuses flips every bit of a message, its tag and its
// additional data in turn, and truncates it: Open refuses each and
// writes nothing.
func TestOpenRefuses(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	ours, _ := pair(t, rng)
	nonce := make([]byte, NonceSize)
	plain := make([]byte, 300)
	ad := []byte("header")
	fill(rng, plain)
	sealed := ours.Seal(nil, nonce, plain, ad)
	dst := make([]byte, len(sealed))
	try := func(what string, msg, ad []byte) {
		t.Helper()
		fill(rng, dst)
		before := bytes.Clone(dst)
		if _, err := ours.Open(dst[:0], nonce, msg, ad); err == nil {
			t.Fatalf("%s: opened", what)
		}
		if !bytes.Equal(dst, before) {
			t.Fatalf("%s: Open wrote plaintext", what)
		}
	}
	for bit := range 8 * len(sealed) {
		msg := bytes.Clone(sealed)
		msg[bit/8] ^= 1 << (bit % 8)
		try("flipped message bit", msg, ad)
	}
	for bit := range 8 * len(ad) {
		bad := bytes.Clone(ad)
		bad[bit/8] ^= 1 << (bit % 8)
		try("flipped ad bit", sealed, bad)
	}
	for _, n := range []int{0, 1, Overhead - 1, Overhead, len(sealed) - 1} {
		try("truncated", sealed[:n], ad)
	}
}

func TestSealOpenAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	ours, _ := pair(t, rng)
	buf := make([]byte, 1440+Overhead)
	nonce := make([]byte, NonceSize)
	allocs := testing.AllocsPerRun(100, func() {
		sealed := ours.Seal(buf[:0], nonce, buf[:1440], nil)
		if _, err := ours.Open(sealed[:0], nonce, sealed, nil); err != nil {
			panic(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per Seal and Open, want 0", allocs)
	}
}

// FuzzAEAD seals any message with any key, nonce and additional data and
// wants x/crypto's bytes; then opens it, and opens the input as if it
// were a sealed message.
func FuzzAEAD(f *testing.F) {
	f.Add(make([]byte, KeySize), make([]byte, NonceSize), []byte("ad"), []byte("message"))
	f.Fuzz(func(t *testing.T, key, nonce, ad, msg []byte) {
		if !useAVX512 {
			t.Skip("no AVX-512 here")
		}
		if len(key) != KeySize || len(nonce) != NonceSize {
			return
		}
		ours, _ := New(key)
		ref, _ := chacha20poly1305.New(key)
		sealed := ours.Seal(nil, nonce, msg, ad)
		if !bytes.Equal(sealed, ref.Seal(nil, nonce, msg, ad)) {
			t.Fatal("Seal differs from x/crypto's")
		}
		if back, err := ours.Open(nil, nonce, sealed, ad); err != nil || !bytes.Equal(back, msg) {
			t.Fatalf("Open: %v", err)
		}
		got, err := ours.Open(nil, nonce, msg, ad)
		want, wantErr := ref.Open(nil, nonce, msg, ad)
		if (err == nil) != (wantErr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("Open of the input: %v, x/crypto: %v", err, wantErr)
		}
	})
}

// BenchmarkSealOpen seals and opens a packet of each size, this package's
// AEAD and x/crypto's.
func BenchmarkSealOpen(b *testing.B) {
	rng := rand.New(rand.NewPCG(7, 8))
	ours, ref := pair(b, rng)
	for _, impl := range []struct {
		name string
		a    cipher.AEAD
	}{{"chachapoly", ours}, {"xcrypto", ref}} {
		for _, n := range []int{64, 1440, 8192, 65536} {
			buf := make([]byte, n+Overhead)
			nonce := make([]byte, NonceSize)
			b.Run(impl.name+"/seal/"+strconv.Itoa(n), func(b *testing.B) {
				b.SetBytes(int64(n))
				for b.Loop() {
					impl.a.Seal(buf[:0], nonce, buf[:n], nil)
				}
			})
			sealed := impl.a.Seal(nil, nonce, buf[:n], nil)
			b.Run(impl.name+"/open/"+strconv.Itoa(n), func(b *testing.B) {
				b.SetBytes(int64(n))
				for b.Loop() {
					if _, err := impl.a.Open(buf[:0], nonce, sealed, nil); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestGODEBUGOff runs TestRFC8439 again in a child with
// GODEBUG=cpu.avx512ifma=off, where New must return x/crypto's AEAD.
func TestGODEBUGOff(t *testing.T) {
	if os.Getenv("CHACHAPOLY_CHILD") != "" {
		if useAVX512 {
			t.Fatal("GODEBUG=cpu.avx512ifma=off left the AVX-512 code on")
		}
		a, _ := New(make([]byte, KeySize))
		if pkg := reflect.TypeOf(a).Elem().PkgPath(); pkg != "golang.org/x/crypto/chacha20poly1305" {
			t.Fatalf("New returned an AEAD of %s, not x/crypto's", pkg)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^(TestGODEBUGOff|TestRFC8439)$", "-test.v")
	cmd.Env = append(os.Environ(), "CHACHAPOLY_CHILD=1", "GODEBUG=cpu.avx512ifma=off")
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: TestRFC8439")) {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// TestShiftedOverlapPanics: an output that overlaps the input other than
// in place is refused, as cipher.AEAD asks (in place is allowed: see
// TestAgainstXCrypto).
func TestShiftedOverlapPanics(t *testing.T) {
	ours, _ := pair(t, rand.New(rand.NewPCG(11, 12)))
	nonce := make([]byte, NonceSize)
	buf := make([]byte, 200+Overhead+1)
	sealed := ours.Seal(nil, nonce, buf[:200], nil)
	for name, f := range map[string]func(){
		"Seal": func() { ours.Seal(buf[1:1], nonce, buf[:200], nil) },
		"Open": func() { copy(buf, sealed); ours.Open(buf[1:1], nonce, buf[:len(sealed)], nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s into the input shifted by a byte did not panic", name)
				}
			}()
			f()
		}()
	}
}
