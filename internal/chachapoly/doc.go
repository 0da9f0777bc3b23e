// Package chachapoly is the AEAD of RFC 8439, ChaCha20-Poly1305, for
// WireGuard's data path. On amd64 CPUs with AVX-512 F, VL and IFMA (Intel
// from Ice Lake, AMD from Zen 4) its ChaCha20 makes up to 32 blocks a pass
// in ZMM registers, its Poly1305 takes 8 message blocks a step in 52-bit
// multiply-adds, and a message of up to 1,983 bytes is ciphered in the
// pass that makes its one-time key: about twice the speed of
// golang.org/x/crypto's on a 1,440-byte packet (BenchmarkSealOpen).
// Elsewhere, or with GODEBUG=cpu.avx512ifma=off, New returns x/crypto's
// implementation. Both give the same bytes: the tests compare them on
// every length to 2,200 bytes and longer ones, and the fuzz targets on
// any input.
package chachapoly
