package segment

import (
	"encoding/binary"
	"math/bits"
)

// The Internet checksum (RFC 1071) is computed here on little-endian words:
// one's complement addition is byte-order independent, so summing the data
// as little-endian 16-, 32- or 64-bit words and swapping the two bytes of
// the folded result gives the big-endian checksum. Partial sums are carried
// in a uint64 accumulator; any two accumulators of data that starts at an
// even offset can be added with addAcc.

// addAcc adds two accumulators with end-around carry.
func addAcc(a, b uint64) uint64 {
	s, c := bits.Add64(a, b, 0)
	return s + c
}

// fold reduces an accumulator to the 16-bit one's complement sum in network
// byte order (not complemented).
func fold(acc uint64) uint16 {
	acc = (acc >> 32) + (acc & 0xffffffff)
	acc = (acc >> 32) + (acc & 0xffffffff)
	acc = (acc >> 16) + (acc & 0xffff)
	acc = (acc >> 16) + (acc & 0xffff)
	return bits.ReverseBytes16(uint16(acc))
}

// beAcc turns a network-order 16-bit value into an accumulator.
func beAcc(v uint16) uint64 { return uint64(bits.ReverseBytes16(v)) }

// sumGeneric returns acc plus the one's complement sum of b.
func sumGeneric(b []byte, acc uint64) uint64 {
	var c uint64
	for len(b) >= 32 {
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(b), c)
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(b[8:]), c)
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(b[16:]), c)
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(b[24:]), c)
		b = b[32:]
	}
	for len(b) >= 8 {
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(b), c)
		b = b[8:]
	}
	return addAcc(addAcc(acc, c), sumTail(b))
}

// sumTail sums fewer than 8 bytes; an odd last byte is the high byte of a
// network-order word, which is the low byte of a little-endian one.
func sumTail(b []byte) uint64 {
	var t uint64
	if len(b) >= 4 {
		t += uint64(binary.LittleEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		t += uint64(binary.LittleEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		t += uint64(b[0])
	}
	return t
}

// copySumGeneric copies src into dst (len(dst) >= len(src)) and returns acc
// plus the one's complement sum of src, reading each byte once.
func copySumGeneric(dst, src []byte, acc uint64) uint64 {
	dst = dst[:len(src)]
	var c uint64
	for len(src) >= 32 {
		w0 := binary.LittleEndian.Uint64(src)
		w1 := binary.LittleEndian.Uint64(src[8:])
		w2 := binary.LittleEndian.Uint64(src[16:])
		w3 := binary.LittleEndian.Uint64(src[24:])
		binary.LittleEndian.PutUint64(dst, w0)
		binary.LittleEndian.PutUint64(dst[8:], w1)
		binary.LittleEndian.PutUint64(dst[16:], w2)
		binary.LittleEndian.PutUint64(dst[24:], w3)
		acc, c = bits.Add64(acc, w0, c)
		acc, c = bits.Add64(acc, w1, c)
		acc, c = bits.Add64(acc, w2, c)
		acc, c = bits.Add64(acc, w3, c)
		src, dst = src[32:], dst[32:]
	}
	for len(src) >= 8 {
		w := binary.LittleEndian.Uint64(src)
		binary.LittleEndian.PutUint64(dst, w)
		acc, c = bits.Add64(acc, w, c)
		src, dst = src[8:], dst[8:]
	}
	copy(dst, src)
	return addAcc(addAcc(acc, c), sumTail(src))
}
