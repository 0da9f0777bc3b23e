package dataplane

import "sync/atomic"

// DropReason says why the forwarder dropped a packet or a segment.
type DropReason int

// Drop reasons, the index into Stats.Drops.
const (
	DropInvalid   DropReason = iota // the super-packet failed validation
	DropOversize                    // a segment did not fit in a frame
	DropHook                        // the hook refused a segment
	DropQueueFull                   // a DropTail queue was full (backpressure off)
	DropNoFrames                    // every frame was in flight (backpressure off)
	numDropReasons
)

func (r DropReason) String() string {
	return [...]string{"invalid", "oversize", "hook", "queue_full", "no_frames"}[r]
}

// Stats is a snapshot of a forwarder's counters.
type Stats struct {
	SuperPackets uint64 // packets read from the source
	Segments     uint64 // segments queued
	Bytes        uint64 // IP bytes of the segments queued
	Transmitted  uint64 // segments the sink took
	Completed    uint64 // segments the sink reported gone
	TxErrors     uint64 // Transmit calls that returned an error
	FrameStalls  uint64 // times the producer waited for free frames
	Drops        [numDropReasons]uint64
}

// Dropped returns the sum of all drops.
func (s Stats) Dropped() uint64 {
	var n uint64
	for _, d := range s.Drops {
		n += d
	}
	return n
}

type counters struct {
	superPackets, segments, bytes    atomic.Uint64
	transmitted, completed, txErrors atomic.Uint64
	frameStalls                      atomic.Uint64
	drops                            [numDropReasons]atomic.Uint64
}

func (c *counters) drop(r DropReason, n int) { c.drops[r].Add(uint64(n)) }

func (c *counters) snapshot() Stats {
	s := Stats{
		SuperPackets: c.superPackets.Load(),
		Segments:     c.segments.Load(),
		Bytes:        c.bytes.Load(),
		Transmitted:  c.transmitted.Load(),
		Completed:    c.completed.Load(),
		TxErrors:     c.txErrors.Load(),
		FrameStalls:  c.frameStalls.Load(),
	}
	for i := range s.Drops {
		s.Drops[i] = c.drops[i].Load()
	}
	return s
}

// add returns the field-by-field sum of s and o.
func (s Stats) add(o Stats) Stats {
	s.SuperPackets += o.SuperPackets
	s.Segments += o.Segments
	s.Bytes += o.Bytes
	s.Transmitted += o.Transmitted
	s.Completed += o.Completed
	s.TxErrors += o.TxErrors
	s.FrameStalls += o.FrameStalls
	for i := range s.Drops {
		s.Drops[i] += o.Drops[i]
	}
	return s
}
