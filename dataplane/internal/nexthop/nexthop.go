package nexthop

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// State is what Lookup knows of a destination's next hop.
type State uint8

const (
	// Pending: the next hop is being resolved, or will be once fewer
	// than Config.MaxPending resolutions are under way. Queue the frame
	// or drop it, and look again when Changed moves.
	Pending State = iota
	// Resolved: the MAC address is the next hop's.
	Resolved
	// Failed: the kernel could not resolve the next hop recently. Drop
	// the frame; the sender may be told with ICMP host unreachable.
	Failed
)

var stateNames = [...]string{Pending: "pending", Resolved: "resolved", Failed: "failed"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", s)
}

// Config configures a Resolver. Zero fields take their defaults.
type Config struct {
	// Ifindex is the interface the packets leave by (required).
	Ifindex int
	// Gateway, if valid, is the next hop of every destination; else a
	// destination's next hop is the gateway of its route through the
	// interface, or the destination itself (on link).
	Gateway netip.Addr
	// MaxEntries bounds the cache: destinations (or the gateway) it
	// remembers (default 4096).
	MaxEntries int
	// MaxPending bounds the resolutions under way (default 256, at most
	// half of MaxEntries): a miss beyond it is answered Pending without
	// starting one. The kernel keeps at most gc_thresh3 (1024)
	// neighbours per family.
	MaxPending int
	// FailedTTL is how long a failure is remembered before a Lookup
	// tries again (default 1 s).
	FailedTTL time.Duration
	// Revalidate is how often, at most, an entry in use is checked
	// against the kernel's route and refreshed in its neighbour table so
	// that the kernel keeps verifying the neighbour (default 1 s).
	Revalidate time.Duration
	// Timeout fails a resolution the kernel has not settled by then
	// (default 5 s: the kernel's own failure comes after 3 probes, 1 s
	// apart).
	Timeout time.Duration
}

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("nexthop: invalid config")

// withDefaults fills in the zero fields and checks the others.
func (c Config) withDefaults() (Config, error) {
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if c.MaxEntries == 0 {
		c.MaxEntries = 4096
	}
	if c.MaxPending == 0 {
		c.MaxPending = min(256, c.MaxEntries/2)
	}
	def(&c.FailedTTL, time.Second)
	def(&c.Revalidate, time.Second)
	def(&c.Timeout, 5*time.Second)
	switch {
	case c.Ifindex <= 0:
		return c, fmt.Errorf("%w: ifindex %d", ErrConfig, c.Ifindex)
	case c.MaxPending < 1 || c.MaxPending > c.MaxEntries/2:
		return c, fmt.Errorf("%w: %d pending of %d entries (1 to half)", ErrConfig, c.MaxPending, c.MaxEntries)
	case c.FailedTTL < 0 || c.Revalidate < 0 || c.Timeout < 0:
		return c, fmt.Errorf("%w: negative time", ErrConfig)
	}
	c.Gateway = c.Gateway.Unmap()
	return c, nil
}

// Stats counts what a Resolver did.
type Stats struct {
	Hits, Misses uint64 // lookups answered from the cache, and not
	Started      uint64 // resolutions started
	Succeeded    uint64 // resolutions that gave a MAC address
	Failed       uint64 // resolutions that failed (the kernel's failure, an error or Timeout)
	Refused      uint64 // misses not started: MaxPending resolutions were under way, or the worker far behind
	Evictions    uint64 // entries dropped to make room
	Resyncs      uint64 // neighbour notifications lost (socket overflow) and the subscription renewed
	Entries      int    // destinations cached now
	Pending      int    // resolutions under way now
}

// tick is how often the resolver's clock advances and it looks for
// resolutions past Timeout and failures past FailedTTL.
const tick = 100 * time.Millisecond

// job is work for the resolver's worker.
type job struct {
	key     netip.Addr
	recheck bool // re-validate a resolved entry, rather than resolve
	renew   bool // resolve with a fresh solicitation (see LinkUp)
}

// Resolver resolves destinations leaving one interface to MAC addresses.
// It may be used from several goroutines.
type Resolver struct {
	cfg Config
	// clock is a coarse copy of now, advanced every tick, for Lookup to
	// read cheaply; it is never ahead of now, so an entry never expires
	// early when its deadline was set with now.
	clock   atomic.Int64
	now     func() int64  // milliseconds since the start
	version atomic.Uint64 // see Changed
	jobs    chan job

	mu    sync.Mutex
	tab   table
	stats Stats
	wake  chan struct{} // closed by the next change, for Wake; nil until asked for

	sys *system // the kernel side
}

// newResolver returns a resolver without its kernel side, whose time is
// only what advance sets.
func newResolver(cfg Config) *Resolver {
	r := &Resolver{cfg: cfg, tab: newTable(cfg.MaxEntries), jobs: make(chan job, 2*cfg.MaxPending)}
	r.now = r.clock.Load
	return r
}

// Lookup returns the MAC address of the next hop of packets to dst, and
// whether it is Resolved, Pending or Failed. It never waits: a miss, or
// a failure older than FailedTTL, starts a resolution in the background
// and answers Pending. A resolved destination whose neighbour the kernel
// deleted is resolved again, and answers its last MAC address as
// Resolved meanwhile. It allocates nothing when dst is cached.
func (r *Resolver) Lookup(dst netip.Addr) (mac [6]byte, st State) {
	key := dst.Unmap()
	switch {
	case r.cfg.Gateway.IsValid():
		key = r.cfg.Gateway
	case !key.IsValid():
		return mac, Failed
	}
	now := r.clock.Load()
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.tab.get(key)
	if e != nil && e.state == Failed && now >= e.until && r.canStart() {
		r.tab.remove(e) // try again
		e = nil
	}
	if e == nil {
		r.stats.Misses++
		r.start(key)
		return mac, Pending
	}
	r.stats.Hits++
	e.used = true
	if e.state == Resolved && now >= e.until && !e.queued {
		r.queueRecheck(e)
	}
	if e.stale {
		return e.mac, Resolved
	}
	return e.mac, e.state
}

// Changed returns a number that changes whenever a lookup may answer
// differently: a resolution succeeded or failed, a MAC address changed,
// an entry was dropped, the link came up. A caller queuing frames for
// Pending destinations looks them up again when it moves; reading it
// costs an atomic load.
func (r *Resolver) Changed() uint64 { return r.version.Load() }

// closedChan is a channel that is always closed.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Wake returns a channel that is closed once Changed is no longer v: at
// once if it already moved. It lets a caller wait for a change without
// polling.
func (r *Resolver) Wake(v uint64) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.version.Load() != v {
		return closedChan
	}
	if r.wake == nil {
		r.wake = make(chan struct{})
	}
	return r.wake
}

// bump records a change (see Changed) and wakes Wake's waiters; r.mu is
// held.
func (r *Resolver) bump() {
	r.version.Add(1)
	if r.wake != nil {
		close(r.wake)
		r.wake = nil
	}
}

// Stats returns the counters.
func (r *Resolver) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Entries, s.Pending = len(r.tab.index), r.tab.pending
	return s
}

// canStart reports whether a resolution may start: fewer than
// MaxPending are under way and the worker's queue has room.
func (r *Resolver) canStart() bool {
	return r.tab.pending < r.cfg.MaxPending && len(r.jobs) < cap(r.jobs)
}

// start begins resolving key, if it can.
func (r *Resolver) start(key netip.Addr) {
	if !r.canStart() {
		r.stats.Refused++
		return
	}
	e, evicted := r.tab.add(key)
	if evicted {
		r.stats.Evictions++
	}
	e.until = r.now() + r.cfg.Timeout.Milliseconds()
	r.stats.Started++
	r.jobs <- job{key: key} // there is room: every sender holds r.mu
}

// queueRecheck asks the worker to re-validate a resolved entry, if it
// has room.
func (r *Resolver) queueRecheck(e *entry) {
	select {
	case r.jobs <- job{key: e.dst, recheck: true}:
		e.queued, e.until = true, r.now()+r.cfg.Revalidate.Milliseconds()
	default:
	}
}

// neigh is what the kernel says of a neighbour, copied out of its
// netlink message.
type neigh struct {
	kind   neighKind
	mac    [6]byte
	static bool // NUD_PERMANENT or NUD_NOARP: never probe it
}

type neighKind uint8

const (
	unsettled neighKind = iota // being resolved (NUD_INCOMPLETE) or unknown to the kernel
	usable                     // has a MAC address to send to
	failed                     // NUD_FAILED
	gone                       // deleted (RTM_DELNEIGH)
)

// setHop records the next hop of a destination being resolved, and
// reports whether it still is. The worker calls it before it asks the
// kernel about hop, so that no notification about hop is missed; the
// Timeout counts from then, not from the time the job waited.
func (r *Resolver) setHop(key, hop netip.Addr) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.tab.get(key)
	if e == nil || e.state != Pending {
		return false
	}
	r.tab.setHop(e, hop)
	e.until = r.now() + r.cfg.Timeout.Milliseconds()
	return true
}

// settle applies what the kernel says of hop to the entries through it:
// all of them for a notification, only those still Pending for the
// answer to the worker's query (a notification may have come since).
func (r *Resolver) settle(hop netip.Addr, n neigh, pendingOnly bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	r.tab.through(hop, func(e *entry) {
		if !pendingOnly || e.state == Pending {
			r.apply(e, n, now)
		}
	})
}

// apply changes an entry by what the kernel says of its next hop.
func (r *Resolver) apply(e *entry, n neigh, now int64) {
	switch n.kind {
	case usable:
		e.static = n.static
		if e.state == Resolved && e.mac == n.mac {
			return
		}
		if e.state == Pending {
			r.stats.Succeeded++
		}
		r.tab.setState(e, Resolved)
		e.mac, e.until = n.mac, now+r.cfg.Revalidate.Milliseconds()
	case failed:
		switch e.state {
		case Pending:
			r.fail(e, now)
		case Resolved: // resolve again, as the kernel does for the next packet
			r.restart(e, now, false)
		}
		return
	case gone:
		if e.state == Resolved {
			r.restart(e, now, true)
		}
		return
	default:
		return
	}
	r.bump()
}

// restart resolves a resolved entry again: its neighbour failed, and
// only a resolution that fails makes it Failed; or the kernel deleted
// it (stale), as it deletes a link's neighbours when the link goes down
// (neigh_flush_dev) or an administrator does: Lookup then answers its
// MAC address as resolved while it is resolved again, as the kernel
// sends to a stale neighbour while it verifies it. Without room for a
// resolution a failed entry fails at once, and a deleted one is dropped
// (the next lookup resolves it).
func (r *Resolver) restart(e *entry, now int64, stale bool) {
	switch {
	case !r.canStart() && stale:
		r.tab.remove(e)
		r.bump()
		return
	case !r.canStart():
		r.fail(e, now)
		return
	}
	r.tab.setState(e, Pending)
	e.stale, e.until = stale, now+r.cfg.Timeout.Milliseconds()
	if !stale {
		e.mac = [6]byte{}
	}
	r.stats.Started++
	r.jobs <- job{key: e.dst} // there is room: every sender holds r.mu
	r.bump()
}

// fail marks an entry Failed until FailedTTL from now.
func (r *Resolver) fail(e *entry, now int64) {
	if e.state == Pending {
		r.stats.Failed++
	}
	r.tab.setState(e, Failed)
	e.until = now + r.cfg.FailedTTL.Milliseconds()
	r.bump()
}

// failKey fails the resolution of key, if it is still under way.
func (r *Resolver) failKey(key netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.tab.get(key); e != nil && e.state == Pending {
		r.fail(e, r.now())
	}
}

// rechecked takes the worker's re-validation of key, whose route now
// goes through hop: an entry whose next hop changed is dropped (the next
// lookup resolves the new one). It reports whether the entry is static,
// and false if it is gone, dropped or not resolved.
func (r *Resolver) rechecked(key, hop netip.Addr) (static, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.tab.get(key)
	if e == nil || e.state != Resolved {
		return false, false
	}
	e.queued = false
	if e.hop != hop {
		r.tab.remove(e)
		r.bump()
		return false, false
	}
	return e.static, true
}

// advance sets the clock to now and fails the resolutions past Timeout
// and forgets the failures past FailedTTL.
func (r *Resolver) advance(now int64) {
	r.clock.Store(now)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tab.all(func(e *entry) {
		switch {
		case e.state == Pending && now >= e.until:
			r.fail(e, now)
		case e.state == Failed && now >= e.until:
			r.tab.remove(e)
		}
	})
}

// LinkUp tells the resolver that its interface is up again after it was
// down. The kernel flushed the interface's neighbours when it went down
// (neigh_ifdown, neigh_carrier_down), and the resolved entries followed
// the deletions. What it did while the link was down says nothing of the
// neighbours: a failure then is forgotten, and a resolution under way
// starts again with a fresh solicitation, since the kernel's was lost on
// the down link and it would ask again only after retrans_time (1 s).
// Changed moves: a caller that held back while the link was down looks
// again.
func (r *Resolver) LinkUp() {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	defer r.bump()
	r.tab.all(func(e *entry) {
		switch e.state {
		case Failed:
			r.tab.remove(e)
		case Pending:
			select {
			case r.jobs <- job{key: e.dst, renew: true}:
				e.until = now + r.cfg.Timeout.Milliseconds()
			default: // Timeout settles it
			}
		}
	})
}

// resync follows lost notifications: resolved entries are re-validated
// at their next lookup and resolutions under way asked again.
func (r *Resolver) resync() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stats.Resyncs++
	r.tab.all(func(e *entry) {
		switch e.state {
		case Resolved:
			e.until = 0
		case Pending:
			select {
			case r.jobs <- job{key: e.dst}:
			default: // Timeout settles it
			}
		}
	})
}
