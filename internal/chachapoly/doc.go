// Package chachapoly is the AEAD of RFC 8439, ChaCha20-Poly1305, for the
// data path of the project's tunnels: on amd64 CPUs with AVX-512 (F, VL
// and IFMA) its ChaCha20 runs sixteen lanes at once and its Poly1305 eight
// message blocks at once in 52-bit multiply-adds; elsewhere New returns
// golang.org/x/crypto's implementation. Both give the same bytes: the tests
// compare them on every length, and the fuzz target on any input.
package chachapoly
