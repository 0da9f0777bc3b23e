package wireguard

import (
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a Device.
type Config struct {
	// PrivateKey is the device's static private key; zero: none yet
	// (see SetPrivateKey), and no handshake is made or answered.
	PrivateKey Key
	// Now is the clock, read once per call (per batch on the data path);
	// nil: time.Now. Tests inject their own.
	Now func() time.Time
	// Timers are the protocol's limits; nil: DefaultTimers. Tests
	// shorten them.
	Timers *Timers
	// Notify, if set, is called when a peer needs its Tick sooner than
	// the time its last Tick returned: the data path found it without a
	// keypair, due for a rekey or with packets staged; an initiation
	// was made (its retry is due); a handshake completed, or a
	// responder's keypair with packets staged was confirmed. It is
	// called on the caller's goroutine (that of Seal, Open, Handle or
	// AppendInitiation),
	// at most once between two Ticks of the peer, and must not block.
	Notify func(*Peer)
}

// A Device is one WireGuard interface's protocol state: its static key,
// its peers, the receiver indices of their handshakes and keypairs, and
// the cookie secret. Its methods are safe for concurrent use.
type Device struct {
	now    func() time.Time
	timers Timers
	notify func(*Peer)
	epoch  time.Time // for monotonic times, mono

	id atomic.Pointer[identity] // nil: no private key

	// Kept for the caller, who applies them (see SetListenPort).
	listenPort, fwmark atomic.Uint32

	cookies     cookieSecret
	sources     sourceLimiter
	stagedStats stagedCounters

	mu      sync.RWMutex
	peers   map[Key]*Peer
	indices map[uint32]indexEntry
	added   uint64 // peers added so far, the order of Peers
}

// identity is the device's static key pair and what is derived from its
// public key: the responder's initial hash, and the keys of MAC1 and of
// cookie replies to this device. It is replaced whole (SetPrivateKey).
type identity struct {
	private, public           Key
	hash0, mac1Key, cookieKey [KeyLen]byte
}

// newIdentity returns the identity of private key k, clamped; nil if k
// is zero.
func newIdentity(k Key) *identity {
	if k.IsZero() {
		return nil
	}
	clamp(&k)
	id := &identity{private: k, public: k.Public()}
	id.hash0 = hashOf(initialHash[:], id.public[:])
	id.mac1Key = hashOf(labelMAC1, id.public[:])
	id.cookieKey = hashOf(labelCookie, id.public[:])
	return id
}

// indexEntry is what a receiver index names: a peer's handshake under
// way (kp nil) or one of its keypairs.
type indexEntry struct {
	peer *Peer
	kp   *keypair
}

// NewDevice returns a device with cfg's private key and no peers.
func NewDevice(cfg Config) (*Device, error) {
	d := &Device{
		now:     cfg.Now,
		timers:  DefaultTimers,
		notify:  cfg.Notify,
		peers:   make(map[Key]*Peer),
		indices: make(map[uint32]indexEntry),
		sources: sourceLimiter{buckets: make(map[netip.Addr]sourceBucket)},
	}
	if d.now == nil {
		d.now = time.Now
	}
	if cfg.Timers != nil {
		d.timers = *cfg.Timers
	}
	d.epoch = d.now()
	d.id.Store(newIdentity(cfg.PrivateKey))
	return d, nil
}

// PublicKey returns the device's static public key (zero: no private
// key).
func (d *Device) PublicKey() Key {
	if id := d.id.Load(); id != nil {
		return id.public
	}
	return Key{}
}

// PrivateKey returns the device's static private key, clamped (zero:
// none).
func (d *Device) PrivateKey() Key {
	if id := d.id.Load(); id != nil {
		return id.private
	}
	return Key{}
}

// SetPrivateKey replaces the device's static private key (zero: none,
// and no handshake is made or answered). As WireGuard does: a key the
// device has already changes nothing; a peer with the new public key is
// removed; every peer's current and next keypair stop sealing (they
// still open what is in flight), so that the next packet sent starts a
// handshake with the new key; and handshakes under way are dropped.
func (d *Device) SetPrivateKey(k Key) {
	id := newIdentity(k)
	d.mu.Lock()
	if old := d.id.Load(); old == id || old != nil && id != nil && old.private == id.private {
		d.mu.Unlock()
		return
	}
	var self *Peer
	if id != nil {
		self = d.peers[id.public]
	}
	d.id.Store(id)
	peers := make([]*Peer, 0, len(d.peers))
	for _, p := range d.peers {
		st, _ := id.staticWith(&p.cfg.PublicKey) // of no small order: AddPeer checked
		p.static.Store(st)
		peers = append(peers, p)
	}
	d.mu.Unlock()
	if self != nil {
		d.RemovePeer(self)
	}
	for _, p := range peers {
		p.mu.Lock()
		p.expireLocked()
		p.mu.Unlock()
	}
}

// SetListenPort and SetFwmark keep the device's UDP port and socket
// mark (0: none) for the caller, who binds and marks its sockets: the
// device does not use them. ListenPort and Fwmark return them.
func (d *Device) SetListenPort(port uint16) error {
	d.listenPort.Store(uint32(port))
	return nil
}

// SetFwmark: see SetListenPort.
func (d *Device) SetFwmark(mark uint32) error {
	d.fwmark.Store(mark)
	return nil
}

// ListenPort: see SetListenPort.
func (d *Device) ListenPort() uint16 { return uint16(d.listenPort.Load()) }

// Fwmark: see SetListenPort.
func (d *Device) Fwmark() uint32 { return d.fwmark.Load() }

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

// Peers returns the device's peers in the order they were added.
func (d *Device) Peers() []*Peer {
	d.mu.RLock()
	peers := make([]*Peer, 0, len(d.peers))
	for _, p := range d.peers {
		peers = append(peers, p)
	}
	d.mu.RUnlock()
	slices.SortFunc(peers, func(a, b *Peer) int { return cmp.Compare(a.added, b.added) })
	return peers
}

// AddPeer adds a peer. Its public key must be new to the device and not
// the device's own.
func (d *Device) AddPeer(cfg PeerConfig) (*Peer, error) {
	p := &Peer{
		dev:       d,
		cfg:       cfg,
		hash0:     hashOf(initialHash[:], cfg.PublicKey[:]),
		mac1Key:   hashOf(labelMAC1, cfg.PublicKey[:]),
		cookieKey: hashOf(labelCookie, cfg.PublicKey[:]),
	}
	p.SetEndpoint(cfg.Endpoint)
	d.mu.Lock()
	defer d.mu.Unlock()
	id := d.id.Load()
	switch {
	case id != nil && cfg.PublicKey == id.public:
		return nil, errors.New("wireguard: a peer with the device's own key")
	case d.peers[cfg.PublicKey] != nil:
		return nil, errors.New("wireguard: a peer with that key exists")
	}
	st, err := id.staticWith(&cfg.PublicKey)
	if err != nil {
		return nil, errors.New("wireguard: a peer's public key of small order")
	}
	p.static.Store(st)
	d.added++
	p.added = d.added
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
	p.clearStaged(true)
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
