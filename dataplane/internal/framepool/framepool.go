// Package framepool is the pool of transmit frames of the sinks that
// keep their frames in Go memory, dataplane/afpacket and dataplane/udp:
// frames of one size, and optionally a second set of larger frames,
// allocated once, handed out without allocating, taken by Transmit and
// put back, in the order they were taken, by Complete, or kept by
// Transmit past its completion until Release. A frame's ID is its index:
// the small frames come first, then the large ones.
package framepool

import (
	"sync"

	"github.com/gsoplane/gsoplane/dataplane/frame"
)

// Frame states.
const (
	stateFree  uint8 = iota // in the pool
	stateOut                // allocated: the producer writes it
	stateTaken              // taken by Transmit, not yet completed
	stateKept               // kept by Transmit past its completion, until Release
)

// Pool is a sink's frames. Its methods may be called from any goroutine.
type Pool struct {
	mem       []byte // small frames, then large ones
	size      int    // of a small frame
	largeSize int
	small     int // how many small frames

	mu     sync.Mutex
	free   []uint32 // free small frames (a stack)
	freeL  []uint32 // free large frames (a stack)
	states []uint8  // per frame
	taken  []uint32 // taken frames, in order, until Complete
	kept   [2]int   // kept frames, small and large
}

// New returns a pool of small frames of size bytes and large frames of
// largeSize bytes, all free.
func New(small, size, large, largeSize int) *Pool {
	p := &Pool{
		mem:  make([]byte, small*size+large*largeSize),
		size: size, largeSize: largeSize, small: small,
		free:   make([]uint32, 0, small),
		freeL:  make([]uint32, 0, large),
		states: make([]uint8, small+large),
		taken:  make([]uint32, 0, small+large),
	}
	for i := small - 1; i >= 0; i-- { // Alloc hands out frame 0 first
		p.free = append(p.free, uint32(i))
	}
	for i := large - 1; i >= 0; i-- {
		p.freeL = append(p.freeL, uint32(small+i))
	}
	return p
}

// Small returns the number of small frames.
func (p *Pool) Small() int { return p.small }

// Frame returns the memory of frame id, which must be one of the pool's.
func (p *Pool) Frame(id uint32) []byte {
	if int(id) < p.small {
		off := int(id) * p.size
		return p.mem[off : off+p.size : off+p.size]
	}
	off := p.small*p.size + (int(id)-p.small)*p.largeSize
	return p.mem[off : off+p.largeSize : off+p.largeSize]
}

// Alloc takes free small frames into frames and returns how many.
func (p *Pool) Alloc(frames []frame.Frame) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := min(len(frames), len(p.free))
	for i := range n {
		id := p.free[len(p.free)-1-i]
		p.states[id] = stateOut
		frames[i] = frame.Frame{Buf: p.Frame(id), ID: uint64(id)}
	}
	p.free = p.free[:len(p.free)-n]
	return n
}

// AllocLarge takes a free large frame; false when none is free.
func (p *Pool) AllocLarge() (frame.Frame, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.freeL) == 0 {
		return frame.Frame{}, false
	}
	id := p.freeL[len(p.freeL)-1]
	p.freeL = p.freeL[:len(p.freeL)-1]
	p.states[id] = stateOut
	return frame.Frame{Buf: p.Frame(id), ID: uint64(id)}, true
}

// Free puts allocated frames back; frames that are not allocated (free,
// taken, or not the pool's) are ignored.
func (p *Pool) Free(frames []frame.Frame) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range frames {
		if f.ID < uint64(len(p.states)) && p.states[f.ID] == stateOut {
			p.put(uint32(f.ID))
		}
	}
}

// Allocated returns how many frames from the front are allocated frames
// holding 1 to their size less headroom bytes of packet (Frame.Len).
func (p *Pool) Allocated(frames []frame.Frame, headroom int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, f := range frames {
		if f.ID >= uint64(len(p.states)) || p.states[f.ID] != stateOut ||
			f.Len <= 0 || headroom+f.Len > len(p.Frame(uint32(f.ID))) {
			return i
		}
	}
	return len(frames)
}

// Take marks frames, allocated and checked, taken by Transmit, sent or
// dropped: Free ignores them until Complete puts them back.
func (p *Pool) Take(frames []frame.Frame) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range frames {
		p.states[f.ID] = stateTaken
		p.taken = append(p.taken, uint32(f.ID))
	}
}

// Keep marks a frame, allocated and checked, taken by Transmit but kept
// by the sink (a frame waiting for its next hop): Complete reports it as
// it reports taken ones, but only Release puts it back. It reports false,
// and takes nothing, when one in share of the frames of its size is kept
// already.
func (p *Pool) Keep(f frame.Frame, share int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	size, all := p.sizeOf(uint32(f.ID))
	if p.kept[size] >= all/share {
		return false
	}
	p.kept[size]++
	p.states[f.ID] = stateKept
	p.taken = append(p.taken, uint32(f.ID))
	return true
}

// Release puts kept frames back; others are ignored.
func (p *Pool) Release(frames []frame.Frame) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range frames {
		if f.ID < uint64(len(p.states)) && p.states[f.ID] == stateKept {
			size, _ := p.sizeOf(uint32(f.ID))
			p.kept[size]--
			p.put(uint32(f.ID))
		}
	}
}

// sizeOf returns 0 for a small frame, 1 for a large one, and how many
// frames of that size the pool has.
func (p *Pool) sizeOf(id uint32) (size, all int) {
	if int(id) < p.small {
		return 0, p.small
	}
	return 1, len(p.states) - p.small
}

// Taken returns how many frames Take and Keep took since the last
// Complete.
func (p *Pool) Taken() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.taken)
}

// Complete puts the frames Take took since the last call back in the
// pool and returns how many frames Take and Keep took.
func (p *Pool) Complete() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.taken)
	for _, id := range p.taken {
		if p.states[id] == stateTaken { // a frame transmitted twice goes back once
			p.put(id)
		}
	}
	p.taken = p.taken[:0]
	return n
}

// put puts frame id back (mu held).
func (p *Pool) put(id uint32) {
	p.states[id] = stateFree
	if int(id) < p.small {
		p.free = append(p.free, id)
	} else {
		p.freeL = append(p.freeL, id)
	}
}
