// Package txqueue is gsoplane's transmit-side memory accounting: a
// socket-style send budget that charges every segment its truesize and
// releases it on TX completion, and the bounded queue between software
// segmentation and the sink (AF_XDP TX, AF_PACKET). It is pure Go with no
// system calls and builds on any OS; the dataplane package wires it to real
// devices.
//
// # Why
//
// When a super-packet is cut into segments and the segments are no longer
// charged to the sender, the sender sees an empty send buffer, sends without
// limit, and the queue in front of the NIC drops most of it. This package
// makes that impossible by construction: a producer takes its next
// super-packet only when its owner's budget has room, and room is returned
// only when the sink has really sent the segments.
//
// # Model
//
//   - Owner: a Budget, the analogue of a socket's sk_wmem_alloc against
//     sk_sndbuf. Typically one per source of super-packets (a TUN queue, a
//     connection).
//   - Truesize: the memory a segment pins, its buffer size plus a fixed
//     Overhead (see Truesize). The owner is charged the sum of its segments'
//     truesizes, never the super-packet's length.
//   - Charge on enqueue, release on completion: Queue.Enqueue charges each
//     Item to its Owner; Queue.Complete, called when the sink reports the
//     segments gone, releases exactly those segments in FIFO order; nothing
//     releases earlier. Queue.Close releases whatever is still held, once.
//   - Admission: before taking the next super-packet from its source, a
//     producer calls Budget.Admit (blocking, with a context) or
//     Budget.TryAdmit (returns ErrWouldBlock; Budget.Ready is signalled when
//     it may try again). It is admitted while the budget has room for one
//     more worst-case super-packet (BudgetConfig.Burst), and while the flow
//     holds less than its share of the budget, as TCP Small Queues does.
//   - Limit: by default self-sizing, like Linux BQL: it grows when the sink
//     ran dry while a producer was held back, and shrinks when a standing
//     queue persists for a hold time; or fixed. Budget documents the
//     algorithm.
//
// # Queue policies
//
// A Queue is bounded in segments and in truesize bytes, counting everything
// held: pending segments and segments handed to the sink but not yet
// completed. Its policy is chosen at construction: Block makes producers wait
// for room and never drops (the production mode, with a Budget in front);
// DropTail drops what does not fit and counts it (the failure mode, kept to
// demonstrate it). There is no unlimited queue.
//
// # Typical loops
//
// Producer: Admit, read and segment one super-packet, Enqueue its segments.
// Sink: Dequeue a batch (waiting on Queue.Ready when empty), transmit it, and
// Complete as completions arrive. See the package example.
package txqueue
