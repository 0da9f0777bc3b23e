package chachapoly

// chachaXOR sets dst[:len(src)] to src XOR the ChaCha20 keystream of key and
// nonce from block counter on (RFC 8439 §2.4). dst and src are the same slice
// or do not overlap; len(dst) >= len(src); counter + the blocks used must not
// pass 2^32 (the caller's packets are < 64 KiB from counter 0 or 1). Only
// when useAVX512.
func chachaXOR(dst, src []byte, key *[8]uint32, nonce *[3]uint32, counter uint32) {
	if len(src) == 0 {
		return
	}
	if len(dst) < len(src) {
		panic("chachapoly: output smaller than input")
	}
	state := [16]uint32{
		0x61707865, 0x3320646e, 0x79622d32, 0x6b206574, // "expand 32-byte k"
		key[0], key[1], key[2], key[3], key[4], key[5], key[6], key[7],
		counter, nonce[0], nonce[1], nonce[2],
	}
	xorKeyStream(&dst[0], &src[0], len(src), &state)
}

// xorKeyStream sets dst[:n] to src[:n] XOR the keystream from the block
// state (RFC 8439 §2.3: constants, key, counter, nonce), n > 0. It steps the
// counter in state as it goes.
//
//go:noescape
func xorKeyStream(dst, src *byte, n int, state *[16]uint32)
