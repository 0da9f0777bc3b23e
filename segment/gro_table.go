package segment

// groFlow is a flow seen in the current batch.
type groFlow struct {
	hash uint64
	pkt  int32  // a packet of the flow, to compare kind, addresses and ports with
	item int32  // the flow's latest output packet, or -1
	gen  uint32 // the batch that claimed the slot
}

// groTable finds the flows of a batch: open addressing with linear
// probing, at most half full (it has at least twice as many slots as a
// batch has packets). Slots of earlier batches count as empty, so a batch
// starts without clearing the table.
type groTable struct {
	slots []groFlow
	mask  uint64
	gen   uint32
}

func newGROTable(maxBatch int) groTable {
	n := 16
	for n < 2*maxBatch {
		n <<= 1
	}
	return groTable{slots: make([]groFlow, n), mask: uint64(n - 1)}
}

// reset starts a batch.
func (t *groTable) reset() {
	t.gen++
	if t.gen == 0 { // wrapped: forget the slots' old batch numbers
		clear(t.slots)
		t.gen = 1
	}
}

// claim returns the flow of keyed packet i, adding it if it is new.
func (t *groTable) claim(pkts []groPacket, i int) *groFlow {
	f, found := t.probe(pkts, i)
	if !found {
		*f = groFlow{hash: pkts[i].hash, pkt: int32(i), item: -1, gen: t.gen}
	}
	return f
}

// find returns the flow of keyed packet i, or nil.
func (t *groTable) find(pkts []groPacket, i int) *groFlow {
	if f, found := t.probe(pkts, i); found {
		return f
	}
	return nil
}

// probe returns the slot of packet i's flow, or the empty slot where it
// belongs.
func (t *groTable) probe(pkts []groPacket, i int) (*groFlow, bool) {
	p := &pkts[i]
	for k := p.hash & t.mask; ; k = (k + 1) & t.mask {
		f := &t.slots[k]
		if f.gen != t.gen {
			return f, false
		}
		if f.hash == p.hash && sameFlow(&pkts[f.pkt], p) {
			return f, true
		}
	}
}
