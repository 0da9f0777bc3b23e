package txqueue

import (
	"context"
	"sync"
	"testing"
	"time"
)

// The seed experiment, in process: a producer of 64 KiB super-packets (45
// segments each) feeds a sink that drains at a fixed, slower rate. With a
// budget and a Block queue nothing is dropped and the producer is held to
// the sink's rate with bounded memory; with DropTail and no budget the
// producer runs free and the queue drops the excess.
const (
	seedSegments = 45
	seedRate     = 50_000 // sink rate, segments per second (~72 MB/s of 64 KiB packets)
	seedRunFor   = 700 * time.Millisecond
)

var seedTruesize = Truesize(2048)

type seedResult struct {
	sent, delivered, dropped int
	elapsed                  time.Duration
}

func (r seedResult) log(t *testing.T, mode string) {
	t.Helper()
	s := r.elapsed.Seconds()
	t.Logf("%s: sent %d, dropped %d (%.1f%%), delivered %d segments in %v; producer %.0f seg/s, sink %.0f seg/s (target %d), producer/sink %.3f",
		mode, r.sent, r.dropped, 100*float64(r.dropped)/float64(max(r.sent, 1)), r.delivered,
		r.elapsed.Round(time.Millisecond), float64(r.sent)/s, float64(r.delivered)/s, seedRate,
		float64(r.sent)/float64(max(r.delivered, 1)))
}

// runSeed runs one producer against the paced sink for seedRunFor.
func runSeed(t *testing.T, q *Queue[int], owner *Budget) seedResult {
	ctx, cancel := context.WithTimeout(context.Background(), seedRunFor)
	defer cancel()
	var res seedResult
	var wg sync.WaitGroup
	wg.Go(func() { res.delivered = pacedSink(ctx, q, seedRate) })
	start := time.Now()
	items := make([]Item[int], seedSegments)
	for i := range items {
		items[i] = Item[int]{Owner: owner, Flow: 1, Size: seedTruesize}
	}
	for ctx.Err() == nil {
		if owner != nil && owner.Admit(ctx, 1) != nil {
			break
		}
		n, _ := q.Enqueue(ctx, items)
		res.sent += n
		if q.policy == DropTail {
			res.sent += len(items) - n
		}
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	st := q.Stats()
	for _, n := range st.Dropped {
		res.dropped += int(n)
	}
	return res
}

// pacedSink transmits at most rate segments per second, completing each
// batch at once, like a link of fixed speed: credit accrues every
// millisecond and is capped at one tick's worth, so an idle link banks
// nothing.
func pacedSink(ctx context.Context, q *Queue[int], rate float64) (delivered int) {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	out := make([]Item[int], 64)
	last, credit := time.Now(), 0.0
	for {
		select {
		case <-ctx.Done():
			return delivered
		case now := <-tick.C:
			credit = min(credit+rate*now.Sub(last).Seconds(), rate/1000)
			last = now
		}
		for credit >= 1 {
			n, err := q.Dequeue(out[:min(int(credit), len(out))])
			if n == 0 || err != nil {
				break
			}
			if err := q.Complete(n); err != nil {
				panic(err)
			}
			delivered += n
			credit -= float64(n)
		}
	}
}

func TestSeedExperiment(t *testing.T) {
	burst := seedSegments * seedTruesize
	t.Run("budget+block", func(t *testing.T) {
		limit := 32 * burst
		q := mustQueue(t, QueueConfig{Policy: Block, Packets: 4096, Bytes: 4096 * seedTruesize})
		b := mustBudget(t, BudgetConfig{Burst: burst, Limit: limit})
		res := runSeed(t, q, b)
		res.log(t, "budget+block")
		bs, st := b.Stats(), q.Stats()
		t.Logf("budget: limit %d B (ceiling %d), peak %d B, grown %d, shrunk %d, stalls %d for %v; queue peak %d B",
			bs.Limit, limit, bs.Peak, bs.Grown, bs.Shrunk, bs.Stalls, bs.StallTime.Round(time.Millisecond), st.PeakHeldBytes)
		if res.dropped != 0 {
			t.Errorf("%d segments dropped, want 0", res.dropped)
		}
		if bs.Peak > int64(limit) || st.PeakHeldBytes > int64(limit) {
			t.Errorf("peak memory %d B (queue %d B) above the budget %d B", bs.Peak, st.PeakHeldBytes, limit)
		}
		if held := res.sent - res.delivered; held*seedTruesize > limit {
			t.Errorf("producer ran %d segments ahead of the sink, more than the budget holds", held)
		}
	})
	t.Run("droptail", func(t *testing.T) {
		q := mustQueue(t, QueueConfig{Policy: DropTail, Packets: 1024, Bytes: 1024 * seedTruesize})
		res := runSeed(t, q, nil)
		res.log(t, "droptail, no budget")
		if res.dropped == 0 {
			t.Error("no drops without a budget")
		}
	})
}
