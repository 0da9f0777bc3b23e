package wireguard

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// PeerConfig configures a peer. Its allowed IPs are the caller's
// (cryptokey routing is dataplane/udp.Peers').
type PeerConfig struct {
	PublicKey Key
	// PresharedKey, if not zero, is mixed into the handshake.
	PresharedKey Key
	// Endpoint is where the peer is first sent to (zero: unknown until
	// it sends); it roams to the source of its latest authenticated
	// message.
	Endpoint netip.AddrPort
	// PersistentKeepalive, if not 0, is the longest time without
	// sending the peer anything: then Tick asks for a keepalive.
	PersistentKeepalive time.Duration
}

type keypairSlot = atomic.Pointer[keypair]

// A Peer is a device's peer: its static key and pre-shared key, its
// endpoint, its keypairs (current, previous, next) and its handshake and
// timer state. Its methods are safe for concurrent use.
type Peer struct {
	dev   *Device
	cfg   PeerConfig // PublicKey fixed; the rest guarded by mu
	added uint64     // its place in Device.Peers

	// Derived from the public key: the initiator's initial hash, and
	// the keys of MAC1 and of cookie replies from the peer.
	hash0, mac1Key, cookieKey [KeyLen]byte

	static atomic.Pointer[static] // the static-static secret; nil: no private key

	endpoint atomic.Pointer[netip.AddrPort]

	// The bytes of the messages sealed for the peer or written to it,
	// and of those authenticated from it.
	txBytes, rxBytes atomic.Uint64

	// The keypairs: current seals; all three open. A responder's new
	// keypair waits in next until the initiator's first data message.
	current, previous, next keypairSlot

	// Timer state written by the data path (mono times; 0: none).
	unansweredSend atomic.Int64 // first inner packet sent since anything authenticated came
	unansweredRecv atomic.Int64 // first inner packet received since anything authenticated went
	lastSent       atomic.Int64 // the last authenticated message sent
	lastHandshake  atomic.Int64 // the last keypair derived
	want           atomic.Bool  // a handshake is due
	keepaliveNow   atomic.Bool  // a handshake completed as initiator: confirm it
	notified       atomic.Bool  // Config.Notify called since the last Tick

	mu            sync.Mutex
	hs            handshake // the initiator's handshake under way
	hsPending     bool
	hsSent        int64 // the last initiation sent
	hsJitter      int64 // added to its RekeyTimeout
	attemptStart  int64 // the first initiation of the attempt under way
	lastTimestamp [timestampLen]byte
	lastInit      int64 // the last initiation accepted from the peer
	jar           cookieJar
	removed       bool

	staged stagedQueue // packets waiting for a keypair
}

// PublicKey returns p's static public key.
func (p *Peer) PublicKey() Key { return p.cfg.PublicKey }

// Config returns p's configuration, its endpoint the current one.
func (p *Peer) Config() PeerConfig {
	p.mu.Lock()
	c := p.cfg
	p.mu.Unlock()
	c.Endpoint = p.Endpoint()
	return c
}

// SetPresharedKey sets p's pre-shared key (zero: none) for its next
// handshakes.
func (p *Peer) SetPresharedKey(k Key) {
	p.mu.Lock()
	p.cfg.PresharedKey = k
	p.mu.Unlock()
}

// SetPersistentKeepalive sets p's persistent-keepalive interval (0:
// none), and asks for a Tick (Config.Notify), which sends the first
// keepalive at once if nothing was sent for that long.
func (p *Peer) SetPersistentKeepalive(interval time.Duration) {
	p.mu.Lock()
	p.cfg.PersistentKeepalive = interval
	p.mu.Unlock()
	p.kick()
}

// SetEndpoint sets where p is sent to (zero: nowhere until it sends),
// until it roams.
func (p *Peer) SetEndpoint(ep netip.AddrPort) {
	if !ep.IsValid() {
		p.endpoint.Store(nil)
		return
	}
	p.endpoint.Store(&ep)
}

// Transfer returns the bytes received from p (the messages that
// authenticated as p's, handshake messages included) and sent to it
// (the data messages sealed for it and the handshake messages written to
// it, whether or not the caller sent them), as wg(8) shows them.
func (p *Peer) Transfer() (rx, tx uint64) { return p.rxBytes.Load(), p.txBytes.Load() }

// Endpoint returns where p is sent to: the source of its latest
// authenticated message, or its configured endpoint.
func (p *Peer) Endpoint() netip.AddrPort {
	if ep := p.endpoint.Load(); ep != nil {
		return *ep
	}
	return netip.AddrPort{}
}

// roam sets p's endpoint to src if it differs (allocating only then).
func (p *Peer) roam(src netip.AddrPort) {
	if !src.IsValid() {
		return
	}
	if ep := p.endpoint.Load(); ep == nil || *ep != src {
		moved := new(netip.AddrPort)
		*moved = src
		p.endpoint.Store(moved)
	}
}

// LastHandshake returns when p's latest keypair was derived (zero:
// never).
func (p *Peer) LastHandshake() time.Time {
	m := p.lastHandshake.Load()
	if m == 0 {
		return time.Time{}
	}
	return p.dev.epoch.Add(time.Duration(m - 1))
}

// install puts a new keypair in p's slots: an initiator's becomes
// current at once (the old current previous); a responder's waits in
// next. The keypair it displaces is dropped. p.mu is held.
func (p *Peer) installLocked(kp *keypair) {
	p.lastHandshake.Store(kp.created)
	if !kp.initiator {
		p.dropLocked(&p.next)
		p.next.Store(kp)
		return
	}
	p.dropLocked(&p.previous)
	p.previous.Store(p.current.Load())
	p.current.Store(kp)
	p.dropLocked(&p.next)
}

// confirm makes kp, p's next keypair, current: the initiator has used
// it. The current one becomes previous.
func (p *Peer) confirm(kp *keypair) {
	p.mu.Lock()
	if p.next.Load() == kp {
		p.dropLocked(&p.previous)
		p.previous.Store(p.current.Load())
		p.current.Store(kp)
		p.next.Store(nil)
	}
	p.mu.Unlock()
	if p.staged.n.Load() > 0 {
		p.kick() // Tick: SendStaged
	}
}

// dropLocked empties a keypair slot, the keypair's index with it. p.mu
// is held.
func (p *Peer) dropLocked(slot *keypairSlot) {
	if kp := slot.Swap(nil); kp != nil {
		p.dev.dropIndex(kp.localIndex)
	}
}

// clearLocked drops every keypair and the handshake under way. p.mu is
// held.
func (p *Peer) clearLocked() {
	p.dropLocked(&p.current)
	p.dropLocked(&p.previous)
	p.dropLocked(&p.next)
	if p.hsPending {
		p.giveUpLocked()
	}
	p.hs.zero()
}

// expireLocked stops the current and next keypairs sealing (by using up
// their counters: the next Seal asks for a handshake) and drops the
// handshake under way: the device's key changed. They still open. p.mu
// is held.
func (p *Peer) expireLocked() {
	for _, kp := range []*keypair{p.current.Load(), p.next.Load()} {
		if kp != nil {
			kp.sendCounter.Store(p.dev.timers.RejectAfterMessages)
		}
	}
	if p.hsPending {
		p.dropHandshakeLocked()
	}
}

// dropHandshakeLocked drops the handshake under way and its index. p.mu
// is held.
func (p *Peer) dropHandshakeLocked() {
	p.dev.dropIndex(p.hs.localIndex)
	p.hs.zero()
	p.hsPending = false
}

// staticUnder returns p's static-static secret if the device's identity
// is still id (nil: it changed, or there is none).
func (p *Peer) staticUnder(id *identity) *[KeyLen]byte {
	if s := p.static.Load(); s != nil && s.id == id {
		return &s.shared
	}
	return nil
}
