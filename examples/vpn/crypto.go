package vpn

import (
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/gsoplane/gsoplane/dataplane/udp"
)

// The framing: a WireGuard-style transport data header before the
// ciphertext, the AEAD's tag after it.
const (
	headerLen  = 16
	tagLen     = chacha20poly1305.Overhead
	msgData    = 4 // the header's message type
	keyLen     = chacha20poly1305.KeySize
	maxCounter = 1<<64 - 1 - windowBits // a counter this high is never used: stop long before
)

// directionKey derives the key of the direction from one address to the
// other from the pre-shared key, so that the two directions never share
// a key (and so never a nonce).
func directionKey(psk []byte, from, to string) []byte {
	mac := hmac.New(sha256.New, psk)
	mac.Write([]byte("gsoplane example vpn " + from + " > " + to))
	return mac.Sum(nil)
}

// epochPeriod is how long a sealer seals under one epoch: the longest a
// restarted opener refuses its peer's datagrams (those of the epoch it
// may have seen before its restart).
const epochPeriod = 2 * time.Second

// sealer seals outgoing datagrams: a header with the epoch and the next
// counter, the packet encrypted in place, the tag in the tailroom.
type sealer struct {
	aead  cipher.AEAD
	state *state
	now   func() time.Time // time.Now; the tests' clock

	mu       sync.Mutex // the queues' sinks seal concurrently
	epoch    uint32
	counter  uint64    // the next datagram's in the epoch
	rotateAt time.Time // when to take the next epoch
	nonce    [chacha20poly1305.NonceSize]byte
}

// newSealer makes a sealer and takes its first epoch.
func newSealer(key []byte, st *state) (*sealer, error) {
	aead, err := chacha20poly1305.New(key)
	if err != nil {
		return nil, err
	}
	s := &sealer{aead: aead, state: st, now: time.Now}
	if s.epoch, err = st.takeEpoch(); err != nil {
		return nil, fmt.Errorf("state file: %w", err)
	}
	s.rotateAt = s.now().Add(epochPeriod)
	return s, nil
}

// seal is a udp.SealFunc for the tunnel's one peer (peers[i] is always
// 0). The nonce is the epoch and the counter. When the counter would run
// out and no new epoch can be taken (the state file cannot be written)
// it seals nothing more: the datagrams go out all zeros, which the peer
// refuses, and no plaintext leaves.
func (s *sealer) seal(dgrams [][]byte, _ []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rotate(len(dgrams))
	nonce := s.nonce[:] // in the struct: on the stack it would escape through the AEAD's interface
	binary.LittleEndian.PutUint32(nonce, s.epoch)
	for _, d := range dgrams {
		hdr, pkt := d[:headerLen], d[headerLen:len(d)-tagLen]
		if s.counter >= maxCounter {
			clear(d)
			continue
		}
		binary.LittleEndian.PutUint32(hdr[0:], msgData)
		binary.LittleEndian.PutUint32(hdr[4:], s.epoch)
		binary.LittleEndian.PutUint64(hdr[8:], s.counter)
		binary.LittleEndian.PutUint64(nonce[4:], s.counter)
		s.counter++
		s.aead.Seal(pkt[:0], nonce, pkt, hdr) // in place: the tag lands in the tailroom
	}
}

// rotate takes the next epoch when the period is over or when n more
// datagrams would run the counter out. If the state file cannot be
// written it keeps the epoch and tries again a period later.
func (s *sealer) rotate(n int) {
	now := s.now()
	if now.Before(s.rotateAt) && s.counter+uint64(n) < maxCounter {
		return
	}
	s.rotateAt = now.Add(epochPeriod)
	if e, err := s.state.takeEpoch(); err == nil {
		s.epoch, s.counter = e, 0
	}
}

// opener opens incoming datagrams and keeps a replay window for the
// peer's current epoch and one for the epoch before it (datagrams
// reordered around the change).
type opener struct {
	aead  cipher.AEAD
	state *state

	mu        sync.Mutex // a Tunnel opens from one goroutine; another caller may not
	floor     uint32     // the highest epoch accepted, in this run or an earlier one: a new epoch must be above it
	cur, prev epochWindow
	nonce     [chacha20poly1305.NonceSize]byte
}

// epochWindow is the replay window of one epoch (0: none yet).
type epochWindow struct {
	epoch uint32
	win   window
}

func newOpener(key []byte, st *state) (*opener, error) {
	aead, err := chacha20poly1305.New(key)
	if err != nil {
		return nil, err
	}
	return &opener{aead: aead, state: st, floor: st.floor}, nil
}

// open is a udp.OpenFunc for the tunnel's one peer (peers[i] is always
// 0): each datagram is decrypted in place or dropped for a reason.
func (o *opener) open(dgrams [][]byte, _ []int, verdicts []udp.Verdict) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, d := range dgrams {
		verdicts[i] = o.open1(d)
	}
}

// open1 opens one datagram. One that is not a data message is
// malformed; one of the current or the previous epoch must be fresh in
// its window; one of another epoch must be of a new one, above the
// floor, and makes it the current epoch once its tag verifies and the
// state file holds the new floor. Anything else is a replay: an epoch
// below the floor was accepted before (perhaps before a restart).
func (o *opener) open1(d []byte) udp.Verdict {
	hdr, ct := d[:headerLen], d[headerLen:]
	epoch, ctr := binary.LittleEndian.Uint32(hdr[4:]), binary.LittleEndian.Uint64(hdr[8:])
	if binary.LittleEndian.Uint32(hdr) != msgData || epoch == 0 {
		return udp.DropMalformed
	}
	var w *window
	switch epoch {
	case o.cur.epoch:
		w = &o.cur.win
	case o.prev.epoch:
		w = &o.prev.win
	}
	if w == nil && epoch <= o.floor || w != nil && !w.fresh(ctr) {
		return udp.DropReplay
	}
	nonce := o.nonce[:]
	binary.LittleEndian.PutUint32(nonce, epoch)
	binary.LittleEndian.PutUint64(nonce[4:], ctr)
	if _, err := o.aead.Open(ct[:0], nonce, ct, hdr); err != nil {
		return udp.DropAuth
	}
	if w == nil { // a new epoch, authentic
		if o.state.raiseFloor(epoch) != nil {
			return udp.DropReplay // not recorded: after a restart it could be accepted again
		}
		o.floor = epoch
		o.prev, o.cur = o.cur, epochWindow{epoch: epoch}
		w = &o.cur.win
	}
	w.mark(ctr) // only an authentic counter moves the window
	return udp.Accept
}

// window is a replay window over 64-bit counters (RFC 6479): a bitmap
// of windowBits counters below the highest seen, kept in a ring of words
// so that moving it forward clears whole words.
type window struct {
	top    uint64 // the highest counter marked, plus one; 0: none yet
	bitmap [windowBits / 64]uint64
}

const windowBits = 2048

// fresh reports whether ctr may be accepted: above the window, or in it
// and not marked yet.
func (w *window) fresh(ctr uint64) bool {
	switch {
	case ctr >= maxCounter:
		return false
	case ctr >= w.top:
		return true
	case w.top-ctr > windowBits-64: // the words below the window's floor are reused
		return false
	}
	return w.bitmap[ctr/64%uint64(len(w.bitmap))]&(1<<(ctr%64)) == 0
}

// mark records ctr, which fresh accepted, moving the window forward past
// it if needed.
func (w *window) mark(ctr uint64) {
	if ctr >= w.top {
		from := uint64(0) // the first word past the highest counter's
		if w.top > 0 {
			from = (w.top-1)/64 + 1
		}
		for k := from; k <= ctr/64 && k < from+uint64(len(w.bitmap)); k++ {
			w.bitmap[k%uint64(len(w.bitmap))] = 0
		}
		w.top = ctr + 1
	}
	w.bitmap[ctr/64%uint64(len(w.bitmap))] |= 1 << (ctr % 64)
}

var errKey = errors.New("the key file must hold 32 bytes")
