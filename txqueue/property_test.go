package txqueue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

// TestQueueModel drives a queue with random operations and checks it after
// each one against a plain FIFO model: what is accepted, dequeued and
// completed, the gauges, and every owner's and flow's charge.
func TestQueueModel(t *testing.T) {
	for seed := range uint64(30) {
		for _, policy := range []Policy{Block, DropTail} {
			t.Run(fmt.Sprintf("%v/%d", policy, seed), func(t *testing.T) {
				newModel(t, seed, policy).run(400)
			})
		}
	}
}

type model struct {
	t        *testing.T
	rng      *rand.Rand
	q        *Queue[int]
	owners   []*Budget // nil is a valid owner: not charged
	cfg      QueueConfig
	ctx      context.Context
	pending  []Item[int]
	inflight []Item[int]
	next     int
	out      []Item[int]
}

func newModel(t *testing.T, seed uint64, policy Policy) *model {
	rng := rand.New(rand.NewPCG(seed, 1))
	cfg := QueueConfig{Policy: policy, Packets: 1 + rng.IntN(16), Bytes: 3*ts + rng.IntN(10*ts)}
	m := &model{t: t, rng: rng, q: mustQueue(t, cfg), cfg: cfg, out: make([]Item[int], 12)}
	for range 2 {
		m.owners = append(m.owners, mustBudget(t, BudgetConfig{Burst: 2 * ts, Limit: 2 * ts, Flows: 2}))
	}
	m.owners = append(m.owners, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m.ctx = ctx
	return m
}

func (m *model) run(ops int) {
	for i := range ops {
		switch op := m.rng.IntN(3); op {
		case 0:
			m.enqueue()
		case 1:
			m.dequeue()
		case 2:
			m.complete()
		}
		m.check(i)
	}
	wantErr(m.t, "Close", m.q.Close(), nil)
	m.pending, m.inflight = nil, nil
	m.check(ops)
	st := m.q.Stats()
	if st.Completed+st.Discarded != st.Enqueued {
		m.t.Fatalf("completed %d + discarded %d != enqueued %d", st.Completed, st.Discarded, st.Enqueued)
	}
}

func (m *model) enqueue() {
	items := make([]Item[int], m.rng.IntN(8))
	for i := range items {
		items[i] = Item[int]{
			Owner: m.owners[m.rng.IntN(len(m.owners))],
			Flow:  uint64(m.rng.IntN(4)),
			Size:  m.rng.IntN(2*ts + 1),
			Value: m.next,
		}
		m.next++
		switch m.rng.IntN(50) {
		case 0:
			items[i].Size = -1
		case 1:
			items[i].Size = m.cfg.Bytes + 1
		}
	}
	n, err := m.q.Enqueue(m.ctx, items)
	want, wantErr := m.fit(items)
	if n != want || !errors.Is(err, wantErr) {
		m.t.Fatalf("Enqueue(%d) = %d, %v; want %d, %v", len(items), n, err, want, wantErr)
	}
	m.pending = append(m.pending, items[:n]...)
}

// fit is the model of Enqueue.
func (m *model) fit(items []Item[int]) (int, error) {
	for _, it := range items {
		switch {
		case it.Size < 0:
			return 0, ErrInvalid
		case it.Size > m.cfg.Bytes || it.Owner != nil && it.Size > 2*ts:
			return 0, ErrTooLarge
		}
	}
	held := len(m.pending) + len(m.inflight)
	bytes := sum(m.pending) + sum(m.inflight)
	for i, it := range items {
		if held+1 > m.cfg.Packets || bytes+it.Size > m.cfg.Bytes {
			if m.cfg.Policy == DropTail {
				return i, ErrQueueFull
			}
			return i, context.Canceled
		}
		held++
		bytes += it.Size
	}
	return len(items), nil
}

func (m *model) dequeue() {
	want := min(m.rng.IntN(len(m.out)+1), len(m.pending))
	n, err := m.q.Dequeue(m.out[:m.rng.IntN(len(m.out)+1)][:want:want])
	if n != want || err != nil {
		m.t.Fatalf("Dequeue = %d, %v; want %d", n, err, want)
	}
	for i, it := range m.out[:n] {
		if it != m.pending[i] {
			m.t.Fatalf("dequeued %+v, want %+v", it, m.pending[i])
		}
	}
	m.inflight = append(m.inflight, m.pending[:n]...)
	m.pending = m.pending[n:]
}

func (m *model) complete() {
	n := m.rng.IntN(len(m.inflight) + 2)
	err := m.q.Complete(n)
	if over := n > len(m.inflight); over != errors.Is(err, ErrInvalid) || !over && err != nil {
		m.t.Fatalf("Complete(%d) with %d in flight: %v", n, len(m.inflight), err)
	}
	m.inflight = m.inflight[min(n, len(m.inflight)):]
}

func (m *model) check(op int) {
	st := m.q.Stats()
	if st.Pending != len(m.pending) || st.PendingBytes != int64(sum(m.pending)) ||
		st.InFlight != len(m.inflight) || st.InFlightBytes != int64(sum(m.inflight)) {
		m.t.Fatalf("op %d: stats %+v; model %d pending (%d B), %d in flight (%d B)", op, st,
			len(m.pending), sum(m.pending), len(m.inflight), sum(m.inflight))
	}
	if st.PeakHeld > m.cfg.Packets || st.PeakHeldBytes > int64(m.cfg.Bytes) {
		m.t.Fatalf("op %d: peaks %d, %d B above the limits", op, st.PeakHeld, st.PeakHeldBytes)
	}
	for _, b := range m.owners[:2] {
		var total int
		flows := make([]int64, len(b.flows))
		for _, it := range append(m.pending[:len(m.pending):len(m.pending)], m.inflight...) {
			if it.Owner == b {
				total += it.Size
				flows[b.flowIndex(it.Flow)] += int64(it.Size)
			}
		}
		if got := b.Stats().InFlight; got != int64(total) {
			m.t.Fatalf("op %d: owner charged %d, model %d", op, got, total)
		}
		for i := range flows {
			if got := b.flows[i].Load(); got != flows[i] {
				m.t.Fatalf("op %d: flow counter %d charged %d, model %d", op, i, got, flows[i])
			}
		}
	}
}

func sum(items []Item[int]) int {
	var n int
	for _, it := range items {
		n += it.Size
	}
	return n
}

// TestStress runs several producers and one sink under -race. Producers 0
// and 1 share a budget, the others have their own, one of them self-sizing.
// It checks per-producer FIFO order, that in-flight bytes never exceeded
// the limit plus one burst per extra producer, and that every charge came
// back exactly once.
func TestStress(t *testing.T) {
	const producers, packets = 4, 400
	big := 45 * ts
	q, err := NewQueue[int](QueueConfig{Policy: Block, Packets: 256, Bytes: 200 * ts})
	if err != nil {
		t.Fatal(err)
	}
	shared := mustBudget(t, BudgetConfig{Burst: big, Limit: 3 * big, Fixed: true})
	owners := []*Budget{
		shared, shared,
		mustBudget(t, BudgetConfig{Burst: big, Limit: 2 * big, Fixed: true, FlowShare: 60}),
		mustBudget(t, BudgetConfig{Burst: big, Limit: 4 * big}),
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(p), 2))
			seq := 0
			for range packets {
				flow := uint64(p*10 + rng.IntN(3))
				if err := owners[p].Admit(ctx, flow); err != nil {
					t.Errorf("producer %d: Admit: %v", p, err)
					return
				}
				items := segs(owners[p], flow, 1+rng.IntN(45))
				for i := range items {
					items[i].Value = p<<32 | seq
					seq++
				}
				if n, err := q.Enqueue(ctx, items); n != len(items) || err != nil {
					t.Errorf("producer %d: Enqueue = %d, %v", p, n, err)
					return
				}
			}
		})
	}
	sinkDone := make(chan struct{})
	go func() {
		defer close(sinkDone)
		sink(t, q, producers)
	}()
	wg.Wait()
	eventually(t, "the sink to drain", func() bool {
		st := q.Stats()
		return st.Pending == 0 && st.InFlight == 0 && st.Enqueued > 0
	})
	wantErr(t, "Close", q.Close(), nil)
	<-sinkDone
	st := q.Stats()
	if st.Completed != st.Enqueued || st.Discarded != 0 || st.Dropped != [numDropReasons]uint64{} {
		t.Fatalf("stats %+v: want everything completed, nothing dropped", st)
	}
	for p, b := range owners {
		bs := b.Stats()
		bound := bs.Limit // one producer per admission stays within the limit
		if b == shared {
			bound += int64(big)
		}
		if bs.InFlight != 0 || bs.Peak > bound {
			t.Errorf("producer %d: %+v: want 0 in flight and a peak within %d", p, bs, bound)
		}
		t.Logf("producer %d: peak %d B, limit %d B, stalls %d, refused %d", p, bs.Peak, bs.Limit, bs.Stalls, bs.Refused)
	}
}

// sink dequeues random batches, completes random parts of what it holds
// (a NIC finishing out of step with submission), and checks FIFO order per
// producer, until the queue is closed.
func sink(t *testing.T, q *Queue[int], producers int) {
	rng := rand.New(rand.NewPCG(9, 9))
	next := make([]int, producers)
	out := make([]Item[int], 64)
	held := 0
	for {
		n, err := q.Dequeue(out[:1+rng.IntN(len(out))])
		if err != nil {
			return
		}
		for _, it := range out[:n] {
			p, seq := it.Value>>32, it.Value&(1<<32-1)
			if seq != next[p] {
				t.Errorf("producer %d: segment %d after %d", p, seq, next[p]-1)
			}
			next[p] = seq + 1
		}
		held += n
		if n == 0 && held == 0 {
			<-q.Ready()
			continue
		}
		done := held
		if n > 0 {
			done = rng.IntN(held + 1)
		}
		if err := q.Complete(done); err != nil {
			return
		}
		held -= done
	}
}

// TestCloseWakesEveryone parks producers in Admit and in Enqueue and the
// sink on Ready, then closes the queue and the budgets: every one of them
// returns, every producer loop ends with ErrClosed, and no charge is left.
func TestCloseWakesEveryone(t *testing.T) {
	q := mustQueue(t, QueueConfig{Policy: Block, Packets: 4, Bytes: 100 * ts})
	b := fixedBudget(t)
	ctx := context.Background()
	// Fill the budget through the queue: 4 bursts in flight.
	items := segs(b, 1, 4)
	for i := range items {
		items[i].Size = burst
	}
	q.Enqueue(ctx, items)
	out := make([]Item[int], 4)
	q.Dequeue(out)
	signalled(q.Ready()) // consume the signal of the first enqueue

	const n = 6
	errs := make(chan error, 2*n+1)
	for i := range n {
		go func() { // parked in Admit
			err := b.Admit(ctx, uint64(i))
			if err == nil {
				_, err = q.Enqueue(ctx, segs(b, uint64(i), 1))
			}
			errs <- err
		}()
		go func() { // parked in Enqueue: the queue holds 4 of 4 segments
			_, err := q.Enqueue(ctx, segs(nil, 0, 1))
			errs <- err
		}()
	}
	go func() {
		<-q.Ready()
		_, err := q.Dequeue(out)
		errs <- err
	}()
	eventually(t, "everyone to park", func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.waiters) == n && b.nwait.Load() == n
	})
	wantErr(t, "Close", q.Close(), nil)
	wantErr(t, "Close budget", b.Close(), nil)
	for range 2*n + 1 {
		wantErr(t, "woken caller", <-errs, ErrClosed)
	}
	if in := b.Stats().InFlight; in != 0 {
		t.Fatalf("%d bytes still charged after Close", in)
	}
}
