package segment

import (
	"math/rand/v2"
	"sync/atomic"
)

// A Segmenter cuts validated super-packets into segments. The zero value
// writes full software checksums and caps segments as the kernel does
// (see Validate). A Segmenter may be used by several goroutines at once.
type Segmenter struct {
	// Partial leaves TSO/USO segments (and passed-through packets) with a
	// correct partial checksum, the pseudo-header sum, at the checksum
	// field, for sinks that complete checksums in hardware: no payload byte
	// is summed. Layout.SegmentHeader(true) tells the sink where it is.
	Partial bool
	// MaxSegments, if positive, caps the segments one super-packet may
	// produce, below the kernel's caps; zero means the kernel's only.
	MaxSegments int

	fragID atomic.Uint32 // IPv6 UFO fragment identification
}

// std is the zero Segmenter of the package-level functions.
var std Segmenter

// tooMany reports n segments beyond the Segmenter's cap, if it has one.
func (s *Segmenter) tooMany(n int) bool { return s.MaxSegments > 0 && n > s.MaxSegments }

// nextFragID returns the identification for the fragments of one IPv6
// datagram: a counter from a random start (the kernel hashes the addresses
// with a secret; any value shared by all fragments is right).
func (s *Segmenter) nextFragID() uint32 {
	if s.fragID.Load() == 0 {
		s.fragID.CompareAndSwap(0, rand.Uint32()|1)
	}
	return s.fragID.Add(1)
}
