package chachapoly

import (
	"crypto/cipher"

	"golang.org/x/crypto/chacha20poly1305"
)

// Sizes of the AEAD's key, nonce and tag, as RFC 8439 has them.
const (
	KeySize   = chacha20poly1305.KeySize
	NonceSize = chacha20poly1305.NonceSize
	Overhead  = chacha20poly1305.Overhead
)

// New returns ChaCha20-Poly1305 with key, which must be KeySize bytes: the
// AVX-512 implementation where the CPU has it, x/crypto's otherwise. Both
// follow cipher.AEAD's contract; Open writes no plaintext unless the tag
// is valid.
func New(key []byte) (cipher.AEAD, error) {
	if a := newAVX512(key); a != nil {
		return a, nil
	}
	return chacha20poly1305.New(key)
}

// Implementation names the code New returns on this machine: "avx512" or
// "x/crypto".
func Implementation() string {
	if useAVX512 {
		return "avx512"
	}
	return "x/crypto"
}
