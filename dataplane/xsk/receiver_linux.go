package xsk

import (
	"time"

	"github.com/gsoplane/gsoplane/dataplane/pipeline"
)

// rxWait bounds one Receive's wait, so that the return path notices that
// its context ended.
const rxWait = 10 * time.Millisecond

// receiver is a socket's receive side as a pipeline.Receiver.
type receiver struct {
	x     *Socket
	addrs []uint64 // the frames of the last Receive, given back by the next
}

var _ pipeline.Receiver = (*receiver)(nil)

// Receiver returns the socket's receive side as a pipeline.Receiver: each
// Receive gives the frames of the previous one back to the kernel (fill
// ring), then returns the frames waiting, waiting up to 10 ms for one.
// Use one Receiver per socket, from one goroutine.
func (x *Socket) Receiver() pipeline.Receiver { return &receiver{x: x} }

func (r *receiver) Receive(frames [][]byte) (int, error) {
	r.x.recycle(r.addrs)
	if cap(r.addrs) < len(frames) {
		r.addrs = make([]uint64, len(frames))
	}
	r.addrs = r.addrs[:len(frames)]
	n := r.x.receive(frames, r.addrs)
	if n == 0 {
		if _, err := r.x.waitRX(rxWait); err != nil {
			r.addrs = r.addrs[:0]
			return 0, err
		}
		n = r.x.receive(frames, r.addrs)
	}
	r.addrs = r.addrs[:n]
	return n, nil
}
