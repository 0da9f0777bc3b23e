package wireguard

import (
	"crypto/rand"
	"encoding/binary"
	"time"
)

// Timers are the protocol's limits. DefaultTimers are the protocol's
// own; tests shorten them.
type Timers struct {
	RekeyAfterMessages  uint64        // a keypair's counter from which a new handshake is due
	RejectAfterMessages uint64        // counters from this one on are never sent nor accepted
	RekeyAfterTime      time.Duration // the initiator's keypair age from which sending starts a new handshake
	RejectAfterTime     time.Duration // keypairs this old are dropped
	RekeyAttemptTime    time.Duration // initiations are retried this long, then given up
	RekeyTimeout        time.Duration // an initiation unanswered this long (plus jitter) is retried
	RekeyJitter         time.Duration // the most jitter added to RekeyTimeout
	KeepaliveTimeout    time.Duration // data received and nothing sent this long: a keepalive
	CookieRefresh       time.Duration // a cookie secret's lifetime, and a cookie's
	InitiationInterval  time.Duration // initiations from one peer closer than this are refused
}

// DefaultTimers are the protocol's values.
var DefaultTimers = Timers{
	RekeyAfterMessages:  1 << 60,
	RejectAfterMessages: 1<<64 - 1<<13 - 1,
	RekeyAfterTime:      120 * time.Second,
	RejectAfterTime:     180 * time.Second,
	RekeyAttemptTime:    90 * time.Second,
	RekeyTimeout:        5 * time.Second,
	RekeyJitter:         time.Second / 3,
	KeepaliveTimeout:    10 * time.Second,
	CookieRefresh:       120 * time.Second,
	InitiationInterval:  time.Second / 50,
}

// An Action is what a peer's Tick asks the caller to send.
type Action uint8

// The actions, a bit set.
const (
	// SendInitiation: send Device.AppendInitiation's message to the
	// peer's endpoint.
	SendInitiation Action = 1 << iota
	// SendKeepalive: seal a Packet with no inner packet (Buf of
	// HeaderLen bytes) and send it.
	SendKeepalive
	// SendStaged: the peer has a keypair and packets staged: send them
	// (Device.SendStaged), before the keepalive.
	SendStaged
)

// Tick runs p's timers at the device's clock: it drops keypairs past
// Timers.RejectAfterTime (and zeroes what it can of them), retries or
// gives up a handshake, and says what is to be sent (a handshake
// initiation, a keepalive: unless data goes first) and when to call Tick
// next, at the latest; Config.Notify says when sooner.
func (p *Peer) Tick() (Action, time.Time) {
	d := p.dev
	t := &d.timers
	m := d.mono(d.now())
	p.notified.Store(false)
	p.mu.Lock()
	defer p.mu.Unlock()
	var act Action
	next := m + int64(t.RejectAfterTime)
	at := func(due int64) bool {
		if due <= m {
			return true
		}
		next = min(next, due)
		return false
	}
	for _, slot := range []*keypairSlot{&p.current, &p.previous, &p.next} {
		if kp := slot.Load(); kp != nil && at(kp.created+int64(t.RejectAfterTime)) {
			p.dropLocked(slot)
		}
	}
	if s := p.unansweredSend.Load(); s != 0 && at(s+int64(t.KeepaliveTimeout+t.RekeyTimeout)) {
		p.unansweredSend.CompareAndSwap(s, 0)
		p.want.Store(true)
	}
	switch {
	case p.hsPending: // retried until RekeyAttemptTime
		if at(p.hsSent + int64(t.RekeyTimeout) + p.hsJitter) {
			if m-p.attemptStart >= int64(t.RekeyAttemptTime) {
				p.giveUpLocked()
			} else {
				act |= SendInitiation
			}
		}
	case p.want.Load(): // at most one initiation per RekeyTimeout
		if p.hsSent == 0 || at(p.hsSent+int64(t.RekeyTimeout)) {
			act |= SendInitiation
		}
	}
	if r := p.unansweredRecv.Load(); r != 0 && at(r+int64(t.KeepaliveTimeout)) || p.keepaliveNow.Load() {
		act |= SendKeepalive
	}
	if k := int64(p.cfg.PersistentKeepalive); k > 0 && at(max(p.lastSent.Load(), 1)+k) {
		act |= SendKeepalive
	}
	if kp := p.current.Load(); kp != nil && p.staged.n.Load() > 0 && kp.sendCounter.Load() < t.RejectAfterMessages {
		act |= SendStaged
	}
	return act, d.epoch.Add(time.Duration(next - 1))
}

// giveUpLocked ends a handshake that was retried for RekeyAttemptTime.
func (p *Peer) giveUpLocked() {
	p.dropHandshakeLocked()
	p.attemptStart = 0
	p.want.Store(false)
	p.unansweredSend.Store(0)
	p.clearStaged(false)
}

// jitter returns a random duration in [0, Timers.RekeyJitter).
func (d *Device) jitter() int64 {
	if d.timers.RekeyJitter <= 0 {
		return 0
	}
	var b [8]byte
	rand.Read(b[:])
	return int64(binary.LittleEndian.Uint64(b[:]) % uint64(d.timers.RekeyJitter))
}

// Events of the data path and the handshake, at mono time m, that the
// timers run from.

// sentAuth: an authenticated message went to p (a keepalive included).
func (p *Peer) sentAuth(m int64) {
	p.lastSent.Store(m)
	if p.unansweredRecv.Load() != 0 {
		p.unansweredRecv.Store(0)
	}
	if p.keepaliveNow.Load() {
		p.keepaliveNow.Store(false)
	}
}

// sentData: an inner packet went to p; with no answer by
// KeepaliveTimeout + RekeyTimeout, a handshake is due.
func (p *Peer) sentData(m int64) {
	if p.unansweredSend.Load() == 0 {
		p.unansweredSend.CompareAndSwap(0, m)
	}
}

// receivedAuth: an authenticated message came from p.
func (p *Peer) receivedAuth() {
	if p.unansweredSend.Load() != 0 {
		p.unansweredSend.Store(0)
	}
}

// receivedData: an inner packet came from p; with nothing sent by
// KeepaliveTimeout, a keepalive is due.
func (p *Peer) receivedData(m int64) {
	if p.unansweredRecv.Load() == 0 {
		p.unansweredRecv.CompareAndSwap(0, m)
	}
}

// wantHandshake asks for a handshake, and the caller for a Tick.
func (p *Peer) wantHandshake() {
	if !p.want.Load() {
		p.want.Store(true)
	}
	p.kick()
}

// kick calls Config.Notify once until the next Tick.
func (p *Peer) kick() {
	if n := p.dev.notify; n != nil && !p.notified.Load() && p.notified.CompareAndSwap(false, true) {
		n(p)
	}
}
