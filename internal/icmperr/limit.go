package icmperr

import (
	"hash/maphash"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// Limits are the kernel's ICMP rate-limit settings, with the same
// meaning. Times are kept in milliseconds, as jiffies at HZ=1000.
type Limits struct {
	// MsgsPerSec refills the global bucket, shared by ICMP and ICMPv6
	// (net.ipv4.icmp_msgs_per_sec); MsgsBurst is its depth
	// (net.ipv4.icmp_msgs_burst).
	MsgsPerSec, MsgsBurst int
	// Ratelimit4 is the per-destination interval for ICMP
	// (net.ipv4.icmp_ratelimit): after a burst of 6, one error per
	// interval; 0 removes the per-destination limit. Ratemask4 says which
	// ICMP types are limited at all (net.ipv4.icmp_ratemask: bit n for
	// type n); fragmentation needed never is.
	Ratelimit4 time.Duration
	Ratemask4  uint32
	// Ratelimit6 and Ratemask6 are the same for ICMPv6
	// (net.ipv6.icmp.ratelimit, net.ipv6.icmp.ratemask: bit n of the
	// 256-bit mask for type n).
	Ratelimit6 time.Duration
	Ratemask6  [4]uint64
}

// LinuxLimits returns the defaults of Linux 6.18: overall 1000 errors a
// second in bursts of 50; per destination one ICMP error a second (types
// 3, 4, 11, 12: destination unreachable but not fragmentation needed,
// source quench, time exceeded, parameter problem) and one ICMPv6 error
// every 100 ms (types 0-1 and 3-127: every error but packet too big),
// each after a burst of 6. Unlimited types pass both buckets untouched.
func LinuxLimits() Limits {
	return Limits{
		MsgsPerSec: 1000,
		MsgsBurst:  50,
		Ratelimit4: time.Second,
		Ratemask4:  1<<3 | 1<<4 | 1<<11 | 1<<12,
		Ratelimit6: 100 * time.Millisecond,
		Ratemask6:  [4]uint64{^uint64(1 << 2), ^uint64(0)},
	}
}

const (
	burstFactor  = 6      // XRLIM_BURST_FACTOR: a destination's bucket holds 6 intervals
	refillEvery  = 20     // ms (HZ/50): the global bucket refills at most this often...
	refillMax    = 1000   // ms (HZ): ...by at most a second's worth
	newPeerAge   = 60_000 // ms: a new destination starts with a full bucket (inet_getpeer)
	defaultPeers = 4096
	ways         = 8  // destinations per set of the peer table
	maxNR4       = 18 // NR_ICMP_TYPES: higher ICMP types are never limited
)

// Limiter decides, as the kernel does, whether an error may be sent: the
// global token bucket first (icmp_global_allow), then the destination's
// bucket (inet_peer_xrlim_allow), and only an error both allow costs the
// global bucket a credit (icmp_global_consume: 0, 1 or 2 at random, 1 on
// average). It may be used from several goroutines and allocates nothing
// per decision.
type Limiter struct {
	lim   Limits
	now   func() time.Time
	epoch time.Time

	mu     sync.Mutex
	credit int64 // global bucket, may go below zero
	stamp  int64 // ms of its last refill
	peers  peerTable
	rng    rand.Source // the cost of an error to the global bucket
}

// NewLimiter returns a Limiter enforcing lim that tracks at most peers
// destinations (0: 4096; a set of 8 forgets its least recently seen when
// full, and a forgotten destination starts again with a full bucket, as
// the kernel's are garbage collected). now is the clock (nil: time.Now).
func NewLimiter(lim Limits, peers int, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	if peers <= 0 {
		peers = defaultPeers
	}
	l := &Limiter{lim: lim, now: now, epoch: now(), stamp: -refillMax, rng: rand.NewPCG(rand.Uint64(), rand.Uint64())}
	l.peers.init(peers)
	return l
}

// Allow reports whether the error of kind k answering orig may be sent
// now and, if so, charges it. Call it before Build, and send the error
// only if it returns true. It returns false, and charges nothing, for a
// packet Build would not answer.
func (l *Limiter) Allow(orig []byte, k Kind) bool {
	to, m, ok := target(orig, k)
	return ok && l.allow(to, m.typ, m.code)
}

// Answers reports whether an error of kind k answers orig: false for a
// packet a router does not answer (see Build), which Allow refuses
// without charging.
func Answers(orig []byte, k Kind) bool {
	_, _, ok := target(orig, k)
	return ok
}

// target returns where the error of kind k answering orig goes and its
// type and code, or false if orig is not to be answered.
func target(orig []byte, k Kind) (to netip.Addr, m message, ok bool) {
	switch {
	case k != Unreachable && k != TooBig && k != TimeExceeded:
	case len(orig) > 0 && orig[0]>>4 == header.IPv4Version:
		if _, ok = answerable4(orig); !ok {
			break
		}
		ip := header.IPv4(orig)
		m = message{typ: uint8(header.ICMPv4DstUnreachable), code: uint8(header.ICMPv4HostUnreachable)}
		switch k {
		case TooBig:
			m.code = uint8(header.ICMPv4FragmentationNeeded)
			ok = ip.Flags()&header.IPv4FlagDontFragment != 0
		case TimeExceeded:
			m = message{typ: uint8(header.ICMPv4TimeExceeded), code: uint8(header.ICMPv4TTLExceeded)}
		}
		to = netip.AddrFrom4(ip.SourceAddress().As4())
	case len(orig) > 0 && orig[0]>>4 == header.IPv6Version:
		if _, ok = answerable6(orig, k == TooBig); !ok {
			break
		}
		m = message{typ: uint8(header.ICMPv6DstUnreachable), code: uint8(header.ICMPv6AddressUnreachable)}
		switch k {
		case TooBig:
			m = message{typ: uint8(header.ICMPv6PacketTooBig)}
		case TimeExceeded:
			m = message{typ: uint8(header.ICMPv6TimeExceeded), code: uint8(header.ICMPv6HopLimitExceeded)}
		}
		to = netip.AddrFrom16(header.IPv6(orig).SourceAddress().As16())
	}
	return to, m, ok
}

// allow decides for an error of type typ and code to the destination to,
// ICMPv6 if to is an IPv6 address.
func (l *Limiter) allow(to netip.Addr, typ, code uint8) bool {
	if !l.limited(to.Is6(), typ, code) {
		return true
	}
	interval := l.lim.Ratelimit4
	if to.Is6() {
		interval = l.lim.Ratelimit6
	}
	ms := l.now().Sub(l.epoch).Milliseconds()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.globalAllow(ms) {
		return false
	}
	if interval > 0 && !l.peers.get(to, ms).allow(ms, interval.Milliseconds()) {
		return false
	}
	l.credit -= int64(l.rng.Uint64() % 3)
	return true
}

// limited reports whether errors of a type and code are rate limited at
// all (icmpv4_mask_allow, icmpv6_mask_allow).
func (l *Limiter) limited(v6 bool, typ, code uint8) bool {
	switch {
	case v6:
		return l.lim.Ratemask6[typ/64]&(1<<(typ%64)) != 0
	case typ > maxNR4 || (typ == uint8(header.ICMPv4DstUnreachable) && code == uint8(header.ICMPv4FragmentationNeeded)):
		return false // never limit path MTU discovery
	}
	return l.lim.Ratemask4&(1<<typ) != 0
}

// globalAllow is icmp_global_allow: yes while credit remains, else the
// bucket refills by the time since its last refill, if 20 ms have passed
// and that earns a credit, up to the burst, and says yes even if the
// credit is still not above zero.
func (l *Limiter) globalAllow(ms int64) bool {
	if l.credit > 0 {
		return true
	}
	delta := min(ms-l.stamp, refillMax)
	if delta < refillEvery {
		return false
	}
	incr := int64(l.lim.MsgsPerSec) * delta / refillMax
	if incr <= 0 {
		return false
	}
	l.stamp = ms
	l.credit = min(l.credit+incr, int64(l.lim.MsgsBurst))
	return true
}

// peer is a destination's bucket (struct inet_peer's rate_tokens and
// rate_last), in milliseconds.
type peer struct {
	addr  netip.Addr
	token int64
	last  int64
}

// allow is inet_peer_xrlim_allow: the bucket earns a token a millisecond
// up to burstFactor intervals, and an error costs one interval.
func (p *peer) allow(ms, interval int64) bool {
	if delta := ms - p.last; delta > 0 {
		p.last = ms
		p.token = min(p.token+delta, burstFactor*interval)
	}
	if p.token < interval {
		return false
	}
	p.token -= interval
	return true
}

// peerTable is a bounded set-associative table of destination buckets.
type peerTable struct {
	seed maphash.Seed
	sets [][ways]peer
	mask uint64
}

// init sizes the table for at least n destinations.
func (t *peerTable) init(n int) {
	sets := 1
	for sets*ways < n {
		sets <<= 1
	}
	t.seed, t.sets, t.mask = maphash.MakeSeed(), make([][ways]peer, sets), uint64(sets-1)
}

// get returns the bucket of a, new if a is not in the table, in place of
// an empty way of its set or else of the least recently seen.
func (t *peerTable) get(a netip.Addr, ms int64) *peer {
	key := a.As16()
	set := &t.sets[maphash.Bytes(t.seed, key[:])&t.mask]
	victim := &set[0]
	for i := range set {
		p := &set[i]
		if p.addr == a {
			return p
		}
		if !p.addr.IsValid() {
			victim = p
			break
		}
		if p.last < victim.last {
			victim = p
		}
	}
	*victim = peer{addr: a, last: ms - newPeerAge}
	return victim
}
