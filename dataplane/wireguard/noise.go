package wireguard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash"
	"time"

	"golang.org/x/crypto/blake2s"
	"golang.org/x/crypto/chacha20poly1305"
	"golang.org/x/crypto/curve25519"
)

// KeyLen is the length of a Curve25519 key, a pre-shared key and a
// hash.
const KeyLen = 32

// A Key is a Curve25519 private or public key, or a pre-shared key.
type Key [KeyLen]byte

// NewPrivateKey returns a random Curve25519 private key, clamped.
func NewPrivateKey() (Key, error) {
	var k Key
	if _, err := rand.Read(k[:]); err != nil {
		return k, err
	}
	clamp(&k)
	return k, nil
}

// clamp clamps a Curve25519 private key.
func clamp(k *Key) {
	k[0] &= 248
	k[31] = k[31]&127 | 64
}

// smallOrderProbe is a private key that tells a public key of small
// order (the shared secret with it is zero, whatever the private key).
var smallOrderProbe = Key{31: 64}

// static is a peer's static-static secret under one identity of the
// device.
type static struct {
	id     *identity
	shared [KeyLen]byte
}

// staticWith returns the static-static secret of id and public key pub;
// nil if id is (no private key). It fails if pub is of small order.
func (id *identity) staticWith(pub *Key) (*static, error) {
	if id == nil {
		_, err := dh(&smallOrderProbe, pub)
		return nil, err
	}
	s := &static{id: id}
	var err error
	s.shared, err = dh(&id.private, pub)
	return s, err
}

// Public returns the public key of the private key k.
func (k *Key) Public() Key {
	var pub Key
	curve25519.ScalarBaseMult((*[32]byte)(&pub), (*[32]byte)(k))
	return pub
}

// IsZero reports whether k is all zeros (no pre-shared key).
func (k *Key) IsZero() bool {
	var zero Key
	return subtle.ConstantTimeCompare(k[:], zero[:]) == 1
}

// String returns k in base64, as wg(8) shows keys.
func (k Key) String() string { return base64.StdEncoding.EncodeToString(k[:]) }

// ParseKey parses a key in base64.
func ParseKey(s string) (Key, error) {
	var k Key
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != KeyLen {
		return k, errors.New("wireguard: a key is 32 bytes in base64")
	}
	copy(k[:], b)
	return k, nil
}

// The protocol's constants: the Noise construction and WireGuard's
// identifier, hashed into the initial chaining key and hash, and the
// labels of the MAC1 and cookie keys.
var (
	construction = []byte("Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s")
	identifier   = []byte("WireGuard v1 zx2c4 Jason@zx2c4.com")
	labelMAC1    = []byte("mac1----")
	labelCookie  = []byte("cookie--")

	initialChainKey = hashOf(construction)
	initialHash     = hashOf(initialChainKey[:], identifier)
)

// hashOf is HASH: BLAKE2s-256 of the concatenation of parts.
func hashOf(parts ...[]byte) (out [KeyLen]byte) {
	h, _ := blake2s.New256(nil)
	for _, p := range parts {
		h.Write(p)
	}
	h.Sum(out[:0])
	return out
}

// macOf is MAC: keyed BLAKE2s-128.
func macOf(key []byte, parts ...[]byte) (out [macLen]byte) {
	h, _ := blake2s.New128(key)
	for _, p := range parts {
		h.Write(p)
	}
	h.Sum(out[:0])
	return out
}

func newBLAKE2s() hash.Hash {
	h, _ := blake2s.New256(nil)
	return h
}

// hmacOf is HMAC-BLAKE2s, the KDF's building block.
func hmacOf(key []byte, parts ...[]byte) (out [KeyLen]byte) {
	h := hmac.New(newBLAKE2s, key)
	for _, p := range parts {
		h.Write(p)
	}
	h.Sum(out[:0])
	return out
}

// kdf is KDFn with n = len(outs): τ0 = HMAC(ck, input), τi =
// HMAC(τ0, τ(i-1) || i); outs[i-1] = τi.
func kdf(ck *[KeyLen]byte, input []byte, outs ...*[KeyLen]byte) {
	t0 := hmacOf(ck[:], input)
	var prev []byte
	for i, o := range outs {
		*o = hmacOf(t0[:], prev, []byte{byte(i + 1)})
		prev = o[:]
	}
	clear(t0[:])
}

// dh is X25519; it fails for a public key of small order (an all-zero
// shared secret).
func dh(priv, pub *Key) ([KeyLen]byte, error) {
	var out [KeyLen]byte
	s, err := curve25519.X25519(priv[:], pub[:])
	if err != nil {
		return out, err
	}
	copy(out[:], s)
	clear(s)
	return out, nil
}

// The zero nonce: each handshake key seals one message.
var zeroNonce [chacha20poly1305.NonceSize]byte

// sealTo seals plain with key and counter 0 into dst (len(plain)+TagLen
// bytes).
func sealTo(dst []byte, key *[KeyLen]byte, plain, ad []byte) {
	a, _ := chacha20poly1305.New(key[:])
	a.Seal(dst[:0], zeroNonce[:], plain, ad)
}

// openTo opens ct with key and counter 0 into dst.
func openTo(dst []byte, key *[KeyLen]byte, ct, ad []byte) bool {
	a, _ := chacha20poly1305.New(key[:])
	_, err := a.Open(dst[:0], zeroNonce[:], ct, ad)
	return err == nil
}

// mixHash is h = HASH(h || data).
func mixHash(h *[KeyLen]byte, data []byte) { *h = hashOf(h[:], data) }

// tai64n is the TAI64N label of t: seconds since 1970 offset by 2^62,
// big-endian, then nanoseconds, big-endian (the 10 leap seconds the
// label's epoch differs by are left out, as the protocol does).
func tai64n(t time.Time) (ts [timestampLen]byte) {
	binary.BigEndian.PutUint64(ts[:], 1<<62+uint64(t.Unix()))
	binary.BigEndian.PutUint32(ts[8:], uint32(t.Nanosecond()))
	return ts
}

// handshake is an initiator's state between its initiation and the
// response.
type handshake struct {
	ck, h      [KeyLen]byte
	ephemeral  Key // private
	localIndex uint32
}

func (hs *handshake) zero() { *hs = handshake{} }

// writeInitiation fills msg (InitiationSize bytes) up to its MACs and
// hs with the state the response continues from, as identity id.
func writeInitiation(id *identity, msg []byte, p *Peer, hs *handshake, now time.Time) error {
	ss := p.staticUnder(id)
	if ss == nil {
		return errors.New("wireguard: the private key changed")
	}
	eph, err := NewPrivateKey()
	if err != nil {
		return err
	}
	hs.ephemeral = eph
	hs.ck, hs.h = initialChainKey, p.hash0
	pub := eph.Public()
	putType(msg, TypeInitiation)
	putIndex(msg, offSender, hs.localIndex)
	copy(msg[offInitEph:], pub[:])
	kdf(&hs.ck, pub[:], &hs.ck)
	mixHash(&hs.h, pub[:])
	es, err := dh(&eph, &p.cfg.PublicKey)
	defer clear(es[:])
	if err != nil {
		return err
	}
	var k [KeyLen]byte
	defer clear(k[:])
	kdf(&hs.ck, es[:], &hs.ck, &k)
	static := msg[offInitStat : offInitStat+KeyLen+TagLen]
	sealTo(static, &k, id.public[:], hs.h[:])
	mixHash(&hs.h, static)
	kdf(&hs.ck, ss[:], &hs.ck, &k)
	ts := tai64n(now)
	stamp := msg[offInitTime : offInitTime+timestampLen+TagLen]
	sealTo(stamp, &k, ts[:], hs.h[:])
	mixHash(&hs.h, stamp)
	return nil
}

// responderState is what a responder keeps of an initiation it read, to
// write the response from.
type responderState struct {
	ck, h       [KeyLen]byte
	remoteEph   Key
	remoteIndex uint32
	timestamp   [timestampLen]byte
}

// readInitiation decrypts and authenticates an initiation to identity id
// (its MAC1 already checked), returning its peer.
func (d *Device) readInitiation(id *identity, msg []byte, st *responderState) (*Peer, Reason) {
	st.ck, st.h = initialChainKey, id.hash0
	copy(st.remoteEph[:], msg[offInitEph:])
	st.remoteIndex = index(msg, offSender)
	kdf(&st.ck, st.remoteEph[:], &st.ck)
	mixHash(&st.h, st.remoteEph[:])
	es, err := dh(&id.private, &st.remoteEph)
	defer clear(es[:])
	if err != nil {
		return nil, BadKey
	}
	var k [KeyLen]byte
	defer clear(k[:])
	kdf(&st.ck, es[:], &st.ck, &k)
	static := msg[offInitStat : offInitStat+KeyLen+TagLen]
	var pub Key
	if !openTo(pub[:], &k, static, st.h[:]) {
		return nil, Auth
	}
	mixHash(&st.h, static)
	p := d.PeerByKey(pub)
	if p == nil {
		return nil, UnknownPeer
	}
	ss := p.staticUnder(id)
	if ss == nil {
		return nil, Auth
	}
	kdf(&st.ck, ss[:], &st.ck, &k)
	stamp := msg[offInitTime : offInitTime+timestampLen+TagLen]
	if !openTo(st.timestamp[:], &k, stamp, st.h[:]) {
		return nil, Auth
	}
	mixHash(&st.h, stamp)
	return p, OK
}

// writeResponse fills msg (ResponseSize bytes) up to its MACs and
// derives the responder's transport keys.
func writeResponse(msg []byte, p *Peer, st *responderState, localIndex uint32) (send, recv [KeyLen]byte, err error) {
	eph, err := NewPrivateKey()
	if err != nil {
		return send, recv, err
	}
	defer clear(eph[:])
	pub := eph.Public()
	putType(msg, TypeResponse)
	putIndex(msg, offSender, localIndex)
	putIndex(msg, offRespRecv, st.remoteIndex)
	copy(msg[offRespEph:], pub[:])
	kdf(&st.ck, pub[:], &st.ck)
	mixHash(&st.h, pub[:])
	ee, err := dh(&eph, &st.remoteEph)
	defer clear(ee[:])
	if err != nil {
		return send, recv, err
	}
	kdf(&st.ck, ee[:], &st.ck)
	se, err := dh(&eph, &p.cfg.PublicKey)
	defer clear(se[:])
	if err != nil {
		return send, recv, err
	}
	kdf(&st.ck, se[:], &st.ck)
	var tau, k [KeyLen]byte
	defer clear(tau[:])
	defer clear(k[:])
	kdf(&st.ck, p.cfg.PresharedKey[:], &st.ck, &tau, &k)
	mixHash(&st.h, tau[:])
	empty := msg[offRespEmpty : offRespEmpty+TagLen]
	sealTo(empty, &k, nil, st.h[:])
	mixHash(&st.h, empty)
	kdf(&st.ck, nil, &recv, &send)
	clear(st.ck[:])
	return send, recv, nil
}

// readResponse authenticates a response to identity id (its MAC1
// already checked) to the initiation hs was left by, and derives the
// initiator's transport keys.
func readResponse(id *identity, msg []byte, p *Peer, hs *handshake) (send, recv [KeyLen]byte, r Reason) {
	ck, h := hs.ck, hs.h
	defer clear(ck[:])
	var remote Key
	copy(remote[:], msg[offRespEph:])
	kdf(&ck, remote[:], &ck)
	mixHash(&h, remote[:])
	ee, err := dh(&hs.ephemeral, &remote)
	defer clear(ee[:])
	if err != nil {
		return send, recv, BadKey
	}
	kdf(&ck, ee[:], &ck)
	se, err := dh(&id.private, &remote)
	defer clear(se[:])
	if err != nil {
		return send, recv, BadKey
	}
	kdf(&ck, se[:], &ck)
	var tau, k [KeyLen]byte
	defer clear(tau[:])
	defer clear(k[:])
	kdf(&ck, p.cfg.PresharedKey[:], &ck, &tau, &k)
	mixHash(&h, tau[:])
	empty := msg[offRespEmpty : offRespEmpty+TagLen]
	if !openTo(nil, &k, empty, h[:]) {
		return send, recv, Auth
	}
	kdf(&ck, nil, &send, &recv)
	return send, recv, OK
}
