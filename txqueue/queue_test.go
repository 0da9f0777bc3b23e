package txqueue

import (
	"cmp"
	"context"
	"errors"
	"testing"
)

func TestNewQueueConfig(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  QueueConfig
		ok   bool
	}{
		{"block", QueueConfig{Policy: Block, Packets: 1, Bytes: 1}, true},
		{"droptail", QueueConfig{Policy: DropTail, Packets: 1000, Bytes: 1 << 20}, true},
		{"no policy", QueueConfig{Packets: 1, Bytes: 1}, false},
		{"unknown policy", QueueConfig{Policy: 3, Packets: 1, Bytes: 1}, false},
		{"zero packets", QueueConfig{Policy: Block, Bytes: 1}, false},
		{"negative packets", QueueConfig{Policy: Block, Packets: -1, Bytes: 1}, false},
		{"too many packets", QueueConfig{Policy: Block, Packets: maxPackets + 1, Bytes: 1}, false},
		{"zero bytes", QueueConfig{Policy: Block, Packets: 1}, false},
		{"negative bytes", QueueConfig{Policy: DropTail, Packets: 1, Bytes: -1}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewQueue[int](tt.cfg)
			if tt.ok != (err == nil) || !tt.ok && !errors.Is(err, ErrInvalid) {
				t.Fatalf("NewQueue: %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestNames(t *testing.T) {
	for _, tt := range []struct{ got, want string }{
		{Block.String(), "block"},
		{DropTail.String(), "droptail"},
		{Policy(0).String(), "Policy(0)"},
		{DropPackets.String(), "packets"},
		{DropBytes.String(), "bytes"},
		{DropTooLarge.String(), "too-large"},
		{DropInvalid.String(), "invalid"},
		{DropClosed.String(), "closed"},
		{numDropReasons.String(), "DropReason(5)"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

// step is one operation in a scripted walk through a queue's states. All
// segments are ts bytes unless size is set; a step with size set must not
// change the state.
type step struct {
	op   string // "enqueue", "dequeue", "complete", "close"
	n    int
	size int

	wantN   int
	wantErr error

	pending, inflight int // segments held after the step
	charged           int // segments charged to the owner after the step
}

func runSteps(t *testing.T, cfg QueueConfig, steps []step) Stats {
	t.Helper()
	q := mustQueue(t, cfg)
	b := mustBudget(t, BudgetConfig{Burst: 8 * ts, Limit: 8 * ts, Fixed: true})
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a Block queue must not wait in a single-goroutine script
	out := make([]Item[int], 8)
	for i, s := range steps {
		var n int
		var err error
		switch s.op {
		case "enqueue":
			items := segs(b, 1, s.n)
			for j := range items {
				items[j].Size = cmp.Or(s.size, ts)
			}
			n, err = q.Enqueue(ctx, items)
		case "dequeue":
			n, err = q.Dequeue(out[:s.n])
		case "complete":
			err = q.Complete(s.n)
		case "close":
			err = q.Close()
		}
		if n != s.wantN || s.wantErr == nil && err != nil || s.wantErr != nil && !errors.Is(err, s.wantErr) {
			t.Fatalf("step %d %s(%d) = %d, %v; want %d, %v", i, s.op, s.n, n, err, s.wantN, s.wantErr)
		}
		st := q.Stats()
		if st.Pending != s.pending || st.InFlight != s.inflight ||
			st.PendingBytes != int64(s.pending*ts) || st.InFlightBytes != int64(s.inflight*ts) {
			t.Fatalf("step %d %s(%d): pending %d (%d B), in flight %d (%d B); want %d, %d",
				i, s.op, s.n, st.Pending, st.PendingBytes, st.InFlight, st.InFlightBytes, s.pending, s.inflight)
		}
		if got := b.Stats().InFlight; got != int64(s.charged*ts) {
			t.Fatalf("step %d %s(%d): owner charged %d, want %d", i, s.op, s.n, got, s.charged*ts)
		}
	}
	return q.Stats()
}

func TestQueueDropTailBytes(t *testing.T) {
	st := runSteps(t, QueueConfig{Policy: DropTail, Packets: 4, Bytes: 3 * ts}, []step{
		{op: "dequeue", n: 4},
		{op: "complete", n: 0},
		{op: "enqueue", n: 0},
		{op: "enqueue", n: 2, wantN: 2, pending: 2, charged: 2},
		{op: "dequeue", n: 1, wantN: 1, pending: 1, inflight: 1, charged: 2},
		{op: "enqueue", n: 2, wantN: 1, wantErr: ErrQueueFull, pending: 2, inflight: 1, charged: 3},
		{op: "complete", n: 1, pending: 2, charged: 2},
		{op: "dequeue", n: 8, wantN: 2, inflight: 2, charged: 2},
		{op: "complete", n: 3, wantErr: ErrInvalid}, // completes the 2 in flight
		{op: "complete", n: -1, wantErr: ErrInvalid},
		{op: "enqueue", n: 2, size: -1, wantErr: ErrInvalid},
		{op: "enqueue", n: 1, size: 3*ts + 1, wantErr: ErrTooLarge}, // above the byte limit
		{op: "enqueue", n: 1, size: 9 * ts, wantErr: ErrTooLarge},   // above the owner's burst
	})
	want := Stats{Enqueued: 3, Dequeued: 3, Completed: 3, PeakHeld: 3, PeakHeldBytes: int64(3 * ts)}
	want.Dropped[DropBytes] = 1
	want.Dropped[DropInvalid] = 2
	want.Dropped[DropTooLarge] = 2
	if st != want {
		t.Fatalf("stats\n%+v\nwant\n%+v", st, want)
	}
}

func TestQueueDropTailPackets(t *testing.T) {
	st := runSteps(t, QueueConfig{Policy: DropTail, Packets: 3, Bytes: 100 * ts}, []step{
		{op: "enqueue", n: 2, wantN: 2, pending: 2, charged: 2},
		{op: "dequeue", n: 2, wantN: 2, inflight: 2, charged: 2},
		{op: "enqueue", n: 3, wantN: 1, wantErr: ErrQueueFull, pending: 1, inflight: 2, charged: 3},
		{op: "complete", n: 2, pending: 1, charged: 1},
		{op: "enqueue", n: 1, wantN: 1, pending: 2, charged: 2},
	})
	if st.Dropped[DropPackets] != 2 || st.Dropped[DropBytes] != 0 || st.PeakHeld != 3 {
		t.Fatalf("stats %+v, want 2 dropped at the packet limit", st)
	}
}

func TestQueueBlockAndClose(t *testing.T) {
	st := runSteps(t, QueueConfig{Policy: Block, Packets: 4, Bytes: 100 * ts}, []step{
		{op: "enqueue", n: 3, wantN: 3, pending: 3, charged: 3},
		{op: "dequeue", n: 1, wantN: 1, pending: 2, inflight: 1, charged: 3},
		{op: "enqueue", n: 3, wantN: 1, wantErr: context.Canceled, pending: 3, inflight: 1, charged: 4},
		{op: "close", pending: 0, inflight: 0, charged: 0}, // releases pending and in flight
		{op: "enqueue", n: 2, wantErr: ErrClosed},
		{op: "dequeue", n: 2, wantErr: ErrClosed},
		{op: "complete", n: 1, wantErr: ErrClosed},
		{op: "close", wantErr: ErrClosed},
	})
	if st.Dropped != [numDropReasons]uint64{DropClosed: 2} || st.Discarded != 4 || st.Stalls != 1 {
		t.Fatalf("stats %+v, want 2 dropped as closed, 4 discarded, 1 stall", st)
	}
}

func TestQueueFIFO(t *testing.T) {
	q := mustQueue(t, QueueConfig{Policy: Block, Packets: 8, Bytes: 100 * ts})
	out := make([]Item[int], 3)
	next, want := 0, 0
	for range 20 { // wraps the ring several times
		batch := segs(nil, 0, 5)
		for i := range batch {
			batch[i].Value = next
			next++
		}
		if n, err := q.Enqueue(context.Background(), batch); n != 5 || err != nil {
			t.Fatalf("Enqueue = %d, %v", n, err)
		}
		for q.Stats().Pending > 0 {
			n, _ := q.Dequeue(out)
			for _, it := range out[:n] {
				if it.Value != want {
					t.Fatalf("dequeued %d, want %d", it.Value, want)
				}
				want++
			}
			wantErr(t, "Complete", q.Complete(n), nil)
		}
	}
}

func TestQueueReady(t *testing.T) {
	q := mustQueue(t, QueueConfig{Policy: Block, Packets: 8, Bytes: 100 * ts})
	ctx := context.Background()
	if signalled(q.Ready()) {
		t.Fatal("empty queue signalled")
	}
	q.Enqueue(ctx, segs(nil, 0, 1))
	if !signalled(q.Ready()) {
		t.Fatal("not signalled on the first segment")
	}
	q.Enqueue(ctx, segs(nil, 0, 1))
	if signalled(q.Ready()) {
		t.Fatal("signalled although segments were already pending")
	}
	out := make([]Item[int], 8)
	q.Dequeue(out)
	q.Enqueue(ctx, segs(nil, 0, 1))
	if !signalled(q.Ready()) {
		t.Fatal("not signalled after the sink emptied the queue")
	}
	q.Close()
	if !signalled(q.Ready()) {
		t.Fatal("not signalled by Close")
	}
}

// TestEnqueueBlocks: a producer blocked on a full queue is woken when room
// for its batch, or half the queue, is free; Close wakes blocked producers
// with ErrClosed.
func TestEnqueueBlocks(t *testing.T) {
	q := mustQueue(t, QueueConfig{Policy: Block, Packets: 8, Bytes: 100 * ts})
	ctx := context.Background()
	q.Enqueue(ctx, segs(nil, 0, 8))
	out := make([]Item[int], 8)
	q.Dequeue(out)
	done := make(chan error, 1)
	go func() {
		n, err := q.Enqueue(ctx, segs(nil, 0, 6))
		if err == nil && n != 6 {
			err = errors.New("short enqueue")
		}
		done <- err
	}()
	parked := func() bool { q.mu.Lock(); defer q.mu.Unlock(); return len(q.waiters) == 1 }
	eventually(t, "Enqueue to park", parked)
	wantErr(t, "Complete", q.Complete(3), nil)
	if !parked() {
		t.Fatal("woken before half the queue was free")
	}
	wantErr(t, "Complete", q.Complete(1), nil) // takes 4, waits for 2 more
	eventually(t, "Enqueue to park again", func() bool { return parked() && q.Stats().Pending == 4 })
	wantErr(t, "Complete", q.Complete(2), nil)
	wantErr(t, "Enqueue", <-done, nil)
	if st := q.Stats(); st.Stalls != 1 || st.StallTime <= 0 || st.Pending != 6 {
		t.Fatalf("stats %+v, want one stall and 6 pending", st)
	}

	go func() { // the queue is full: 6 pending, 2 in flight
		_, err := q.Enqueue(ctx, segs(nil, 0, 1))
		done <- err
	}()
	eventually(t, "Enqueue to park", parked)
	wantErr(t, "Close", q.Close(), nil)
	wantErr(t, "Enqueue", <-done, ErrClosed)
}

// Stats add up field by field, dropped counts by reason.
func TestStatsAdd(t *testing.T) {
	a := Stats{Enqueued: 1, Pending: 2, PeakHeldBytes: 3, StallTime: 4}
	a.Dropped[DropBytes] = 5
	got := a.Add(a)
	want := Stats{Enqueued: 2, Pending: 4, PeakHeldBytes: 6, StallTime: 8}
	want.Dropped[DropBytes] = 10
	if got != want {
		t.Fatalf("Add = %+v, want %+v", got, want)
	}
	b := BudgetStats{Limit: 1, InFlight: 2, Stalls: 3}
	if got := b.Add(b); got != (BudgetStats{Limit: 2, InFlight: 4, Stalls: 6}) {
		t.Fatalf("BudgetStats.Add = %+v", got)
	}
}
