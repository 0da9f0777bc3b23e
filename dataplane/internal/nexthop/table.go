package nexthop

import "net/netip"

// entry is what the resolver knows of one destination (of the gateway,
// with Config.Gateway). It holds copies only, never netlink buffers.
type entry struct {
	dst    netip.Addr // invalid in a free slot
	hop    netip.Addr // the next hop, once the route is known
	mac    [6]byte
	state  State
	static bool  // the kernel's neighbour is permanent or needs no resolution: never probe it
	stale  bool  // Pending, its neighbour deleted by the kernel: mac is still used (see Resolver.restart)
	used   bool  // looked up since the clock hand last passed
	queued bool  // a re-validation is queued
	until  int64 // ms: Pending: fail then; Failed: forget then; Resolved: re-validate when used
}

// table is the bounded cache: a fixed array of slots, an index and the
// clock (second chance) algorithm to pick a slot to reuse when full. An
// entry earns its second chance by a lookup after the one that added it,
// so that a churn of one-off destinations evicts itself, not the
// destinations in use. It never evicts a Pending entry.
type table struct {
	index   map[netip.Addr]int32
	slots   []entry
	free    []int32
	hand    int
	max     int
	pending int                  // entries in state Pending
	via     map[netip.Addr]int32 // for each next hop, the entries routed through it (not itself)
}

func newTable(max int) table {
	return table{
		index: make(map[netip.Addr]int32, max),
		slots: make([]entry, 0, max),
		free:  make([]int32, 0, max),
		via:   make(map[netip.Addr]int32),
		max:   max,
	}
}

// get returns dst's entry, or nil.
func (t *table) get(dst netip.Addr) *entry {
	if i, ok := t.index[dst]; ok {
		return &t.slots[i]
	}
	return nil
}

// add inserts a Pending entry for dst, which must be missing, and
// reports whether another was evicted to make room.
func (t *table) add(dst netip.Addr) (e *entry, evicted bool) {
	var i int32
	switch {
	case len(t.free) > 0:
		i = t.free[len(t.free)-1]
		t.free = t.free[:len(t.free)-1]
	case len(t.slots) < t.max:
		i = int32(len(t.slots))
		t.slots = append(t.slots, entry{})
	default:
		i = t.victim()
		t.remove(&t.slots[i])
		t.free = t.free[:len(t.free)-1] // remove freed i
		evicted = true
	}
	t.slots[i] = entry{dst: dst, state: Pending} // cold until looked up again: one-off destinations go first
	t.index[dst] = i
	t.pending++
	return &t.slots[i], evicted
}

// victim returns the slot the clock hand stops at: the first entry not
// Pending and not used since the hand last passed, clearing the used
// marks it passes.
func (t *table) victim() int32 {
	for {
		i := t.hand
		t.hand = (t.hand + 1) % len(t.slots)
		e := &t.slots[i]
		if e.state == Pending {
			continue
		}
		if !e.used {
			return int32(i)
		}
		e.used = false
	}
}

// remove drops an entry and frees its slot.
func (t *table) remove(e *entry) {
	i := t.index[e.dst]
	delete(t.index, e.dst)
	t.setState(e, Failed)
	t.setHop(e, netip.Addr{})
	*e = entry{}
	t.free = append(t.free, i)
}

// setState changes an entry's state, keeping count of the Pending ones;
// an entry that is no longer Pending is not stale.
func (t *table) setState(e *entry, s State) {
	if e.state == Pending {
		t.pending--
		e.stale = false
	}
	if s == Pending {
		t.pending++
	}
	e.state = s
}

// setHop changes an entry's next hop, keeping count of the entries
// routed through each.
func (t *table) setHop(e *entry, hop netip.Addr) {
	if e.hop.IsValid() && e.hop != e.dst {
		if t.via[e.hop]--; t.via[e.hop] == 0 {
			delete(t.via, e.hop)
		}
	}
	if hop.IsValid() && hop != e.dst {
		t.via[hop]++
	}
	e.hop = hop
}

// through calls fn for each entry whose next hop is hop: the entry of
// hop itself, and, if some are routed through hop, those found by a
// scan. fn may remove the entry.
func (t *table) through(hop netip.Addr, fn func(*entry)) {
	if e := t.get(hop); e != nil && e.hop == hop {
		fn(e)
	}
	if t.via[hop] == 0 {
		return
	}
	for i := range t.slots {
		if e := &t.slots[i]; e.dst.IsValid() && e.dst != hop && e.hop == hop {
			fn(e)
		}
	}
}

// all calls fn for each entry; fn may remove it.
func (t *table) all(fn func(*entry)) {
	for i := range t.slots {
		if e := &t.slots[i]; e.dst.IsValid() {
			fn(e)
		}
	}
}
