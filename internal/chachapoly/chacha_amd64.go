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
	state := initialState(key, nonce, counter)
	xorKeyStream(&dst[0], &src[0], len(src), &state, nil)
}

// maxKeyed is the longest input of chachaXORKeyed: with the block before
// it, a pass of fewer than 32 blocks.
const maxKeyed = 32*64 - 64 - 1

// chachaXORKeyed is chachaXOR from counter + 1 that also sets block to the
// keystream block of counter, made in the same pass as the rest (a block on
// its own costs about half a 32-block pass): the AEAD's one-time key with
// its message. 0 < len(src) <= maxKeyed.
func chachaXORKeyed(dst, src []byte, block *[64]byte, key *[8]uint32, nonce *[3]uint32, counter uint32) {
	if len(src) == 0 || len(src) > maxKeyed {
		panic("chachapoly: keyed input out of range")
	}
	if len(dst) < len(src) {
		panic("chachapoly: output smaller than input")
	}
	state := initialState(key, nonce, counter)
	xorKeyStream(&dst[0], &src[0], len(src), &state, &block[0])
}

// initialState is the block state of RFC 8439 §2.3: constants, key,
// counter, nonce.
func initialState(key *[8]uint32, nonce *[3]uint32, counter uint32) [16]uint32 {
	return [16]uint32{
		0x61707865, 0x3320646e, 0x79622d32, 0x6b206574, // "expand 32-byte k"
		key[0], key[1], key[2], key[3], key[4], key[5], key[6], key[7],
		counter, nonce[0], nonce[1], nonce[2],
	}
}

// xorKeyStream sets dst[:n] to src[:n] XOR the keystream of the initial
// block state, n > 0; with key set, key[:64] first gets the state's
// block and the data the blocks after it (n < 1984; see the assembly).
//
//go:noescape
func xorKeyStream(dst, src *byte, n int, state *[16]uint32, key *byte)
