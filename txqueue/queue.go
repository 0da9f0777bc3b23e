package txqueue

import (
	"context"
	"fmt"
	"math/bits"
	"sync"
	"time"
)

// Policy says what a full Queue does with more segments.
type Policy uint8

const (
	// Block makes producers wait for room: nothing is ever dropped. With a
	// Budget in front it is the production mode.
	Block Policy = iota + 1
	// DropTail drops the segments that do not fit and counts them. It is
	// kept to demonstrate the failure mode that budgets prevent.
	DropTail
)

func (p Policy) String() string {
	switch p {
	case Block:
		return "block"
	case DropTail:
		return "droptail"
	}
	return fmt.Sprintf("Policy(%d)", p)
}

// DropReason says why segments were not enqueued; it indexes Stats.Dropped.
type DropReason uint8

// Drop reasons.
const (
	DropPackets  DropReason = iota // DropTail: packet limit reached
	DropBytes                      // DropTail: byte limit reached
	DropTooLarge                   // a segment could never fit (ErrTooLarge)
	DropInvalid                    // a negative size (ErrInvalid)
	DropClosed                     // the queue was closed (ErrClosed)
	numDropReasons
)

func (r DropReason) String() string {
	switch r {
	case DropPackets:
		return "packets"
	case DropBytes:
		return "bytes"
	case DropTooLarge:
		return "too-large"
	case DropInvalid:
		return "invalid"
	case DropClosed:
		return "closed"
	}
	return fmt.Sprintf("DropReason(%d)", r)
}

const maxPackets = 1 << 24

// QueueConfig configures a Queue. Every field is required.
type QueueConfig struct {
	Policy  Policy
	Packets int // most segments held (pending plus awaiting completion)
	Bytes   int // most truesize bytes held
}

// An Item is one segment in a Queue. Value is the caller's handle on the
// segment's data, such as a UMEM frame address or a buffer index.
type Item[T any] struct {
	Owner *Budget // charged Size on enqueue, released on completion; nil: none
	Flow  uint64  // the owner's flow key, such as a 5-tuple hash
	Size  int     // truesize in bytes (see Truesize)
	Value T
}

// Stats is a snapshot of a Queue's counters, in segments unless named
// bytes. Held segments are pending (waiting for the sink) or in flight
// (dequeued by the sink, not yet completed).
type Stats struct {
	Enqueued  uint64
	Dequeued  uint64
	Completed uint64
	Discarded uint64 // held segments released by Close
	Dropped   [numDropReasons]uint64

	Pending       int
	PendingBytes  int64
	InFlight      int
	InFlightBytes int64
	PeakHeld      int   // high-water mark of held segments
	PeakHeldBytes int64 // high-water mark of held bytes

	Stalls    uint64        // Enqueue calls that blocked on a full queue
	StallTime time.Duration // total time spent blocked in Enqueue
}

// Add returns the sum of two queues' counters; peaks add up as in
// BudgetStats.Add.
func (s Stats) Add(o Stats) Stats {
	s.Enqueued += o.Enqueued
	s.Dequeued += o.Dequeued
	s.Completed += o.Completed
	s.Discarded += o.Discarded
	for i := range s.Dropped {
		s.Dropped[i] += o.Dropped[i]
	}
	s.Pending += o.Pending
	s.PendingBytes += o.PendingBytes
	s.InFlight += o.InFlight
	s.InFlightBytes += o.InFlightBytes
	s.PeakHeld += o.PeakHeld
	s.PeakHeldBytes += o.PeakHeldBytes
	s.Stalls += o.Stalls
	s.StallTime += o.StallTime
	return s
}

// A Queue is the bounded transmit queue between segmentation and the sink:
// many producers Enqueue, one sink Dequeues, transmits, and reports
// completions in order with Complete, like an AF_XDP completion ring. A
// segment stays held, and charged to its owner, until it completes; the
// packet and byte limits bound everything held.
//
// The ring is guarded by one mutex, taken once per batch, and runs of
// segments with the same owner and flow are charged and released with one
// atomic update each, so the per-segment cost is a copy. The hot path does
// not allocate.
//
// All methods are safe for concurrent use; Dequeue and Complete are meant
// for a single sink, which is what makes the completion order meaningful.
type Queue[T any] struct {
	mu      sync.Mutex
	ring    []Item[T]
	mask    uint64
	done    uint64 // oldest segment not completed
	head    uint64 // oldest pending segment; [done, head) are in flight
	tail    uint64 // next free slot; [head, tail) are pending
	held    int64  // bytes in [done, tail)
	pending int64  // bytes in [head, tail)
	closed  bool
	waiters waitList
	spares  spares
	ready   chan struct{}

	policy   Policy
	maxPk    int
	maxBytes int64

	st Stats // counters; gauges are filled in by Stats
}

// NewQueue returns an empty queue.
func NewQueue[T any](cfg QueueConfig) (*Queue[T], error) {
	switch {
	case cfg.Policy != Block && cfg.Policy != DropTail:
		return nil, fmt.Errorf("txqueue: queue policy %v: %w", cfg.Policy, ErrInvalid)
	case cfg.Packets <= 0 || cfg.Packets > maxPackets:
		return nil, fmt.Errorf("txqueue: queue packet limit %d: %w", cfg.Packets, ErrInvalid)
	case cfg.Bytes <= 0:
		return nil, fmt.Errorf("txqueue: queue byte limit %d: %w", cfg.Bytes, ErrInvalid)
	}
	n := 1 << bits.Len(uint(cfg.Packets-1))
	return &Queue[T]{
		ring:     make([]Item[T], n),
		mask:     uint64(n - 1),
		ready:    make(chan struct{}, 1),
		policy:   cfg.Policy,
		maxPk:    cfg.Packets,
		maxBytes: int64(cfg.Bytes),
	}, nil
}

// Enqueue appends items in order, charging each to its Owner, and returns
// how many it took. Segments are taken in order while they fit; then a Block
// queue waits for room (for ctx, returning ctx.Err() and leaving items[n:]
// with the caller) and a DropTail queue drops the rest, counts them and
// returns ErrQueueFull. A batch with a negative Size (ErrInvalid) or a
// segment that can never fit (ErrTooLarge) is rejected whole. On a closed
// queue the rest is dropped with ErrClosed.
func (q *Queue[T]) Enqueue(ctx context.Context, items []Item[T]) (int, error) {
	if err := q.check(items); err != nil {
		return 0, err
	}
	q.mu.Lock()
	n, full := q.push(items)
	if !full {
		q.mu.Unlock()
		return n, nil
	}
	return q.wait(ctx, items, n) // unlocks
}

// check rejects a batch that could never be enqueued.
func (q *Queue[T]) check(items []Item[T]) error {
	for i := range items {
		it := &items[i]
		switch {
		case it.Size < 0:
			q.drop(DropInvalid, len(items))
			return fmt.Errorf("txqueue: enqueue: segment %d size %d: %w", i, it.Size, ErrInvalid)
		case int64(it.Size) > q.maxBytes || it.Owner != nil && int64(it.Size) > it.Owner.burst:
			q.drop(DropTooLarge, len(items))
			return fmt.Errorf("txqueue: enqueue: segment %d size %d: %w", i, it.Size, ErrTooLarge)
		}
	}
	return nil
}

func (q *Queue[T]) drop(r DropReason, n int) {
	q.mu.Lock()
	q.st.Dropped[r] += uint64(n)
	q.mu.Unlock()
}

// push takes the items that fit, charging their owners. It returns how
// many, and whether some are left over (or the queue is closed); wait
// decides their fate. Called with q.mu held.
func (q *Queue[T]) push(items []Item[T]) (n int, full bool) {
	if q.closed {
		return 0, true
	}
	wasEmpty := q.head == q.tail
	var run, ended batch
	for n < len(items) {
		it := &items[n]
		size := int64(it.Size)
		if int(q.tail-q.done) == q.maxPk || q.held+size > q.maxBytes {
			break
		}
		q.ring[q.tail&q.mask] = *it
		q.tail++
		q.held += size
		q.pending += size
		if run, ended = run.next(it.Owner, it.Flow, size); ended.owner != nil {
			ended.owner.charge(ended.flow, ended.bytes)
		}
		n++
	}
	if run.owner != nil {
		run.owner.charge(run.flow, run.bytes)
	}
	q.st.Enqueued += uint64(n)
	q.st.PeakHeld = max(q.st.PeakHeld, int(q.tail-q.done))
	q.st.PeakHeldBytes = max(q.st.PeakHeldBytes, q.held)
	if wasEmpty && n > 0 {
		q.signalSink()
	}
	return n, n < len(items)
}

// wait finishes an Enqueue that did not fit, with q.mu held.
func (q *Queue[T]) wait(ctx context.Context, items []Item[T], n int) (int, error) {
	if err := q.refuse(len(items) - n); err != nil {
		q.mu.Unlock()
		return n, err
	}
	q.st.Stalls++
	start := time.Now()
	w := q.spares.get()
	for {
		q.need(w, items[n:])
		q.waiters.add(w)
		q.mu.Unlock()
		var err error
		select {
		case <-w.ch:
		case <-ctx.Done():
			err = ctx.Err()
		}
		q.mu.Lock()
		if err != nil {
			q.waiters.cancel(w)
		} else {
			k, full := q.push(items[n:])
			n += k
			if full {
				err = q.refuse(len(items) - n)
			}
		}
		if err != nil || n == len(items) {
			q.spares.put(w)
			q.st.StallTime += time.Since(start)
			q.mu.Unlock()
			return n, err
		}
	}
}

// refuse drops the n segments left over on a closed or DropTail queue and
// returns the error to report; on an open Block queue it returns nil: wait.
func (q *Queue[T]) refuse(n int) error {
	switch {
	case q.closed:
		q.st.Dropped[DropClosed] += uint64(n)
		return ErrClosed
	case q.policy == DropTail:
		r := DropPackets
		if int(q.tail-q.done) < q.maxPk {
			r = DropBytes
		}
		q.st.Dropped[r] += uint64(n)
		return ErrQueueFull
	}
	return nil
}

// need sets how much room wakes w: all of rest, but no more than half the
// queue, so that a producer is not woken for every completed segment.
func (q *Queue[T]) need(w *waiter, rest []Item[T]) {
	var bytes int64
	for i := range rest {
		bytes += int64(rest[i].Size)
	}
	w.packets = max(1, min(len(rest), q.maxPk/2))
	w.bytes = max(int64(rest[0].Size), min(bytes, q.maxBytes/2))
}

func (q *Queue[T]) signalSink() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// Ready returns the sink's channel: it is signalled when segments arrive in
// an empty queue, and on Close. A sink whose Dequeue returned 0 waits on it.
// The signal can be stale: Dequeue again on receiving it.
func (q *Queue[T]) Ready() <-chan struct{} { return q.ready }

// Dequeue moves up to len(out) pending segments, oldest first, into out and
// returns how many. They stay held, and charged, until Complete. It does not
// block: on 0, wait on Ready. It returns ErrClosed once the queue is closed.
func (q *Queue[T]) Dequeue(out []Item[T]) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return 0, ErrClosed
	}
	n := min(len(out), int(q.tail-q.head))
	var bytes int64
	for i := range out[:n] {
		out[i] = q.ring[(q.head+uint64(i))&q.mask]
		bytes += int64(out[i].Size)
	}
	q.head += uint64(n)
	q.pending -= bytes
	q.st.Dequeued += uint64(n)
	return n, nil
}

// Complete reports that the n oldest dequeued segments are gone (TX
// completion) and releases their charges. Completing more than is in flight
// completes what is and returns ErrInvalid. After Close, it returns
// ErrClosed: Close has released everything.
func (q *Queue[T]) Complete(n int) error {
	if n < 0 {
		return fmt.Errorf("txqueue: complete %d: %w", n, ErrInvalid)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ErrClosed
	}
	m := min(n, int(q.head-q.done))
	err := q.release(m)
	q.st.Completed += uint64(m)
	if len(q.waiters) > 0 {
		q.waiters.wakeIf(q.fits)
	}
	if m < n && err == nil {
		err = fmt.Errorf("txqueue: complete %d: only %d in flight: %w", n, m, ErrInvalid)
	}
	return err
}

func (q *Queue[T]) fits(w *waiter) bool {
	return q.maxPk-int(q.tail-q.done) >= w.packets && q.maxBytes-q.held >= w.bytes
}

// release frees the n oldest held segments and returns their charges to
// their owners, one atomic update per run. Called with q.mu held.
func (q *Queue[T]) release(n int) error {
	var run, ended batch
	var err error
	for range n {
		it := &q.ring[q.done&q.mask]
		size := int64(it.Size)
		if run, ended = run.next(it.Owner, it.Flow, size); ended.owner != nil {
			err = keepFirst(err, ended.owner.release(ended.flow, ended.bytes))
		}
		*it = Item[T]{}
		q.done++
		q.held -= size
	}
	if run.owner != nil {
		err = keepFirst(err, run.owner.release(run.flow, run.bytes))
	}
	return err
}

func keepFirst(err, next error) error {
	if err != nil {
		return err
	}
	return next
}

// Close releases every held segment's charge exactly once, pending and in
// flight alike, and discards the segments (a sink that must recycle their
// buffers drains the queue first). Producers blocked in Enqueue, and later
// calls, get ErrClosed; the sink's Ready is signalled. Close does not close
// the owners' Budgets. A second Close returns ErrClosed.
func (q *Queue[T]) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ErrClosed
	}
	q.closed = true
	n := q.tail - q.done
	err := q.release(int(n))
	q.head, q.pending = q.tail, 0
	q.st.Discarded += n
	q.waiters.wakeIf(func(*waiter) bool { return true })
	q.signalSink()
	return err
}

// Stats returns a snapshot of the queue's counters.
func (q *Queue[T]) Stats() Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.st
	s.Pending = int(q.tail - q.head)
	s.PendingBytes = q.pending
	s.InFlight = int(q.head - q.done)
	s.InFlightBytes = q.held - q.pending
	return s
}

// A batch is a run of consecutive segments with one owner and flow, charged
// or released as one.
type batch struct {
	owner *Budget
	flow  uint64
	bytes int64
}

// next adds a segment to the run, or starts a new run and returns the one
// it ended.
func (b batch) next(owner *Budget, flow uint64, size int64) (run, ended batch) {
	if owner == b.owner && flow == b.flow {
		b.bytes += size
		return b, batch{}
	}
	return batch{owner, flow, size}, b
}
