package txqueue

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestNewBudgetConfig(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  BudgetConfig
		ok   bool
	}{
		{"minimal", BudgetConfig{Burst: 1, Limit: 1}, true},
		{"all fields", BudgetConfig{Burst: 10, Limit: 100, Fixed: true, FlowShare: 100, Flows: 3, Hold: time.Millisecond}, true},
		{"zero burst", BudgetConfig{Limit: 100}, false},
		{"negative burst", BudgetConfig{Burst: -1, Limit: 100}, false},
		{"zero limit", BudgetConfig{Burst: 10}, false},
		{"limit below burst", BudgetConfig{Burst: 10, Limit: 9}, false},
		{"negative share", BudgetConfig{Burst: 10, Limit: 10, FlowShare: -1}, false},
		{"share above 100", BudgetConfig{Burst: 10, Limit: 10, FlowShare: 101}, false},
		{"negative flows", BudgetConfig{Burst: 10, Limit: 10, Flows: -1}, false},
		{"too many flows", BudgetConfig{Burst: 10, Limit: 10, Flows: maxFlows + 1}, false},
		{"negative hold", BudgetConfig{Burst: 10, Limit: 10, Hold: -1}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := NewBudget(tt.cfg)
			if tt.ok != (err == nil) || !tt.ok && !errors.Is(err, ErrInvalid) {
				t.Fatalf("NewBudget: %v, want ok=%v", err, tt.ok)
			}
			if b != nil && b.Stats().InFlight != 0 {
				t.Fatal("new budget has bytes in flight")
			}
		})
	}
}

func TestBudgetStartingLimit(t *testing.T) {
	if got := fixedBudget(t).Stats().Limit; got != int64(4*burst) {
		t.Errorf("fixed limit = %d, want %d", got, 4*burst)
	}
	b := mustBudget(t, BudgetConfig{Burst: burst, Limit: 4 * burst})
	if got := b.Stats().Limit; got != int64(burst) {
		t.Errorf("self-sizing starting limit = %d, want one burst %d", got, burst)
	}
}

func TestFlowSlots(t *testing.T) {
	b := mustBudget(t, BudgetConfig{Burst: 1, Limit: 1, Flows: 5})
	if len(b.flows) != 8 {
		t.Fatalf("5 flows rounded to %d counters, want 8", len(b.flows))
	}
	one := mustBudget(t, BudgetConfig{Burst: 1, Limit: 1, Flows: 1})
	for _, f := range []uint64{0, 1, 1 << 63, ^uint64(0)} {
		if one.slot(f) != &one.flows[0] {
			t.Errorf("flow %#x not in the only counter", f)
		}
	}
}

// TestTryAdmit walks admission through global and per-flow limits. The
// budget holds 4 bursts; a flow may hold 2.
func TestTryAdmit(t *testing.T) {
	type charge struct {
		flow uint64
		n    int // bytes
	}
	for _, tt := range []struct {
		name    string
		charges []charge
		flow    uint64
		want    error
	}{
		{"empty", nil, 1, nil},
		{"flow at one burst", []charge{{1, burst}}, 1, nil},
		{"flow over its share", []charge{{1, burst + 1}}, 1, ErrWouldBlock},
		{"other flow beside a full one", []charge{{1, 2 * burst}}, 2, nil},
		{"room for exactly one burst", []charge{{1, 2 * burst}, {2, burst}}, 3, nil},
		{"no room for a burst", []charge{{1, 2 * burst}, {2, burst + 1}}, 3, ErrWouldBlock},
		{"full", []charge{{1, 2 * burst}, {2, 2 * burst}}, 3, ErrWouldBlock},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := fixedBudget(t)
			for _, c := range tt.charges {
				b.charge(c.flow, int64(c.n))
			}
			wantErr(t, "TryAdmit", b.TryAdmit(tt.flow), tt.want)
			refused := uint64(0)
			if tt.want != nil {
				refused = 1
			}
			if got := b.Stats().Refused; got != refused {
				t.Errorf("Refused = %d, want %d", got, refused)
			}
		})
	}
}

func TestChargeRelease(t *testing.T) {
	b := fixedBudget(t)
	wantErr(t, "charge negative", b.Charge(1, -1), ErrInvalid)
	wantErr(t, "charge above burst", b.Charge(1, burst+1), ErrTooLarge)
	wantErr(t, "charge", b.Charge(1, ts), nil)
	wantErr(t, "charge", b.Charge(2, ts), nil)
	wantErr(t, "release negative", b.Release(1, -1), ErrInvalid)
	wantErr(t, "release above burst", b.Release(1, burst+1), ErrTooLarge)
	wantErr(t, "over-release of a flow", b.Release(1, ts+1), ErrInvalid)
	wantErr(t, "over-release of a never-charged flow", b.Release(3, 1), ErrInvalid)
	if s := b.Stats(); s.InFlight != int64(2*ts) || b.slot(1).Load() != int64(ts) {
		t.Fatalf("failed releases changed the state: in flight %d, flow %d", s.InFlight, b.slot(1).Load())
	}
	wantErr(t, "release", b.Release(1, ts), nil)
	wantErr(t, "release", b.Release(2, ts), nil)
	if s := b.Stats(); s.InFlight != 0 || s.Peak != int64(2*ts) {
		t.Fatalf("after releases: %+v, want 0 in flight, peak %d", s, 2*ts)
	}
}

// TestReadyOnTransition checks that the event loop's channel is signalled
// once, when the budget drains to its wake mark (2 bursts), and not on other
// releases.
func TestReadyOnTransition(t *testing.T) {
	b := fixedBudget(t)
	b.charge(1, int64(2*burst))
	b.charge(2, int64(2*burst))
	wantErr(t, "TryAdmit on a full budget", b.TryAdmit(3), ErrWouldBlock)
	steps := []struct {
		flow  uint64
		n     int
		ready bool
	}{
		{1, ts, false},           // 4B-ts: still above the admission mark
		{1, burst - ts, false},   // 3B: admissible, but above the wake mark
		{1, burst - 1, false},    // 2B+1
		{1, 1, true},             // 2B: the wake mark
		{2, ts, false},           // below the mark: no second signal
		{2, 2*burst - ts, false}, // drained: still none
	}
	for i, s := range steps {
		wantErr(t, "release", b.release(s.flow, int64(s.n)), nil)
		if got := signalled(b.Ready()); got != s.ready {
			t.Fatalf("step %d: ready %v, want %v (in flight %d)", i, got, s.ready, b.Stats().InFlight)
		}
	}
	wantErr(t, "TryAdmit after the drain", b.TryAdmit(3), nil)
}

// TestReadyPerFlow: a flow held back by its share is woken by its own
// releases, at the flow's wake mark (1 burst), not by other flows'.
func TestReadyPerFlow(t *testing.T) {
	b := fixedBudget(t)
	b.charge(1, int64(2*burst))
	b.charge(2, int64(burst))
	wantErr(t, "TryAdmit over the share", b.TryAdmit(1), ErrWouldBlock)
	wantErr(t, "release other flow", b.release(2, int64(burst)), nil)
	if signalled(b.Ready()) {
		t.Fatal("signalled by another flow's release")
	}
	wantErr(t, "release", b.release(1, int64(burst-1)), nil)
	if signalled(b.Ready()) {
		t.Fatal("signalled above the flow's wake mark")
	}
	wantErr(t, "release", b.release(1, 1), nil)
	if !signalled(b.Ready()) {
		t.Fatal("not signalled at the flow's wake mark")
	}
}

func TestAdmitBlocksUntilWakeMark(t *testing.T) {
	b := fixedBudget(t)
	b.charge(1, int64(4*burst))
	done := make(chan error, 1)
	go func() { done <- b.Admit(context.Background(), 2) }()
	eventually(t, "Admit to park", parked(b, 1))
	wantErr(t, "release", b.release(1, int64(2*burst-1)), nil)
	if b.nwait.Load() != 1 {
		t.Fatal("woken above the wake mark")
	}
	wantErr(t, "release", b.release(1, 1), nil)
	wantErr(t, "Admit", <-done, nil)
	if s := b.Stats(); s.Stalls != 1 || s.StallTime <= 0 || s.Refused != 1 {
		t.Errorf("stats %+v, want one stall with a duration", s)
	}
}

func TestAdmitContext(t *testing.T) {
	b := fixedBudget(t)
	b.charge(1, int64(4*burst))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Admit(ctx, 2) }()
	eventually(t, "Admit to park", parked(b, 1))
	cancel()
	wantErr(t, "Admit", <-done, context.Canceled)
	if n := b.nwait.Load(); n != 0 {
		t.Fatalf("%d waiters left after cancellation", n)
	}
	wantErr(t, "Admit with a done context, with room", b.release(1, int64(4*burst)), nil)
	wantErr(t, "Admit", b.Admit(ctx, 2), nil)
}

func TestBudgetCloseWakesEveryone(t *testing.T) {
	b := fixedBudget(t)
	b.charge(1, int64(4*burst))
	const n = 5
	done := make(chan error, n)
	for i := range n {
		go func() { done <- b.Admit(context.Background(), uint64(i)) }()
	}
	wantErr(t, "TryAdmit", b.TryAdmit(9), ErrWouldBlock)
	eventually(t, "all to park", parked(b, n+1))
	wantErr(t, "Close", b.Close(), nil)
	for range n {
		wantErr(t, "Admit", <-done, ErrClosed)
	}
	if !signalled(b.Ready()) {
		t.Error("Ready not signalled by Close")
	}
	wantErr(t, "TryAdmit after Close", b.TryAdmit(1), ErrClosed)
	wantErr(t, "Admit after Close", b.Admit(context.Background(), 1), ErrClosed)
	wantErr(t, "second Close", b.Close(), ErrClosed)
	wantErr(t, "release after Close", b.Release(1, 4*ts), nil)
}

// sizingBudget is a self-sizing budget with a fake clock.
func sizingBudget(t *testing.T, limit int) (*Budget, *time.Time) {
	b := mustBudget(t, BudgetConfig{Burst: burst, Limit: limit, FlowShare: 100, Hold: time.Second})
	now := time.Unix(1000, 0)
	b.sizer.now = func() time.Time { return now }
	b.sizer.start = now
	return b, &now
}

func TestSizingGrowsOnStarvation(t *testing.T) {
	b, _ := sizingBudget(t, 10*burst)
	wantErr(t, "TryAdmit", b.TryAdmit(1), nil)
	b.charge(1, int64(burst))
	wantErr(t, "TryAdmit", b.TryAdmit(1), ErrWouldBlock)
	for range 3 {
		wantErr(t, "release", b.release(1, int64(ts)), nil)
	}
	if s := b.Stats(); s.Limit != int64(burst) || s.Grown != 0 {
		t.Fatalf("grew before the sink ran dry: %+v", s)
	}
	wantErr(t, "release", b.release(1, int64(ts)), nil)
	if s := b.Stats(); s.Limit != int64(2*burst) || s.Grown != 1 {
		t.Fatalf("after starvation: %+v, want limit %d", s, 2*burst)
	}
	// A big completion batch grows the limit by the batch.
	b.charge(1, int64(2*burst))
	wantErr(t, "TryAdmit", b.TryAdmit(1), ErrWouldBlock)
	wantErr(t, "release", b.release(1, int64(2*burst)), nil)
	if s := b.Stats(); s.Limit != int64(4*burst) || s.Grown != 2 {
		t.Fatalf("after starvation: %+v, want limit %d", s, 4*burst)
	}
}

func TestSizingNoGrowthWithoutRefusal(t *testing.T) {
	b, _ := sizingBudget(t, 10*burst)
	for range 3 {
		b.charge(1, int64(burst))
		wantErr(t, "release", b.release(1, int64(burst)), nil)
	}
	if s := b.Stats(); s.Limit != int64(burst) || s.Grown != 0 {
		t.Fatalf("application-limited owner grew: %+v", s)
	}
}

func TestSizingCeiling(t *testing.T) {
	b, _ := sizingBudget(t, 3*burst/2)
	b.charge(1, int64(burst))
	wantErr(t, "TryAdmit", b.TryAdmit(1), ErrWouldBlock)
	wantErr(t, "release", b.release(1, int64(burst)), nil)
	if s := b.Stats(); s.Limit != int64(3*burst/2) {
		t.Fatalf("limit %d above the ceiling %d", s.Limit, 3*burst/2)
	}
}

func TestSizingShrinksStandingQueue(t *testing.T) {
	b, now := sizingBudget(t, 100*burst)
	b.limit.Store(int64(20 * burst))
	b.charge(1, int64(12*burst))
	// A sink completing one burst every 100ms while the producer keeps
	// 10 to 12 bursts in flight: the lowest slack is 9 bursts.
	for i := range 10 {
		*now = now.Add(100 * time.Millisecond)
		wantErr(t, "release", b.release(1, int64(burst)), nil)
		if i%2 == 1 {
			b.charge(1, int64(2*burst))
		}
	}
	s := b.Stats()
	if s.Shrunk != 1 || s.Limit != int64(11*burst) {
		t.Fatalf("after a 1s standing queue: %+v, want limit %d", s, 11*burst)
	}
	// The next window starts afresh.
	*now = now.Add(500 * time.Millisecond)
	wantErr(t, "release", b.release(1, int64(burst)), nil)
	if s := b.Stats(); s.Shrunk != 1 {
		t.Fatalf("shrank again within the hold time: %+v", s)
	}
}

func TestSizingNoShrinkAfterDrain(t *testing.T) {
	b, now := sizingBudget(t, 100*burst)
	b.limit.Store(int64(20 * burst))
	b.charge(1, int64(10*burst))
	wantErr(t, "release", b.release(1, int64(10*burst)), nil) // drained, not starved
	b.charge(1, int64(10*burst))
	*now = now.Add(2 * time.Second)
	wantErr(t, "release", b.release(1, int64(burst)), nil)
	if s := b.Stats(); s.Shrunk != 0 || s.Limit != int64(20*burst) {
		t.Fatalf("shrank although the queue drained: %+v", s)
	}
}

func TestSizingFloor(t *testing.T) {
	b, now := sizingBudget(t, 100*burst)
	b.limit.Store(int64(3 * burst))
	b.charge(1, int64(100*burst))
	*now = now.Add(2 * time.Second)
	wantErr(t, "release", b.release(1, int64(burst)), nil)
	if s := b.Stats(); s.Limit != int64(burst) {
		t.Fatalf("limit %d, want the floor %d", s.Limit, burst)
	}
}

func TestFixedLimitNeverMoves(t *testing.T) {
	b := fixedBudget(t)
	b.sizer.now = func() time.Time { return time.Unix(1<<40, 0) }
	b.charge(1, int64(4*burst))
	wantErr(t, "TryAdmit", b.TryAdmit(1), ErrWouldBlock)
	wantErr(t, "release", b.release(1, int64(4*burst)), nil)
	if s := b.Stats(); s.Limit != int64(4*burst) || s.Grown+s.Shrunk != 0 {
		t.Fatalf("fixed limit moved: %+v", s)
	}
}
