package pipeline

import (
	"context"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/frame"
)

// pastDeadline is the read deadline that wakes a ReadDeadliner: any time
// in the past.
var pastDeadline = time.Unix(1, 0)

// wakeOnDone clears x's read deadline, if x is a ReadDeadliner, and sets
// one in the past when ctx ends, so that a blocked Read or Receive
// returns. Call stop when Run returns: after it, ctx ending no longer
// touches x. The deadline stays in the past (a ReadDeadliner shared by
// several loops, such as a UDP socket read by the return paths of
// several queues, must not be woken by one and put to sleep by another);
// the next Run clears it.
func wakeOnDone(ctx context.Context, x any) (stop func()) {
	d, ok := x.(frame.ReadDeadliner)
	if !ok || ctx.Done() == nil {
		return func() {}
	}
	if ctx.Err() == nil {
		d.SetReadDeadline(time.Time{})
	}
	woke := make(chan struct{})
	cancel := context.AfterFunc(ctx, func() {
		defer close(woke)
		d.SetReadDeadline(pastDeadline)
	})
	return func() {
		if !cancel() {
			<-woke // the wake-up ran, or is running: let it finish
		}
	}
}
