package chachapoly

import (
	"encoding/binary"
	"math/bits"
)

// Poly1305 (RFC 8439 §2.5) as the AEAD of §2.8 uses it: every block it
// reads is a whole 16-byte block, since the AEAD pads the additional data
// and the ciphertext with zeros to a multiple of 16 bytes and ends with the
// 16-byte lengths block. Each block m is read as a little-endian number,
// 2^128 is added, and the accumulator becomes h = (h + m + 2^128)·r mod p,
// p = 2^130 - 5; the tag is (h mod p) + s mod 2^128.
//
// The scalar code keeps h in three 64-bit words and only partially reduced:
// h < 2^131 between blocks (so h[2] <= 7), which sum reduces fully.

// poly is the state of one Poly1305 computation. It holds key material and
// is meant to live on the caller's stack.
type poly struct {
	h [3]uint64 // the accumulator, little-endian words, h < 2^131
	r [2]uint64 // r clamped: r0, r1 < 2^60
	s [2]uint64 // s, added to the tag

	// vec holds the powers of r the vector code multiplies by once
	// vecReady; it is empty where there is no vector code.
	vecReady bool
	vec      vecPowers
}

// vecMinBlocks is the fewest blocks of one updatePadded call that go to the
// vector code: below it, computing the powers of r costs more than the
// vector code saves (BenchmarkPolyCrossover).
const vecMinBlocks = 16

// init sets p up for the one-time key: r is the first half clamped
// (RFC 8439 §2.5), s the second; h = 0.
func (p *poly) init(key *[32]byte) {
	p.h = [3]uint64{}
	p.vecReady = false
	p.r[0] = binary.LittleEndian.Uint64(key[0:8]) & 0x0ffffffc0fffffff
	p.r[1] = binary.LittleEndian.Uint64(key[8:16]) & 0x0ffffffc0ffffffc
	p.s[0] = binary.LittleEndian.Uint64(key[16:24])
	p.s[1] = binary.LittleEndian.Uint64(key[24:32])
}

// updatePadded absorbs msg zero-padded to a multiple of 16 bytes. Where the
// vector code runs, it takes the largest multiple of 8 blocks and the
// scalar code the rest.
func (p *poly) updatePadded(msg []byte) {
	if useAVX512 && len(msg) >= vecMinBlocks*16 {
		n := len(msg) &^ (8*16 - 1)
		p.blocksVec(msg[:n])
		msg = msg[n:]
	}
	p.updateScalar(msg)
}

// updateScalar is updatePadded in scalar code only.
func (p *poly) updateScalar(msg []byte) {
	n := len(msg) &^ 15
	p.blocks(msg[:n])
	if n < len(msg) {
		var last [16]byte
		copy(last[:], msg[n:])
		p.blocks(last[:])
	}
}

// blocks absorbs msg, whose length is a multiple of 16, as whole blocks.
func (p *poly) blocks(msg []byte) {
	h0, h1, h2 := p.h[0], p.h[1], p.h[2]
	for ; len(msg) >= 16; msg = msg[16:] {
		// h + m + 2^128 < 2^131 + 2^129 < 2^132, as mulr needs.
		var c uint64
		h0, c = bits.Add64(h0, binary.LittleEndian.Uint64(msg[0:8]), 0)
		h1, c = bits.Add64(h1, binary.LittleEndian.Uint64(msg[8:16]), c)
		h2 += c + 1
		h0, h1, h2 = mulr(h0, h1, h2, p.r[0], p.r[1])
	}
	p.h = [3]uint64{h0, h1, h2}
}

// mulr returns h·r partially reduced mod p, for h < 2^132 (h2 < 16) and
// r < 2^124 (r0, r1 < 2^60).
//
// The product t = h·r < 2^256 fills four words t0..t3. With t = l + 2^130·q,
// l the low 130 bits, 2^130 = 5 (mod p) gives t = l + 5q = l + 4q + q,
// where 4q is t with its low 130 bits cleared, shifted down 128 bits: the
// words (t2 &^ 3, t3). Then q < 2^126 and the result is below
// 2^130 + 5·2^126 < 2^131.
func mulr(h0, h1, h2, r0, r1 uint64) (uint64, uint64, uint64) {
	// The rows h0·r0, h0·r1, (h1 + h2·2^64)·r0 and (h1 + h2·2^64)·r1: the
	// high word of h1·ri is below ri, and adding h2·ri keeps it below
	// 16·ri < 2^64.
	t0h, t0 := bits.Mul64(h0, r0)
	a1, a0 := bits.Mul64(h0, r1)
	b1, b0 := bits.Mul64(h1, r0)
	c1, c0 := bits.Mul64(h1, r1)
	b1 += h2 * r0
	c1 += h2 * r1
	// t < 2^256: nothing carries out of t3.
	t1, c := bits.Add64(t0h, a0, 0)
	t2, c := bits.Add64(a1, c0, c)
	t3 := c1 + c
	t1, c = bits.Add64(t1, b0, 0)
	t2, c = bits.Add64(t2, b1, c)
	t3 += c

	// l + 4q
	h0, c = bits.Add64(t0, t2&^3, 0)
	h1, c = bits.Add64(t1, t3, c)
	h2 = t2&3 + c
	// + q
	h0, c = bits.Add64(h0, t2>>2|t3<<62, 0)
	h1, c = bits.Add64(h1, t3>>2, c)
	h2 += c
	return h0, h1, h2
}

// reduce returns h mod p, for h < 2^131, in constant time.
func reduce(h0, h1, h2 uint64) (uint64, uint64, uint64) {
	// Fold the bit at 2^130 (2^130 = 5 mod p): h < 2^130 + 5 < 2p.
	h0, c := bits.Add64(h0, 5*(h2>>2), 0)
	h1, c = bits.Add64(h1, 0, c)
	h2 = h2&3 + c
	// h >= p exactly when g = h + 5 reaches 2^130; then h - p = g - 2^130.
	g0, c := bits.Add64(h0, 5, 0)
	g1, c := bits.Add64(h1, 0, c)
	g2 := h2 + c
	use := -(g2 >> 2) // all ones when h >= p
	h0 = h0&^use | g0&use
	h1 = h1&^use | g1&use
	h2 = h2&^use | g2&3&use
	return h0, h1, h2
}

// sum writes the tag: (h mod p) + s mod 2^128.
func (p *poly) sum(tag *[16]byte) {
	h0, h1, _ := reduce(p.h[0], p.h[1], p.h[2])
	h0, c := bits.Add64(h0, p.s[0], 0)
	h1, _ = bits.Add64(h1, p.s[1], c)
	binary.LittleEndian.PutUint64(tag[0:8], h0)
	binary.LittleEndian.PutUint64(tag[8:16], h1)
}
