package txqueue_test

import (
	"context"
	"fmt"

	"github.com/gsoplane/gsoplane/txqueue"
)

// A producer segments super-packets into a queue under its send budget; a
// sink drains the queue in batches and reports completions, which return the
// budget.
func Example() {
	const segments, frame = 45, 2048 // a 64 KiB TSO packet in 2 KiB frames
	size := txqueue.Truesize(frame)
	budget, err := txqueue.NewBudget(txqueue.BudgetConfig{
		Burst: segments * size, // one worst-case super-packet
		Limit: 1 << 20,         // the self-sizing limit's ceiling
	})
	if err != nil {
		panic(err)
	}
	q, err := txqueue.NewQueue[int](txqueue.QueueConfig{
		Policy: txqueue.Block, Packets: 1024, Bytes: 1024 * size,
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	// The sink: dequeue a batch, transmit it, complete it.
	const total = 10 * segments
	sent := make(chan int)
	go func() {
		batch := make([]txqueue.Item[int], 64)
		n := 0
		for n < total {
			k, err := q.Dequeue(batch)
			if err != nil {
				break
			}
			if k == 0 {
				<-q.Ready()
				continue
			}
			// ... hand batch[:k] to the NIC; when it reports them done:
			if err := q.Complete(k); err != nil {
				panic(err)
			}
			n += k
		}
		sent <- n
	}()

	// The producer: admission before each super-packet, then its segments.
	items := make([]txqueue.Item[int], segments)
	for p := range 10 {
		flow := uint64(7) // the super-packet's 5-tuple hash
		if err := budget.Admit(ctx, flow); err != nil {
			panic(err)
		}
		for i := range items {
			items[i] = txqueue.Item[int]{Owner: budget, Flow: flow, Size: size, Value: p*segments + i}
		}
		if _, err := q.Enqueue(ctx, items); err != nil {
			panic(err)
		}
	}

	fmt.Println("sent", <-sent, "segments")
	q.Close()
	st := q.Stats()
	fmt.Println("completed", st.Completed, "dropped", st.Dropped[txqueue.DropPackets]+st.Dropped[txqueue.DropBytes])
	fmt.Println("still charged", budget.Stats().InFlight, "bytes")
	// Output:
	// sent 450 segments
	// completed 450 dropped 0
	// still charged 0 bytes
}
