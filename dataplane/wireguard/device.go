package wireguard

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"
	"time"
)

// Config configures a Device.
type Config struct {
	// PrivateKey is the device's static private key.
	PrivateKey Key
	// Now is the clock, read once per call (per batch on the data path);
	// nil: time.Now. Tests inject their own.
	Now func() time.Time
	// Timers are the protocol's limits; nil: DefaultTimers. Tests
	// shorten them.
	Timers *Timers
	// Notify, if set, is called when a peer needs its Tick sooner than
	// the time its last Tick returned: the data path found it without a
	// keypair, or due for a rekey, or a handshake completed. It is
	// called on the caller's goroutine (that of Seal, Open or Handle),
	// at most once between two Ticks of the peer, and must not block.
	Notify func(*Peer)
}

// A Device is one WireGuard interface's protocol state: its static key,
// its peers, the receiver indices of their handshakes and keypairs, and
// the cookie secret. Its methods are safe for concurrent use.
type Device struct {
	private, public Key
	now             func() time.Time
	timers          Timers
	notify          func(*Peer)
	epoch           time.Time // for monotonic times, mono

	// Derived from the public key: the responder's initial hash, and
	// the keys of MAC1 and of cookie replies to this device.
	hash0, mac1Key, cookieKey [KeyLen]byte

	cookies cookieSecret

	mu      sync.RWMutex
	peers   map[Key]*Peer
	indices map[uint32]indexEntry
}

// indexEntry is what a receiver index names: a peer's handshake under
// way (kp nil) or one of its keypairs.
type indexEntry struct {
	peer *Peer
	kp   *keypair
}

// NewDevice returns a device with cfg's private key and no peers.
func NewDevice(cfg Config) (*Device, error) {
	if cfg.PrivateKey.IsZero() {
		return nil, errors.New("wireguard: no private key")
	}
	d := &Device{
		private: cfg.PrivateKey,
		now:     cfg.Now,
		timers:  DefaultTimers,
		notify:  cfg.Notify,
		peers:   make(map[Key]*Peer),
		indices: make(map[uint32]indexEntry),
	}
	if d.now == nil {
		d.now = time.Now
	}
	if cfg.Timers != nil {
		d.timers = *cfg.Timers
	}
	d.epoch = d.now()
	d.public = d.private.Public()
	d.hash0 = hashOf(initialHash[:], d.public[:])
	d.mac1Key = hashOf(labelMAC1, d.public[:])
	d.cookieKey = hashOf(labelCookie, d.public[:])
	return d, nil
}

// PublicKey returns the device's static public key.
func (d *Device) PublicKey() Key { return d.public }

// mono is t as nanoseconds since the device's epoch, at least 1 (0 means
// never in the timestamps kept).
func (d *Device) mono(t time.Time) int64 { return max(int64(t.Sub(d.epoch)), 0) + 1 }

// PeerByKey returns the peer with static public key pub, or nil.
func (d *Device) PeerByKey(pub Key) *Peer {
	d.mu.RLock()
	p := d.peers[pub]
	d.mu.RUnlock()
	return p
}

// AddPeer adds a peer. Its public key must be new to the device and not
// the device's own.
func (d *Device) AddPeer(cfg PeerConfig) (*Peer, error) {
	if cfg.PublicKey == d.public {
		return nil, errors.New("wireguard: a peer with the device's own key")
	}
	ss, err := dh(&d.private, &cfg.PublicKey)
	if err != nil {
		return nil, errors.New("wireguard: a peer's public key of small order")
	}
	p := &Peer{
		dev:          d,
		cfg:          cfg,
		staticShared: ss,
		hash0:        hashOf(initialHash[:], cfg.PublicKey[:]),
		mac1Key:      hashOf(labelMAC1, cfg.PublicKey[:]),
		cookieKey:    hashOf(labelCookie, cfg.PublicKey[:]),
	}
	if cfg.Endpoint.IsValid() {
		ep := cfg.Endpoint
		p.endpoint.Store(&ep)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.peers[cfg.PublicKey] != nil {
		return nil, errors.New("wireguard: a peer with that key exists")
	}
	d.peers[cfg.PublicKey] = p
	return p, nil
}

// RemovePeer removes p, its keypairs and its handshake under way.
func (d *Device) RemovePeer(p *Peer) {
	d.mu.Lock()
	if d.peers[p.cfg.PublicKey] == p {
		delete(d.peers, p.cfg.PublicKey)
	}
	d.mu.Unlock()
	p.mu.Lock()
	p.clearLocked()
	p.removed = true
	p.mu.Unlock()
}

// newIndex returns a random receiver index not in use, registered for e.
func (d *Device) newIndex(e indexEntry) (uint32, error) {
	var b [4]byte
	d.mu.Lock()
	defer d.mu.Unlock()
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, err
		}
		i := binary.LittleEndian.Uint32(b[:])
		if _, used := d.indices[i]; !used {
			d.indices[i] = e
			return i, nil
		}
	}
}

// setIndex points index i at e (a handshake's index becomes its
// keypair's).
func (d *Device) setIndex(i uint32, e indexEntry) {
	d.mu.Lock()
	d.indices[i] = e
	d.mu.Unlock()
}

func (d *Device) dropIndex(i uint32) {
	d.mu.Lock()
	delete(d.indices, i)
	d.mu.Unlock()
}

func (d *Device) lookup(i uint32) indexEntry {
	d.mu.RLock()
	e := d.indices[i]
	d.mu.RUnlock()
	return e
}

// A Packet is one datagram of a batch for Seal or Open, in place.
type Packet struct {
	// Buf is the datagram. Seal: HeaderLen bytes of room, then the
	// inner packet to the end of Buf; the capacity beyond holds the
	// padding and the tag (TagLen bytes, plus up to 15 of padding;
	// padding is cut short where the capacity ends). Seal leaves Buf the
	// whole data message. Open: the whole data message; Open leaves Buf
	// HeaderLen bytes of header (no longer meaningful) and the inner
	// packet, its length as its IP header gives.
	Buf []byte
	// Peer: Seal's destination, set by the caller; Open sets it to the
	// peer the message authenticated as.
	Peer *Peer
	// Addr: Open's source address, set by the caller (the peer's
	// endpoint roams to the last authenticated one); Seal sets it to the
	// peer's endpoint.
	Addr netip.AddrPort
	// Reason is what became of the datagram: OK, Keepalive (Open), or
	// why it is to be dropped.
	Reason Reason
}
