package wireguard

import "encoding/binary"

// Message types: the first byte of every message, followed by three
// reserved zero bytes (the whole little-endian 32-bit word is the type).
const (
	TypeInitiation  = 1
	TypeResponse    = 2
	TypeCookieReply = 3
	TypeData        = 4
)

// Message sizes and offsets on the wire.
const (
	InitiationSize  = 148 // type, sender, ephemeral, static+tag, timestamp+tag, mac1, mac2
	ResponseSize    = 92  // type, sender, receiver, ephemeral, empty+tag, mac1, mac2
	CookieReplySize = 64  // type, receiver, nonce, cookie+tag
	HeaderLen       = 16  // a data message's header: type, receiver, counter
	TagLen          = 16  // a Poly1305 tag
	MinDataSize     = HeaderLen + TagLen

	macLen         = 16
	timestampLen   = 12
	cookieLen      = 16
	cookieNonceLen = 24
)

// Field offsets. Handshake messages end with mac1 and mac2; a data
// message's nonce is its counter.
const (
	offSender      = 4
	offReceiver    = 4 // in a cookie reply and a data message
	offCounter     = 8 // in a data message
	offInitEph     = 8
	offInitStat    = offInitEph + KeyLen
	offInitTime    = offInitStat + KeyLen + TagLen
	offRespRecv    = 8
	offRespEph     = 12
	offRespEmpty   = offRespEph + KeyLen
	offCookieNonce = 8
	offCookieEnc   = offCookieNonce + cookieNonceLen
)

// messageType returns msg's type, or 0 if it has none: shorter than a
// type word, or the word (the type and three reserved zero bytes) not one
// of the four types.
func messageType(msg []byte) uint32 {
	if len(msg) < 4 {
		return 0
	}
	if t := binary.LittleEndian.Uint32(msg); t >= TypeInitiation && t <= TypeData {
		return t
	}
	return 0
}

func putType(msg []byte, t uint32) { binary.LittleEndian.PutUint32(msg, t) }

func index(msg []byte, off int) uint32 { return binary.LittleEndian.Uint32(msg[off:]) }

func putIndex(msg []byte, off int, i uint32) { binary.LittleEndian.PutUint32(msg[off:], i) }

// macs returns the offsets of a handshake message's mac1 and mac2.
func macs(msg []byte) (mac1, mac2 int) {
	return len(msg) - 2*macLen, len(msg) - macLen
}
