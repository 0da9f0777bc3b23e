package txqueue

import (
	"context"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for the optional BudgetConfig fields.
const (
	DefaultFlowShare = 50          // percent of the limit one flow may hold
	DefaultFlows     = 256         // per-flow counters
	DefaultHold      = time.Second // standing-queue window before a shrink
	maxFlows         = 1 << 16
)

// BudgetConfig configures a Budget. Burst and Limit are required; zero in
// any other field selects its documented default.
type BudgetConfig struct {
	// Burst is the most a producer charges per admission: one worst-case
	// super-packet's segment count times one segment's truesize, for
	// example 45*Truesize(2048) for a 64 KiB TSO packet in 2 KiB frames,
	// or one chunk's, for a producer that admits each chunk of a larger
	// super-packet on its own. A producer is admitted only while there is
	// room for a whole Burst.
	Burst int

	// Limit is the most the owner may have in flight, in truesize bytes; at
	// least Burst. With Fixed it is the limit; otherwise it is the ceiling of
	// the self-sizing limit, which starts at Burst.
	Limit int

	// Fixed keeps the limit at Limit instead of sizing it from completions.
	Fixed bool

	// FlowShare is the percentage of the current limit that one flow may
	// hold, 1 to 100 (default 50). A flow may always hold one Burst.
	FlowShare int

	// Flows is the number of per-flow counters, rounded up to a power of two
	// (default 256, at most 65536). Flow keys are hashed onto them; flows
	// that collide share one counter, and so one share.
	Flows int

	// Hold is how long a standing queue must last before the self-sizing
	// limit shrinks (default 1s, BQL's hold time).
	Hold time.Duration
}

// A Budget is one owner's send budget, the analogue of a socket's
// sk_wmem_alloc against its sk_sndbuf. Every segment of the owner is charged
// its truesize when it is queued and released when the sink reports it gone;
// a Queue does both for the Items that name the Budget as their Owner.
//
// Admission. Before taking the next super-packet from its source, a producer
// calls Admit (blocking) or TryAdmit (non-blocking) with the packet's flow
// key. Admission succeeds while
//
//	inflight + Burst <= limit  and  flow's inflight + Burst <= flow limit
//
// where the flow limit is FlowShare percent of the limit, and at least one
// Burst (TCP Small Queues: a bulk flow cannot take the whole budget). A
// producer that charges at most one Burst per admission therefore keeps the
// owner within its limit; each further producer admitted concurrently on the
// same Budget can add one more Burst.
//
// Wake-ups. A refused producer is woken once, when the budget has drained
// to its wake mark, not on every release: when in-flight bytes fall to
// min(limit-Burst, limit/2), and the flow's to the same mark of the flow
// limit. The half-limit hysteresis, like the kernel's sk_stream_write_space,
// lets the woken producer queue many super-packets per wake-up.
//
// Self-sizing limit (unless Fixed): a simplified Linux BQL (dynamic queue
// limits) over the owner's in-flight bytes, run on each release:
//   - Grow on starvation: if a producer was refused since in-flight last
//     drained to zero, and a release drains it to zero, the sink ran dry
//     while work was held back. The limit grows by the bytes just released,
//     at least one Burst (BQL: the bytes completed in the interval).
//   - Shrink on a standing queue: each release records its slack, the bytes
//     still in flight after it less one more release of the same size (a
//     margin, as BQL keeps). After Hold without starvation, the limit
//     shrinks by the lowest slack of the window: bytes that stayed queued
//     the whole time and so were never needed to keep the sink busy. A
//     window in which in-flight bytes fall to within one release of zero
//     has no slack, so an owner limited by its source never shrinks.
//   - The limit stays within [Burst, Limit] and starts at Burst.
//
// All methods are safe for concurrent use.
type Budget struct {
	inflight atomic.Int64
	limit    atomic.Int64
	peak     atomic.Int64
	nwait    atomic.Int32 // len(waiters), readable without mu
	refused  atomic.Bool  // a producer was refused since inflight was last 0
	closed   atomic.Bool

	burst   int64
	ceiling int64
	share   int64 // percent
	fixed   bool
	flows   []atomic.Int64
	shift   uint // hash shift onto flows

	mu      sync.Mutex
	waiters waitList
	spares  spares
	poll    waiter // the event loop's waiter, behind Ready

	sizer sizer

	refusals, stalls, stallNanos, grown, shrunk atomic.Uint64
}

// sizer is the self-sizing limit's window state.
type sizer struct {
	mu     sync.Mutex // TryLock: a release that finds it busy skips its sample
	now    func() time.Time
	hold   time.Duration
	start  time.Time
	lowest int64
}

// BudgetStats is a snapshot of a Budget.
type BudgetStats struct {
	Limit     int64         // current limit, bytes
	InFlight  int64         // charged and not yet released, bytes
	Peak      int64         // highest InFlight seen, bytes
	Refused   uint64        // admissions refused (TryAdmit or Admit had to wait)
	Stalls    uint64        // Admit calls that blocked
	StallTime time.Duration // total time spent blocked in Admit
	Grown     uint64        // self-sizing limit increases
	Shrunk    uint64        // self-sizing limit decreases
}

// Add returns the sum of two budgets' counters, as for the budgets of
// several sources feeding one sink. The peak is the sum of the peaks, an
// upper bound of the joint one.
func (s BudgetStats) Add(o BudgetStats) BudgetStats {
	s.Limit += o.Limit
	s.InFlight += o.InFlight
	s.Peak += o.Peak
	s.Refused += o.Refused
	s.Stalls += o.Stalls
	s.StallTime += o.StallTime
	s.Grown += o.Grown
	s.Shrunk += o.Shrunk
	return s
}

// NewBudget returns a Budget with nothing in flight.
func NewBudget(cfg BudgetConfig) (*Budget, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	n := 1 << bits.Len(uint(cfg.Flows-1))
	b := &Budget{
		burst:   int64(cfg.Burst),
		ceiling: int64(cfg.Limit),
		share:   int64(cfg.FlowShare),
		fixed:   cfg.Fixed,
		flows:   make([]atomic.Int64, n),
		shift:   uint(64 - bits.TrailingZeros(uint(n))),
		poll:    waiter{ch: make(chan struct{}, 1)},
		sizer:   sizer{now: time.Now, hold: cfg.Hold, lowest: maxSlack},
	}
	b.sizer.start = b.sizer.now()
	if cfg.Fixed {
		b.limit.Store(b.ceiling)
	} else {
		b.limit.Store(b.burst)
	}
	return b, nil
}

func (c *BudgetConfig) withDefaults() error {
	bad := func(what string, v any) error {
		return fmt.Errorf("txqueue: budget %s %v: %w", what, v, ErrInvalid)
	}
	if c.FlowShare == 0 {
		c.FlowShare = DefaultFlowShare
	}
	if c.Flows == 0 {
		c.Flows = DefaultFlows
	}
	if c.Hold == 0 {
		c.Hold = DefaultHold
	}
	switch {
	case c.Burst <= 0:
		return bad("burst", c.Burst)
	case c.Limit < c.Burst:
		return bad("limit below burst: limit", c.Limit)
	case c.FlowShare < 0 || c.FlowShare > 100:
		return bad("flow share", c.FlowShare)
	case c.Flows < 0 || c.Flows > maxFlows:
		return bad("flows", c.Flows)
	case c.Hold < 0:
		return bad("hold", c.Hold)
	}
	return nil
}

// TryAdmit reports whether a producer may take its next super-packet of flow
// now: nil if so, ErrWouldBlock if not, ErrClosed after Close. After
// ErrWouldBlock, Ready is signalled when admission becomes possible.
func (b *Budget) TryAdmit(flow uint64) error {
	if err := b.admit(flow); err != ErrWouldBlock {
		return err
	}
	return b.register(&b.poll, flow)
}

// Ready returns the channel that is signalled, once, after TryAdmit
// refused a flow, when the budget and that flow have drained to their wake
// marks (see Budget), or when the budget is closed. The signal can be stale:
// call TryAdmit again on receiving it. Ready serves one event loop; it tracks
// the flow of the last refused TryAdmit.
func (b *Budget) Ready() <-chan struct{} { return b.poll.ch }

// Admit blocks until a producer may take its next super-packet of flow, ctx
// ends (returning ctx.Err()) or the budget is closed (ErrClosed).
func (b *Budget) Admit(ctx context.Context, flow uint64) error {
	if err := b.admit(flow); err != ErrWouldBlock {
		return err
	}
	return b.wait(ctx, flow)
}

func (b *Budget) wait(ctx context.Context, flow uint64) error {
	b.stalls.Add(1)
	defer b.stalled(time.Now())
	b.mu.Lock()
	w := b.spares.get()
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.spares.put(w)
		b.mu.Unlock()
	}()
	for {
		if err := b.register(w, flow); err != ErrWouldBlock {
			return err
		}
		select {
		case <-w.ch:
		case <-ctx.Done():
			b.mu.Lock()
			b.waiters.cancel(w)
			b.syncWaiters()
			b.mu.Unlock()
			return ctx.Err()
		}
	}
}

func (b *Budget) stalled(start time.Time) {
	b.stallNanos.Add(uint64(time.Since(start)))
}

// admit is the lock-free admission test.
func (b *Budget) admit(flow uint64) error {
	switch {
	case b.closed.Load():
		return ErrClosed
	case b.admissible(flow):
		return nil
	}
	b.refused.Store(true)
	b.refusals.Add(1)
	return ErrWouldBlock
}

// register parks w for flow, unless the budget was closed (ErrClosed) or
// became admissible meanwhile (nil). Publishing the waiter before checking
// again pairs with release, which changes inflight before reading nwait: one
// of the two sees the other, so no wake-up is lost.
func (b *Budget) register(w *waiter, flow uint64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return ErrClosed
	}
	w.flow = flow
	b.waiters.add(w)
	b.syncWaiters()
	if !b.admissible(flow) {
		return ErrWouldBlock
	}
	b.waiters.remove(w)
	b.syncWaiters()
	return nil
}

func (b *Budget) syncWaiters() { b.nwait.Store(int32(len(b.waiters))) }

func (b *Budget) admissible(flow uint64) bool {
	limit := b.limit.Load()
	return b.inflight.Load()+b.burst <= limit &&
		b.slot(flow).Load()+b.burst <= b.flowLimit(limit)
}

func (b *Budget) wakeable(flow uint64) bool {
	limit := b.limit.Load()
	return b.inflight.Load() <= b.wakeMark(limit) &&
		b.slot(flow).Load() <= b.wakeMark(b.flowLimit(limit))
}

func (b *Budget) flowLimit(limit int64) int64 {
	return max(b.burst, limit*b.share/100)
}

func (b *Budget) wakeMark(limit int64) int64 {
	return min(limit-b.burst, limit/2)
}

// slot returns flow's counter.
func (b *Budget) slot(flow uint64) *atomic.Int64 { return &b.flows[b.flowIndex(flow)] }

// flowIndex hashes the caller's key onto the counters (Fibonacci hashing).
func (b *Budget) flowIndex(flow uint64) uint64 { return (flow * 0x9e3779b97f4a7c15) >> b.shift }

// Charge accounts one segment of flow with the given truesize as in flight.
// Queue.Enqueue charges its Items' owners itself. Charge never blocks or
// refuses for lack of room (admission is the gate); it returns ErrInvalid
// for a negative size and ErrTooLarge for one larger than Burst.
func (b *Budget) Charge(flow uint64, truesize int) error {
	if err := b.checkSize(truesize); err != nil {
		return err
	}
	b.charge(flow, int64(truesize))
	return nil
}

// Release returns the charge of a segment that the sink reported gone.
// Queue.Complete releases its Items' owners itself. Releasing more than is
// in flight, for the budget or the flow, changes nothing and returns
// ErrInvalid.
func (b *Budget) Release(flow uint64, truesize int) error {
	if err := b.checkSize(truesize); err != nil {
		return err
	}
	return b.release(flow, int64(truesize))
}

func (b *Budget) checkSize(n int) error {
	switch {
	case n < 0:
		return fmt.Errorf("txqueue: truesize %d: %w", n, ErrInvalid)
	case int64(n) > b.burst:
		return fmt.Errorf("txqueue: truesize %d above burst %d: %w", n, b.burst, ErrTooLarge)
	}
	return nil
}

func (b *Budget) charge(flow uint64, n int64) {
	v := b.inflight.Add(n)
	b.slot(flow).Add(n)
	for p := b.peak.Load(); v > p && !b.peak.CompareAndSwap(p, v); p = b.peak.Load() {
	}
}

func (b *Budget) release(flow uint64, n int64) error {
	s := b.slot(flow)
	in, f := b.inflight.Add(-n), s.Add(-n)
	if in < 0 || f < 0 {
		b.inflight.Add(n)
		s.Add(n)
		return fmt.Errorf("txqueue: release of %d bytes exceeds the charge: %w", n, ErrInvalid)
	}
	if b.nwait.Load() > 0 {
		limit := b.limit.Load()
		if crossed(in, n, b.wakeMark(limit)) || crossed(f, n, b.wakeMark(b.flowLimit(limit))) {
			b.wake()
		}
	}
	if !b.fixed {
		b.adapt(in, n)
	}
	return nil
}

// crossed reports whether a release of n that left v fell through mark.
func crossed(v, n, mark int64) bool { return v <= mark && v+n > mark }

func (b *Budget) wake() {
	b.mu.Lock()
	b.waiters.wakeIf(func(w *waiter) bool { return b.wakeable(w.flow) })
	b.syncWaiters()
	b.mu.Unlock()
}

// Close stops admission: blocked and later Admit and TryAdmit calls return
// ErrClosed, and Ready is signalled. Charges still in flight are released as
// usual. A second Close returns ErrClosed.
func (b *Budget) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Swap(true) {
		return ErrClosed
	}
	b.waiters.wakeIf(func(*waiter) bool { return true })
	b.syncWaiters()
	return nil
}

// Stats returns a snapshot of the budget's counters.
func (b *Budget) Stats() BudgetStats {
	return BudgetStats{
		Limit:     b.limit.Load(),
		InFlight:  b.inflight.Load(),
		Peak:      b.peak.Load(),
		Refused:   b.refusals.Load(),
		Stalls:    b.stalls.Load(),
		StallTime: time.Duration(b.stallNanos.Load()),
		Grown:     b.grown.Load(),
		Shrunk:    b.shrunk.Load(),
	}
}
