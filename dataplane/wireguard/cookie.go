package wireguard

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"net/netip"
	"sync"

	"golang.org/x/crypto/chacha20poly1305"
)

// cookieSecret is a responder's secret for cookies, random and replaced
// every Timers.CookieRefresh.
type cookieSecret struct {
	mu     sync.Mutex
	secret [KeyLen]byte
	born   int64 // mono; 0: none yet
}

// cookie returns the cookie for src: MAC(secret, IP address || port).
func (d *Device) cookie(src netip.AddrPort, m int64) [cookieLen]byte {
	c := &d.cookies
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.born == 0 || m-c.born >= int64(d.timers.CookieRefresh) {
		rand.Read(c.secret[:])
		c.born = m
	}
	a := src.Addr().Unmap().AsSlice()
	var port [2]byte
	binary.BigEndian.PutUint16(port[:], src.Port())
	return macOf(c.secret[:], a, port[:])
}

// checkMAC1 reports whether msg's mac1 is for identity id.
func (id *identity) checkMAC1(msg []byte) bool {
	o1, _ := macs(msg)
	want := macOf(id.mac1Key[:], msg[:o1])
	return subtle.ConstantTimeCompare(want[:], msg[o1:o1+macLen]) == 1
}

// checkMAC2 reports whether msg's mac2 is made with the cookie of src.
func (d *Device) checkMAC2(msg []byte, src netip.AddrPort, m int64) bool {
	_, o2 := macs(msg)
	c := d.cookie(src, m)
	want := macOf(c[:], msg[:o2])
	return subtle.ConstantTimeCompare(want[:], msg[o2:o2+macLen]) == 1
}

// appendCookieReply appends the cookie reply to msg, sent by src to
// identity id, to dst: the cookie of src sealed with XChaCha20-Poly1305
// under id's cookie key, a random nonce and msg's mac1 as associated
// data.
func (d *Device) appendCookieReply(id *identity, dst, msg []byte, src netip.AddrPort, m int64) []byte {
	reply := make([]byte, CookieReplySize)
	putType(reply, TypeCookieReply)
	putIndex(reply, offReceiver, index(msg, offSender))
	nonce := reply[offCookieNonce : offCookieNonce+cookieNonceLen]
	rand.Read(nonce)
	c := d.cookie(src, m)
	o1, _ := macs(msg)
	a, _ := chacha20poly1305.NewX(id.cookieKey[:])
	a.Seal(reply[offCookieEnc:offCookieEnc], nonce, c[:], msg[o1:o1+macLen])
	return append(dst, reply...)
}

// cookieJar is what an initiator keeps of its peer's cookie. Peer.mu
// guards it.
type cookieJar struct {
	cookie   [cookieLen]byte
	got      int64 // mono; 0: none
	lastMAC1 [macLen]byte
	sentMAC1 bool
}

// addMACs sets msg's mac1 (with the peer's public key) and mac2 (with
// the peer's cookie if it is younger than Timers.CookieRefresh, else
// zeros). p.mu is held.
func (p *Peer) addMACs(msg []byte, m int64) {
	o1, o2 := macs(msg)
	j := &p.jar
	j.lastMAC1 = macOf(p.mac1Key[:], msg[:o1])
	j.sentMAC1 = true
	copy(msg[o1:], j.lastMAC1[:])
	if j.got == 0 || m-j.got >= int64(p.dev.timers.CookieRefresh) {
		clear(msg[o2 : o2+macLen])
		return
	}
	mac2 := macOf(j.cookie[:], msg[:o2])
	copy(msg[o2:], mac2[:])
}

// takeCookie opens a cookie reply to the last handshake message sent to
// p. p.mu is held.
func (p *Peer) takeCookie(reply []byte, m int64) Reason {
	j := &p.jar
	if !j.sentMAC1 {
		return UnknownIndex
	}
	a, _ := chacha20poly1305.NewX(p.cookieKey[:])
	nonce := reply[offCookieNonce : offCookieNonce+cookieNonceLen]
	var c [cookieLen]byte
	if _, err := a.Open(c[:0], nonce, reply[offCookieEnc:CookieReplySize], j.lastMAC1[:]); err != nil {
		return Auth
	}
	j.cookie, j.got = c, m
	return OK
}
