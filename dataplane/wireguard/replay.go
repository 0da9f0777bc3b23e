package wireguard

import "sync"

// The replay window: a ring of 64-bit blocks over the counters below the
// highest seen (as RFC 6479 describes), of which the block holding the
// highest one is partly ahead, so that ReplayWindow counters behind the
// highest are always tracked.
const (
	replayBlocks = 128
	ReplayWindow = (replayBlocks - 1) * 64 // counters behind the highest that are still accepted once
)

type replayWindow struct {
	mu   sync.Mutex
	top  uint64 // the highest counter accepted plus one; 0: none yet
	ring [replayBlocks]uint64
}

// fresh reports whether counter c would be accepted: newer than any, or
// within the window and not seen. r.mu is held.
func (r *replayWindow) fresh(c uint64) bool {
	if c >= r.top {
		return true
	}
	if r.top-1-c >= ReplayWindow {
		return false
	}
	return r.ring[(c>>6)%replayBlocks]&(1<<(c&63)) == 0
}

// accept marks c seen if it is fresh, and reports whether it was. r.mu
// is held.
func (r *replayWindow) accept(c uint64) bool {
	if !r.fresh(c) {
		return false
	}
	if c >= r.top {
		block := c >> 6
		first := uint64(0) // the first block to clear
		if r.top > 0 {
			first = (r.top-1)>>6 + 1
		}
		if block >= first && block-first >= replayBlocks {
			first = block - replayBlocks + 1
		}
		for b := first; b <= block; b++ {
			r.ring[b%replayBlocks] = 0
		}
		r.top = c + 1
	}
	r.ring[(c>>6)%replayBlocks] |= 1 << (c & 63)
	return true
}
