package txqueue

import (
	"errors"
	"runtime"
	"testing"
	"time"
)

// Test sizes: 2 KiB frames, bursts of a few segments so that limits are
// reached in a handful of steps.
var (
	ts    = Truesize(2048)
	burst = 4 * ts
)

func mustBudget(t testing.TB, cfg BudgetConfig) *Budget {
	t.Helper()
	b, err := NewBudget(cfg)
	if err != nil {
		t.Fatalf("NewBudget(%+v): %v", cfg, err)
	}
	return b
}

func mustQueue(t testing.TB, cfg QueueConfig) *Queue[int] {
	t.Helper()
	q, err := NewQueue[int](cfg)
	if err != nil {
		t.Fatalf("NewQueue(%+v): %v", cfg, err)
	}
	return q
}

// fixedBudget has a fixed limit of 4 bursts and a flow share of 2 bursts.
func fixedBudget(t testing.TB) *Budget {
	return mustBudget(t, BudgetConfig{Burst: burst, Limit: 4 * burst, Fixed: true})
}

func segs(owner *Budget, flow uint64, n int) []Item[int] {
	items := make([]Item[int], n)
	for i := range items {
		items[i] = Item[int]{Owner: owner, Flow: flow, Size: ts, Value: i}
	}
	return items
}

func wantErr(t *testing.T, what string, got, want error) {
	t.Helper()
	if want == nil && got != nil || want != nil && !errors.Is(got, want) {
		t.Fatalf("%s: error %v, want %v", what, got, want)
	}
}

// eventually polls cond until it holds or a generous deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// parked reports whether n callers are parked in b's Admit: published as
// waiters and past their admission check, which register does under b.mu
// (nwait alone is set before the check: a release in between admits the
// caller instead of parking it).
func parked(b *Budget, n int) func() bool {
	return func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.waiters) == n
	}
}

func signalled(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
