package frame

import "fmt"

// DropReason says why the pipeline dropped something: one vocabulary for
// both directions and every port. A super-packet dropped before it is cut
// counts once; after it is cut, each segment counts.
type DropReason int

// Drop reasons, the index into Drops.
const (
	DropInvalid    DropReason = iota // a packet failed validation or was truncated
	DropOversize                     // a super-packet's segments do not fit in a frame
	DropHook                         // the hook refused a segment
	DropQueueFull                    // a segment met a full DropTail queue (backpressure off)
	DropNoFrames                     // a super-packet met no free frames (backpressure off)
	DropUnresolved                   // a segment's next hop did not resolve (counted by the sink)
	DropWriteError                   // the return path's writer refused a packet
	DropTooBig                       // a packet or its segments exceed the egress MTU
	DropNotRouted                    // a packet a router does not forward: to a multicast, link-local or loopback address (counted by the sink)
	DropSpoofed                      // a packet from the outside whose source lies inside (strict reverse-path filtering)
	NumDropReasons                   // the number of reasons
)

// ForwardDropReasons are the reasons a Forwarder (with its sink) counts;
// ReturnDropReasons those a ReturnPath counts. The other entries of each
// one's Drops stay 0.
var (
	ForwardDropReasons = []DropReason{DropInvalid, DropOversize, DropHook, DropQueueFull, DropNoFrames, DropUnresolved, DropTooBig, DropNotRouted}
	ReturnDropReasons  = []DropReason{DropInvalid, DropWriteError, DropSpoofed}
)

var dropNames = [NumDropReasons]string{"invalid", "oversize", "hook", "queue_full", "no_frames", "unresolved", "write_error", "too_big", "not_routed", "spoofed"}

// String returns the reason's metric label, such as "queue_full".
func (r DropReason) String() string {
	if r < 0 || r >= NumDropReasons {
		return fmt.Sprintf("DropReason(%d)", int(r))
	}
	return dropNames[r]
}

// Drops counts drops by reason.
type Drops [NumDropReasons]uint64

// Total returns the sum over all reasons.
func (d Drops) Total() uint64 {
	var n uint64
	for _, v := range d {
		n += v
	}
	return n
}

// Add adds o to d.
func (d *Drops) Add(o Drops) {
	for i := range d {
		d[i] += o[i]
	}
}
