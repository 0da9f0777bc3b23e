package wireguard

import (
	"math/rand/v2"
	"testing"
)

// TestReplayWindow runs the window against a model (every counter seen,
// and the highest) on counters in order, out of order, repeated, far
// behind and far ahead.
func TestReplayWindow(t *testing.T) {
	if ReplayWindow < 2048 {
		t.Fatalf("window of %d counters", ReplayWindow)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var w replayWindow
	seen := map[uint64]bool{}
	var top uint64 // highest + 1
	for i := range 200_000 {
		var c uint64
		switch r := rng.IntN(10); {
		case i == 0:
			c = 0
		case r < 5: // near the top, either side
			c = top + uint64(rng.IntN(64)) - min(top, 32)
		case r < 7: // anywhere in or just past the window
			c = top - min(top, uint64(rng.IntN(ReplayWindow+200)))
		case r < 8: // a jump ahead
			c = top + uint64(rng.IntN(3*ReplayWindow))
		default: // a repeat
			c = top - min(top, 1)
		}
		want := !seen[c] && (c >= top || top-1-c < ReplayWindow)
		if got := w.accept(c); got != want {
			t.Fatalf("step %d: counter %d (top %d): accepted %v, want %v", i, c, top, got, want)
		}
		if want {
			seen[c] = true
			top = max(top, c+1)
		}
	}
	// The window's edges exactly.
	w = replayWindow{}
	w.accept(10_000)
	if !w.accept(10_000-ReplayWindow+1) || w.accept(10_000-ReplayWindow) || w.accept(10_000) {
		t.Fatal("edges of the window")
	}
}
