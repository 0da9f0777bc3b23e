package chachapoly

import "math/bits"

// The vector Poly1305 (poly_amd64.s) runs 8 lanes: lane i accumulates the
// blocks 8j+b(i) of a run of 8k blocks by Horner's rule with r^8, and at the
// end multiplies by r^(8-b(i)), so that block n of the run is multiplied by
// r^(8k-n) as in the serial rule; the sum of the lanes is the new h. The
// lanes hold numbers in radix 2^44, limbs of about 44, 44 and 42 bits,
// whose products IFMA forms 52 bits at a time.

// mask44 keeps a radix-2^44 limb.
const mask44 = 1<<44 - 1

// laneOf[b] is the lane that holds block b of each group of 8: the code
// loads blocks 0-3 and 4-7 into two vectors and takes the low (high) words
// of each block with VPUNPCKLQDQ (VPUNPCKHQDQ), which leaves the blocks in
// the order 0 4 1 5 2 6 3 7.
var laneOf = [8]int{0, 2, 4, 6, 1, 3, 5, 7}

// vecPowers holds the powers of r the vector code multiplies by.
type vecPowers struct {
	// tab[k][laneOf[b]] is limb k of r^(8-b), the power lane laneOf[b]
	// ends with; rows 0-2 are the limbs, rows 3 and 4 are 20 times limbs 1
	// and 2, the factors of the products that wrap past 2^132 = 20 (mod p).
	// Lane 0 holds r^8, which the loop broadcasts.
	tab [5][8]uint64
}

// polyBlocksAVX512 absorbs msg, whose length is a positive multiple of 128,
// into h (radix 2^44, h < 2^131: limbs below 2^44, 2^44 and 2^43), using
// the powers tab. It returns in h the sums of the lanes' limbs, each below
// 2^48: the caller carries them. Requires AVX-512 F and IFMA.
//
//go:noescape
func polyBlocksAVX512(h *[3]uint64, tab *[5][8]uint64, msg []byte)

// blocksVec absorbs msg, whose length is a positive multiple of 128, with
// the vector code.
func (p *poly) blocksVec(msg []byte) {
	if !p.vecReady {
		p.vec.setup(p.r[0], p.r[1])
		p.vecReady = true
	}
	h := radix44(p.h[0], p.h[1], p.h[2])
	polyBlocksAVX512(&h, &p.vec.tab, msg)
	p.h = radix64(h)
}

// setup fills tab with r^1..r^8, seven products of the scalar code; they
// are left below 2^131, as the vector code allows.
func (v *vecPowers) setup(r0, r1 uint64) {
	x0, x1, x2 := r0, r1, uint64(0)
	for k := 1; k <= 8; k++ {
		if k > 1 {
			x0, x1, x2 = mulr(x0, x1, x2, r0, r1)
		}
		l := radix44(x0, x1, x2)
		i := laneOf[8-k]
		v.tab[0][i], v.tab[1][i], v.tab[2][i] = l[0], l[1], l[2]
		v.tab[3][i], v.tab[4][i] = 20*l[1], 20*l[2]
	}
}

// radix44 splits h < 2^131 (h2 < 8) into limbs of 44, 44 and 43 bits.
func radix44(h0, h1, h2 uint64) [3]uint64 {
	return [3]uint64{
		h0 & mask44,
		(h0>>44 | h1<<20) & mask44,
		h1>>24 | h2<<40,
	}
}

// radix64 carries the lane sums l (each below 2^48) and returns them as h
// in 64-bit words, below 2^131.
func radix64(l [3]uint64) [3]uint64 {
	l[1] += l[0] >> 44
	l[2] += l[1] >> 44 // below 2^49
	l[0] &= mask44
	l[1] &= mask44
	h0 := l[0] | l[1]<<44
	h1 := l[1]>>20 | l[2]<<24
	h2 := l[2] >> 40
	// h2 < 2^9: fold the bits from 2^130 up, q = h2>>2 < 2^7, back as 5q
	// (2^130 = 5 mod p), leaving h < 2^130 + 5·2^7.
	h0, c := bits.Add64(h0, 5*(h2>>2), 0)
	h1, c = bits.Add64(h1, 0, c)
	return [3]uint64{h0, h1, h2&3 + c}
}
