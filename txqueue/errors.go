package txqueue

import "errors"

// Sentinel errors. Functions return them bare on hot paths and wrapped with
// context (test with errors.Is) where the cost does not matter.
var (
	// ErrWouldBlock is returned by TryAdmit when the budget, or the flow's
	// share of it, has no room for one more Burst. Wait on Budget.Ready and
	// try again.
	ErrWouldBlock = errors.New("txqueue: would block")

	// ErrClosed is returned by every operation on a closed Queue, and by
	// admission on a closed Budget, including to callers blocked at the time
	// of Close.
	ErrClosed = errors.New("txqueue: closed")

	// ErrQueueFull is returned by Enqueue on a DropTail queue that dropped
	// the tail of the batch because the queue was full.
	ErrQueueFull = errors.New("txqueue: queue full")

	// ErrTooLarge is returned when one segment's truesize can never fit: it
	// is larger than the queue's byte limit or than its owner's Burst.
	ErrTooLarge = errors.New("txqueue: segment too large")

	// ErrInvalid reports a bad argument: a negative size, a bad
	// configuration, more completions than segments in flight, or a release
	// of more than was charged.
	ErrInvalid = errors.New("txqueue: invalid argument")
)
