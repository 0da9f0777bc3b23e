package txqueue

import (
	"context"
	"runtime"
	"testing"
)

// TestAllocs checks that the steady-state cycle (admit, charge and enqueue,
// dequeue, complete and release, signalling the sink) and the drop path
// allocate nothing.
func TestAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts are noisy in -short runs")
	}
	ctx := context.Background()
	b := mustBudget(t, BudgetConfig{Burst: 45 * ts, Limit: 64 * 45 * ts})
	q := mustQueue(t, QueueConfig{Policy: Block, Packets: 64, Bytes: 64 * ts})
	drop := mustQueue(t, QueueConfig{Policy: DropTail, Packets: 16, Bytes: 64 * ts})
	items := segs(b, 7, 45)
	out := make([]Item[int], 64)
	cycle := func() {
		if err := b.Admit(ctx, 7); err != nil {
			t.Fatal(err)
		}
		q.Enqueue(ctx, items)
		n, _ := q.Dequeue(out)
		q.Complete(n)
		<-q.Ready()
		drop.Enqueue(ctx, items) // drops 29
		n, _ = drop.Dequeue(out)
		drop.Complete(n)
		b.TryAdmit(7)
		b.Stats()
		q.Stats()
	}
	if a := testing.AllocsPerRun(1000, cycle); a != 0 {
		t.Errorf("steady state: %v allocations per cycle, want 0", a)
	}
}

// TestAllocsBlocked checks that parking and waking a producer, in Admit and
// in Enqueue, allocates nothing once warm.
func TestAllocsBlocked(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts are noisy in -short runs")
	}
	ctx := context.Background()
	b := fixedBudget(t)
	q := mustQueue(t, QueueConfig{Policy: Block, Packets: 2, Bytes: 100 * ts})
	start, done := make(chan struct{}), make(chan struct{})
	go func() {
		one := segs(nil, 0, 1)
		for range start {
			b.Admit(ctx, 1)
			q.Enqueue(ctx, one)
			done <- struct{}{}
		}
	}()
	defer close(start)
	full := segs(nil, 0, 2)
	out := make([]Item[int], 2)
	cycle := func() {
		b.charge(1, int64(4*burst))
		q.Enqueue(ctx, full)
		q.Dequeue(out)
		start <- struct{}{}
		for b.nwait.Load() == 0 {
			runtime.Gosched()
		}
		b.release(1, int64(4*burst))
		for !q.parked() {
			runtime.Gosched()
		}
		q.Complete(2)
		<-done
		q.Dequeue(out)
		q.Complete(1)
	}
	if a := testing.AllocsPerRun(200, cycle); a != 0 {
		t.Errorf("blocked producer: %v allocations per cycle, want 0", a)
	}
}

func (q *Queue[T]) parked() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiters) > 0
}
