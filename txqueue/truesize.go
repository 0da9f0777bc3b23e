package txqueue

// Overhead is the fixed per-segment cost, in bytes, that Truesize adds to a
// segment's buffer size: the bookkeeping memory every queued segment pins
// besides its data (here its Item and descriptors; in Linux the struct
// sk_buff, a little over 200 bytes on x86-64). Budgets and byte limits are
// expressed in truesize bytes, so this constant is part of the API: it decides
// how many small segments a given budget admits.
const Overhead = 256

// Truesize returns the memory one segment pins: bufLen, the size of the
// buffer or frame that holds it (for AF_XDP the UMEM frame size, not the
// packet length), plus Overhead. A negative bufLen counts as zero.
//
// A super-packet cut into n segments costs its owner the sum of its segments'
// truesizes, never its own length: n*Overhead more, which is what makes many
// small segments expensive, as they are in the kernel.
func Truesize(bufLen int) int {
	return max(bufLen, 0) + Overhead
}
