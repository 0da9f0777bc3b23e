package txqueue

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkQueue measures the cost per segment of charge, enqueue, dequeue,
// complete and release, with producers of 45-segment super-packets and one
// sink draining batches of 64, against a buffered channel of the same
// capacity that does the equivalent work (send, receive, an atomic in-flight
// counter). One op is one segment.
func BenchmarkQueue(b *testing.B) {
	for _, c := range []struct {
		name      string
		producers int
	}{{"1p", 1}, {"2p", 2}} {
		b.Run(c.name+"/txqueue", func(b *testing.B) { benchTxqueue(b, c.producers) })
		b.Run(c.name+"/chan", func(b *testing.B) { benchChan(b, c.producers) })
	}
}

const (
	benchCap   = 4096
	benchBurst = 45
	benchBatch = 64
)

// share splits n segments among p producers.
func share(n, p, i int) int { return n/p + btoi(i < n%p) }

func btoi(ok bool) int {
	if ok {
		return 1
	}
	return 0
}

func benchTxqueue(b *testing.B, producers int) {
	size := Truesize(2048)
	q, err := NewQueue[uint64](QueueConfig{Policy: Block, Packets: benchCap, Bytes: benchCap * size})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for p := range producers {
		owner, err := NewBudget(BudgetConfig{Burst: benchBurst * size, Limit: benchCap / 2 * size})
		if err != nil {
			b.Fatal(err)
		}
		flow := uint64(p)
		items := make([]Item[uint64], benchBurst)
		for i := range items {
			items[i] = Item[uint64]{Owner: owner, Flow: flow, Size: size, Value: uint64(i)}
		}
		wg.Go(func() {
			for left := share(b.N, producers, p); left > 0; left -= benchBurst {
				if err := owner.Admit(ctx, flow); err != nil {
					b.Error(err)
					return
				}
				q.Enqueue(ctx, items[:min(left, benchBurst)])
			}
		})
	}
	out := make([]Item[uint64], benchBatch)
	for done := 0; done < b.N; {
		n, _ := q.Dequeue(out)
		if n == 0 {
			<-q.Ready()
			continue
		}
		q.Complete(n)
		done += n
	}
	wg.Wait()
}

func benchChan(b *testing.B, producers int) {
	size := int64(Truesize(2048))
	ch := make(chan uint64, benchCap)
	var inflight atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range share(b.N, producers, p) {
				inflight.Add(size)
				ch <- uint64(i)
			}
		})
	}
	for range b.N {
		<-ch
		inflight.Add(-size)
	}
	wg.Wait()
}
