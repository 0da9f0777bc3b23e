package wireguard

import (
	"bytes"
	"errors"
	"net/netip"
	"slices"
)

// Type returns the type of message msg (TypeInitiation, TypeResponse,
// TypeCookieReply, TypeData), or 0 if it has none: shorter than four
// bytes, another type, or its reserved bytes not zero. Handshake messages
// go to Handle, data messages to Open.
func Type(msg []byte) uint32 { return messageType(msg) }

// AppendInitiation starts a handshake with p: it appends a handshake
// initiation to dst, to be sent to p.Endpoint(). A handshake already
// under way is replaced (its retry is this), and it is retried by Tick,
// which Config.Notify asks for.
func (d *Device) AppendInitiation(dst []byte, p *Peer) ([]byte, error) {
	now := d.now()
	m := d.mono(now)
	id := d.id.Load()
	if id == nil {
		return dst, errors.New("wireguard: no private key")
	}
	defer p.kick() // its retry is due sooner than Tick said: ask for a Tick
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.removed {
		return dst, errors.New("wireguard: peer removed")
	}
	if p.hsPending {
		p.dropHandshakeLocked()
	}
	idx, err := d.newIndex(indexEntry{peer: p})
	if err != nil {
		return dst, err
	}
	p.hs.localIndex = idx
	dst = slices.Grow(dst, InitiationSize)
	msg := dst[len(dst) : len(dst)+InitiationSize]
	if err := writeInitiation(id, msg, p, &p.hs, now); err != nil {
		d.dropIndex(idx)
		p.hs.zero()
		return dst, err
	}
	p.addMACs(msg, m)
	p.hsPending = true
	p.hsSent, p.hsJitter = m, d.jitter()
	if p.attemptStart == 0 {
		p.attemptStart = m
	}
	p.want.Store(false)
	p.sentAuth(m)
	p.txBytes.Add(InitiationSize)
	return dst[:len(dst)+InitiationSize], nil
}

// Handle takes a handshake message from src: an initiation (it appends
// the response to dst), a response (completing the handshake p started:
// p's Tick then asks for a keepalive, unless the caller sends data
// first), or a cookie reply (kept for p's next handshake message). Under
// load (the caller's judgement, e.g. a backlog of handshake messages), an
// initiation or response without a valid MAC2 for src is answered with a
// cookie reply in dst instead, and refused with NeedCookie; one with a
// valid MAC2 is refused with SourceLimited past its source's rate
// (SourceRate). A message refused returns its Reason as the error, and
// dst with nothing appended but such a cookie reply. p is the peer the
// message authenticated as.
func (d *Device) Handle(dst, msg []byte, src netip.AddrPort, underLoad bool) (out []byte, p *Peer, err error) {
	now := d.now()
	m := d.mono(now)
	var size int
	switch messageType(msg) {
	case TypeInitiation:
		size = InitiationSize
	case TypeResponse:
		size = ResponseSize
	case TypeCookieReply:
		size = CookieReplySize
	default:
		return dst, nil, UnknownType
	}
	switch {
	case len(msg) < size:
		return dst, nil, Short
	case len(msg) > size:
		return dst, nil, Oversize
	}
	if messageType(msg) == TypeCookieReply {
		if r := d.handleCookieReply(msg, m); r != OK {
			return dst, nil, r
		}
		return dst, nil, nil
	}
	id := d.id.Load()
	switch {
	case id == nil:
		return dst, nil, NoPrivateKey
	case !id.checkMAC1(msg):
		return dst, nil, BadMAC1
	case underLoad && !d.checkMAC2(msg, src, m):
		return d.appendCookieReply(id, dst, msg, src, m), nil, NeedCookie
	case underLoad && !d.sources.allow(src.Addr(), m):
		return dst, nil, SourceLimited
	}
	var r Reason
	if messageType(msg) == TypeInitiation {
		dst, p, r = d.handleInitiation(id, dst, msg, m)
	} else {
		p, r = d.handleResponse(id, msg, m)
	}
	if r != OK {
		return dst, nil, r
	}
	if messageType(msg) == TypeResponse {
		p.kick() // a keepalive is due
	}
	p.roam(src)
	p.receivedAuth()
	p.rxBytes.Add(uint64(len(msg)))
	return dst, p, nil
}

// handleInitiation authenticates an initiation to identity id, answers
// it and puts the new keypair in its peer's next slot.
func (d *Device) handleInitiation(id *identity, dst, msg []byte, m int64) ([]byte, *Peer, Reason) {
	var st responderState
	defer clear(st.ck[:])
	p, r := d.readInitiation(id, msg, &st)
	if r != OK {
		return dst, nil, r
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.removed:
		return dst, nil, UnknownPeer
	case p.staticUnder(id) == nil: // the private key changed meanwhile
		return dst, nil, Auth
	case bytes.Compare(st.timestamp[:], p.lastTimestamp[:]) <= 0:
		return dst, nil, OldTimestamp
	case p.lastInit != 0 && m-p.lastInit < int64(d.timers.InitiationInterval):
		return dst, nil, RateLimited
	}
	idx, err := d.newIndex(indexEntry{peer: p})
	if err != nil {
		return dst, nil, Auth
	}
	dst = slices.Grow(dst, ResponseSize)
	reply := dst[len(dst) : len(dst)+ResponseSize]
	send, recv, err := writeResponse(reply, p, &st, idx)
	if err != nil {
		d.dropIndex(idx)
		return dst, nil, BadKey
	}
	p.lastTimestamp, p.lastInit = st.timestamp, m
	kp := newKeypair(&send, &recv, false, idx, st.remoteIndex, m)
	d.setIndex(idx, indexEntry{peer: p, kp: kp})
	p.installLocked(kp)
	p.addMACs(reply, m)
	p.sentAuth(m)
	p.txBytes.Add(ResponseSize)
	return dst[:len(dst)+ResponseSize], p, OK
}

// handleResponse completes the handshake the response's receiver index
// names, to identity id: its keypair becomes its peer's current one.
func (d *Device) handleResponse(id *identity, msg []byte, m int64) (*Peer, Reason) {
	i := index(msg, offRespRecv)
	p := d.lookup(i).peer
	if p == nil {
		return nil, UnknownIndex
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.hsPending || p.hs.localIndex != i || p.staticUnder(id) == nil {
		return nil, UnknownIndex
	}
	send, recv, r := readResponse(id, msg, p, &p.hs)
	if r != OK {
		return nil, r
	}
	kp := newKeypair(&send, &recv, true, i, index(msg, offSender), m)
	d.setIndex(i, indexEntry{peer: p, kp: kp})
	p.installLocked(kp)
	p.hs.zero()
	p.hsPending = false
	p.attemptStart = 0
	p.want.Store(false)
	p.keepaliveNow.Store(true)
	return p, OK
}

// handleCookieReply keeps the cookie of a reply to a handshake message
// this device sent.
func (d *Device) handleCookieReply(msg []byte, m int64) Reason {
	p := d.lookup(index(msg, offReceiver)).peer
	if p == nil {
		return UnknownIndex
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.takeCookie(msg, m)
}
