package txqueue

import "math"

const maxSlack = math.MaxInt64

// adapt runs the self-sizing limit (see Budget) after a release of n bytes
// that left in bytes in flight. Concurrent releases (several sinks) skip the
// sample rather than wait for one another.
func (b *Budget) adapt(in, n int64) {
	s := &b.sizer
	if !s.mu.TryLock() {
		return
	}
	defer s.mu.Unlock()
	now := s.now()
	if in == 0 && b.refused.Swap(false) {
		if b.setLimit(b.limit.Load() + max(n, b.burst)) {
			b.grown.Add(1)
		}
		s.start, s.lowest = now, maxSlack
		return
	}
	s.lowest = min(s.lowest, in-n)
	if now.Sub(s.start) < s.hold {
		return
	}
	if s.lowest > 0 && b.setLimit(b.limit.Load()-s.lowest) {
		b.shrunk.Add(1)
	}
	s.start, s.lowest = now, maxSlack
}

// setLimit stores v clamped to [Burst, ceiling] and reports whether the
// limit changed. A larger limit may admit parked producers at once.
func (b *Budget) setLimit(v int64) bool {
	v = min(max(v, b.burst), b.ceiling)
	old := b.limit.Swap(v)
	if v > old && b.nwait.Load() > 0 {
		b.wake()
	}
	return v != old
}
