package chachapoly

import (
	"crypto/cipher"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"unsafe"
)

// aead is ChaCha20-Poly1305 on the AVX-512 ChaCha20 and Poly1305.
type aead struct {
	key [8]uint32
}

// newAVX512 returns the AVX-512 AEAD of key, or nil when the CPU lacks
// AVX-512 or the key is not KeySize bytes (x/crypto's New then says why).
func newAVX512(key []byte) cipher.AEAD {
	if !useAVX512 || len(key) != KeySize {
		return nil
	}
	a := new(aead)
	for i := range a.key {
		a.key[i] = binary.LittleEndian.Uint32(key[4*i:])
	}
	return a
}

// maxPlaintext is the most a message may hold: the 32-bit block counter
// from block 1 on.
const maxPlaintext = (1<<32 - 1) * 64

var errOpen = errors.New("chachapoly: message authentication failed")

func (*aead) NonceSize() int { return NonceSize }

func (*aead) Overhead() int { return Overhead }

func (a *aead) Seal(dst, nonce, plaintext, additionalData []byte) []byte {
	n := loadNonce(nonce)
	if uint64(len(plaintext)) > maxPlaintext {
		panic("chachapoly: plaintext too large")
	}
	ret, out := grow(dst, len(plaintext)+Overhead, plaintext)
	ct := out[:len(plaintext)]
	var block [64]byte // the keystream of block 0: the one-time key
	if len(plaintext) > 0 && len(plaintext) <= maxKeyed {
		chachaXORKeyed(ct, plaintext, &block, &a.key, &n, 0)
	} else {
		chachaXOR(block[:], block[:], &a.key, &n, 0)
		chachaXOR(ct, plaintext, &a.key, &n, 1)
	}
	tag(&block, (*[Overhead]byte)(out[len(plaintext):]), ct, additionalData)
	return ret
}

// Open checks the tag before it writes: a message up to maxKeyed bytes is
// deciphered in the pass that makes its one-time key, into a buffer of its
// own, and copied out once the tag is found valid; a longer one makes the
// key alone first.
func (a *aead) Open(dst, nonce, ciphertext, additionalData []byte) ([]byte, error) {
	n := loadNonce(nonce)
	if len(ciphertext) < Overhead || uint64(len(ciphertext)) > maxPlaintext+Overhead {
		return nil, errOpen
	}
	ct, sent := ciphertext[:len(ciphertext)-Overhead], ciphertext[len(ciphertext)-Overhead:]
	var block [64]byte
	if len(ct) > 0 && len(ct) <= maxKeyed {
		var plain [maxKeyed]byte
		chachaXORKeyed(plain[:len(ct)], ct, &block, &a.key, &n, 0)
		if !valid(&block, sent, ct, additionalData) {
			clear(plain[:len(ct)])
			return nil, errOpen
		}
		ret, out := grow(dst, len(ct), ct)
		copy(out, plain[:len(ct)])
		return ret, nil
	}
	chachaXOR(block[:], block[:], &a.key, &n, 0)
	if !valid(&block, sent, ct, additionalData) {
		return nil, errOpen
	}
	ret, out := grow(dst, len(ct), ct)
	chachaXOR(out, ct, &a.key, &n, 1)
	return ret, nil
}

// valid reports, in constant time, whether sent is the tag of ct and ad.
func valid(block *[64]byte, sent, ct, ad []byte) bool {
	var want [Overhead]byte
	tag(block, &want, ct, ad)
	return subtle.ConstantTimeCompare(want[:], sent) == 1
}

// tag computes the Poly1305 tag of RFC 8439 §2.8 over ad and ct, with the
// one-time key in the first half of block.
func tag(block *[64]byte, tag *[Overhead]byte, ct, ad []byte) {
	var p poly
	p.init((*[32]byte)(block[:32]))
	p.updatePadded(ad)
	p.updatePadded(ct)
	var lens [16]byte
	binary.LittleEndian.PutUint64(lens[:8], uint64(len(ad)))
	binary.LittleEndian.PutUint64(lens[8:], uint64(len(ct)))
	p.updatePadded(lens[:])
	p.sum(tag)
}

func loadNonce(nonce []byte) [3]uint32 {
	if len(nonce) != NonceSize {
		panic("chachapoly: bad nonce length")
	}
	return [3]uint32{
		binary.LittleEndian.Uint32(nonce),
		binary.LittleEndian.Uint32(nonce[4:]),
		binary.LittleEndian.Uint32(nonce[8:]),
	}
}

// grow extends in by n bytes, in its capacity if it has room, and returns
// the whole and the n new bytes (whatever they held: the caller writes
// them all). It panics if the new bytes overlap src other than exactly
// from its first byte (in place), as cipher.AEAD asks.
func grow(in []byte, n int, src []byte) (whole, tail []byte) {
	if total := len(in) + n; cap(in) >= total {
		whole = in[:total]
	} else {
		whole = make([]byte, total)
		copy(whole, in)
	}
	if tail = whole[len(in):]; inexactOverlap(tail, src) {
		panic("chachapoly: invalid buffer overlap")
	}
	return whole, tail
}

// inexactOverlap reports whether x and y share memory other than from the
// same first byte (in-place use is allowed, a shifted overlap is not).
func inexactOverlap(x, y []byte) bool {
	if len(x) == 0 || len(y) == 0 || &x[0] == &y[0] {
		return false
	}
	xs, ys := uintptr(unsafe.Pointer(&x[0])), uintptr(unsafe.Pointer(&y[0]))
	return xs < ys+uintptr(len(y)) && ys < xs+uintptr(len(x))
}
