package pipeline

import "sync/atomic"

// A Pulse is a loop's heartbeat, read from outside it to tell a loop
// that works or waits for work from one that is wedged (blocked in a
// call that should return, or spinning): it advances each time the loop
// comes round, and is odd while the loop waits for what only something
// else can give it: packets from its Source or Receiver, room in the
// budget, the queue or the sink's frames, which the forwarder's sink
// loop gives back, or segments in the queue, which its producer puts
// there. A Forwarder has two loops (Forwarder.Pulses), a ReturnPath one
// (ReturnPath.Pulse). A pulse costs its loop an atomic add per round and
// two per such wait.
type Pulse uint64

// Alive reports whether the loop whose pulse was before, and is p now,
// came round since or waits for work now.
func (p Pulse) Alive(before Pulse) bool { return p != before || p&1 == 1 }

// Alive reports whether every loop came round or waits for work: now[i]
// is loop i's pulse now, before[i] its pulse before; false if the loops
// are not the same number.
func Alive(before, now []Pulse) bool {
	if len(before) != len(now) {
		return false
	}
	for i, p := range now {
		if !p.Alive(before[i]) {
			return false
		}
	}
	return true
}

// heartbeat is a loop's Pulse: beat on each round, wait and woke around
// a wait for work.
type heartbeat struct{ n atomic.Uint64 }

func (h *heartbeat) beat()        { h.n.Add(2) }
func (h *heartbeat) wait()        { h.n.Add(1) }
func (h *heartbeat) woke()        { h.n.Add(1) }
func (h *heartbeat) pulse() Pulse { return Pulse(h.n.Load()) }
