package pipeline

import (
	"sort"
	"sync/atomic"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/frame"
)

// SegmentBounds are the upper bounds of the Stats.SegmentsPerRead buckets;
// the last bucket counts larger values.
var SegmentBounds = [...]int{1, 2, 4, 8, 16, 32, 64, 128}

// LatencyBounds are the upper bounds of the Stats.TxLatency buckets; the
// last bucket counts larger values.
var LatencyBounds = [...]time.Duration{
	10 * time.Microsecond, 25 * time.Microsecond, 50 * time.Microsecond,
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond,
}

// Stats is a snapshot of a forwarder's counters.
type Stats struct {
	SuperPackets   uint64        // packets read from the source
	Segments       uint64        // segments queued
	Bytes          uint64        // IP bytes of the segments queued
	Transmitted    uint64        // segments the sink took
	Completed      uint64        // segments the sink reported gone
	Offloaded      uint64        // super-packets an OffloadSink took whole (counted once in Transmitted and Completed)
	InPlace        uint64        // of those, the ones it took in the frame they were read into: not copied
	Cut            uint64        // super-packets cut here into two segments or more
	TxErrors       uint64        // Transmit calls that returned an error
	FrameStalls    uint64        // times the producer waited for free frames
	FrameStallTime time.Duration // total time it waited
	Drops          frame.Drops
	// HostControl counts the segments the sink discarded as the host's
	// own signalling to the link (neighbour discovery, MLD, IGMP): not
	// forwarded, as DropNotRouted, but not drops (counted by the sink).
	HostControl uint64

	// SegmentsPerRead counts super-packets by how many segments they were
	// cut into (buckets bounded by SegmentBounds).
	SegmentsPerRead [len(SegmentBounds) + 1]uint64
	// TxLatency counts segments by the time from Transmit to completion
	// (buckets bounded by LatencyBounds); TxLatencySum is their total.
	TxLatency    [len(LatencyBounds) + 1]uint64
	TxLatencySum time.Duration
}

type counters struct {
	superPackets, segments, bytes    atomic.Uint64
	transmitted, completed, txErrors atomic.Uint64
	offloaded, cut, inPlace          atomic.Uint64
	frameStalls, frameStallNanos     atomic.Uint64
	drops                            [frame.NumDropReasons]atomic.Uint64
	segHist                          [len(SegmentBounds) + 1]atomic.Uint64
	latHist                          [len(LatencyBounds) + 1]atomic.Uint64
	latSum                           atomic.Int64
}

func (c *counters) drop(r frame.DropReason, n int) { c.drops[r].Add(uint64(n)) }

// segmented counts a super-packet cut into n segments.
func (c *counters) segmented(n int) {
	c.segHist[sort.SearchInts(SegmentBounds[:], n)].Add(1)
}

// completedAfter counts n segments completed d after their Transmit.
func (c *counters) completedAfter(n int, d time.Duration) {
	i := sort.Search(len(LatencyBounds), func(i int) bool { return d <= LatencyBounds[i] })
	c.latHist[i].Add(uint64(n))
	c.latSum.Add(int64(n) * int64(d))
}

func (c *counters) snapshot() Stats {
	s := Stats{
		SuperPackets: c.superPackets.Load(),
		Segments:     c.segments.Load(),
		Bytes:        c.bytes.Load(),
		Transmitted:  c.transmitted.Load(),
		Completed:    c.completed.Load(),
		Offloaded:    c.offloaded.Load(),
		Cut:          c.cut.Load(),
		InPlace:      c.inPlace.Load(),
		TxErrors:     c.txErrors.Load(),
		FrameStalls:  c.frameStalls.Load(),
	}
	s.FrameStallTime = time.Duration(c.frameStallNanos.Load())
	for i := range s.Drops {
		s.Drops[i] = c.drops[i].Load()
	}
	for i := range s.SegmentsPerRead {
		s.SegmentsPerRead[i] = c.segHist[i].Load()
	}
	for i := range s.TxLatency {
		s.TxLatency[i] = c.latHist[i].Load()
	}
	s.TxLatencySum = time.Duration(c.latSum.Load())
	return s
}

// Add returns the field-by-field sum of s and o, as for the forwarders of
// several queues.
func (s Stats) Add(o Stats) Stats {
	s.SuperPackets += o.SuperPackets
	s.Segments += o.Segments
	s.Bytes += o.Bytes
	s.Transmitted += o.Transmitted
	s.Completed += o.Completed
	s.Offloaded += o.Offloaded
	s.Cut += o.Cut
	s.InPlace += o.InPlace
	s.TxErrors += o.TxErrors
	s.FrameStalls += o.FrameStalls
	s.FrameStallTime += o.FrameStallTime
	s.Drops.Add(o.Drops)
	s.HostControl += o.HostControl
	for i := range s.SegmentsPerRead {
		s.SegmentsPerRead[i] += o.SegmentsPerRead[i]
	}
	for i := range s.TxLatency {
		s.TxLatency[i] += o.TxLatency[i]
	}
	s.TxLatencySum += o.TxLatencySum
	return s
}
