package vpn

import (
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"

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

// sealer seals outgoing datagrams: a header with the next counter, the
// packet encrypted in place, the tag in the tailroom.
type sealer struct {
	aead    cipher.AEAD
	counter atomic.Uint64 // the next datagram's

	mu    sync.Mutex // the queues' sinks seal concurrently
	nonce [chacha20poly1305.NonceSize]byte
}

func newSealer(key []byte) (*sealer, error) {
	aead, err := chacha20poly1305.New(key)
	if err != nil {
		return nil, err
	}
	return &sealer{aead: aead}, nil
}

// seal is a udp.SealFunc for the tunnel's one peer (peers[i] is always
// 0). Counters are taken for the whole batch at once; past maxCounter it
// seals nothing more: the datagrams go out all zeros, which the peer
// refuses, and no plaintext leaves.
func (s *sealer) seal(dgrams [][]byte, _ []int) {
	next := s.counter.Add(uint64(len(dgrams))) - uint64(len(dgrams))
	s.mu.Lock()
	defer s.mu.Unlock()
	nonce := s.nonce[:] // in the struct: on the stack it would escape through the AEAD's interface
	for i, d := range dgrams {
		ctr := next + uint64(i)
		hdr, pkt := d[:headerLen], d[headerLen:len(d)-tagLen]
		if ctr >= maxCounter {
			clear(d)
			continue
		}
		binary.LittleEndian.PutUint32(hdr[0:], msgData)
		binary.LittleEndian.PutUint32(hdr[4:], 0)
		binary.LittleEndian.PutUint64(hdr[8:], ctr)
		binary.LittleEndian.PutUint64(nonce[4:], ctr)
		s.aead.Seal(pkt[:0], nonce, pkt, hdr) // in place: the tag lands in the tailroom
	}
}

// opener opens incoming datagrams and keeps the replay window, on the
// tunnel's one return path (no lock: Open is never called concurrently).
type opener struct {
	aead  cipher.AEAD
	win   window
	nonce [chacha20poly1305.NonceSize]byte
}

func newOpener(key []byte) (*opener, error) {
	aead, err := chacha20poly1305.New(key)
	if err != nil {
		return nil, err
	}
	return &opener{aead: aead}, nil
}

// open is a udp.OpenFunc for the tunnel's one peer (peers[i] is always
// 0): a datagram that is not a data message, whose counter the window
// refuses or whose tag does not verify is dropped, for that reason; the
// others are decrypted in place.
func (o *opener) open(dgrams [][]byte, _ []int, verdicts []udp.Verdict) {
	nonce := o.nonce[:]
	for i, d := range dgrams {
		hdr, ct := d[:headerLen], d[headerLen:]
		ctr := binary.LittleEndian.Uint64(hdr[8:])
		switch {
		case binary.LittleEndian.Uint32(hdr) != msgData || binary.LittleEndian.Uint32(hdr[4:]) != 0:
			verdicts[i] = udp.DropMalformed
			continue
		case !o.win.fresh(ctr):
			verdicts[i] = udp.DropReplay
			continue
		}
		binary.LittleEndian.PutUint64(nonce[4:], ctr)
		if _, err := o.aead.Open(ct[:0], nonce, ct, hdr); err != nil {
			verdicts[i] = udp.DropAuth
			continue
		}
		o.win.mark(ctr) // only an authentic counter moves the window
	}
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
