package pipeline

import (
	"net"
	"sync"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/segment"
)

// FanIn is one Receiver of the frames of several, such as the queues of
// a port that has more receive queues than the port its packets go out
// of has transmit queues: one forwarder (one producer on one TX queue)
// takes them all. Each Receiver is read by a goroutine of its own,
// started by the first Receive, which hands over a batch and waits until
// the FanIn's caller is done with it (the frames of a Receiver stay
// valid until its next Receive) before it receives again. Receive waits
// for the first batch of any of them. It allocates nothing per batch.
// It passes on the headers of those that are HeaderReceivers (the
// others' frames get the zero Header).
type FanIn struct {
	rs      []frame.Receiver
	hrs     []frame.HeaderReceiver // rs[i], if it is one
	batches chan fanBatch          // the batches handed over, at most one per Receiver
	release []chan struct{}        // per Receiver: its batch is used up
	done    chan struct{}          // closed by Close
	start   sync.Once
	wg      sync.WaitGroup

	cur  fanBatch // the batch being handed out, from cur.from
	off  int      // frames of cur already handed out
	last int      // the index in cur of the first frame the last Receive returned
	held bool     // cur is not released yet
}

// fanBatch is what one Receive of Receiver from returned.
type fanBatch struct {
	from   int
	frames [][]byte
	n      int
	err    error
}

// NewFanIn returns a FanIn of rs, which must have the same Headroom.
// Close it once the ports of rs have stopped receiving.
func NewFanIn(rs []frame.Receiver) *FanIn {
	f := &FanIn{
		rs:      rs,
		batches: make(chan fanBatch, len(rs)),
		release: make([]chan struct{}, len(rs)),
		done:    make(chan struct{}),
		hrs:     make([]frame.HeaderReceiver, len(rs)),
	}
	for i := range f.release {
		f.release[i] = make(chan struct{}, 1)
		f.hrs[i], _ = rs[i].(frame.HeaderReceiver)
	}
	return f
}

// Headroom is that of the Receivers.
func (f *FanIn) Headroom() int { return f.rs[0].Headroom() }

// Receive returns frames of one Receiver's batch, at most len(frames),
// valid until the next Receive; a Receiver's error, or 0 when it
// returned none; or net.ErrClosed once the FanIn is closed. Call it
// from one goroutine.
func (f *FanIn) Receive(frames [][]byte) (int, error) {
	f.start.Do(func() { f.run(len(frames)) })
	if f.held && f.off == f.cur.n {
		f.release[f.cur.from] <- struct{}{}
		f.held = false
	}
	if !f.held {
		var b fanBatch
		select {
		case b = <-f.batches:
		case <-f.done:
			return 0, net.ErrClosed
		}
		if b.n == 0 {
			return 0, b.err
		}
		f.cur, f.off, f.held = b, 0, true
	}
	n := copy(frames, f.cur.frames[f.off:f.cur.n])
	f.last = f.off
	f.off += n
	return n, nil
}

// Header returns the header of frame i of the last Receive, as its
// Receiver gave it, or the zero Header if that is not a HeaderReceiver.
func (f *FanIn) Header(i int) segment.Header {
	if hr := f.hrs[f.cur.from]; hr != nil {
		return hr.Header(f.last + i)
	}
	return segment.Header{}
}

// run starts a goroutine per Receiver taking batches of up to size
// frames.
func (f *FanIn) run(size int) {
	for i, r := range f.rs {
		f.wg.Add(1)
		go f.receive(i, r, make([][]byte, size))
	}
}

// receive hands over r's batches until r fails or the FanIn is closed:
// frames (then it waits for their release), and an error or an empty
// Receive on its own, so that the caller sees them as from r.
func (f *FanIn) receive(i int, r frame.Receiver, frames [][]byte) {
	defer f.wg.Done()
	for {
		n, err := r.Receive(frames)
		if n > 0 {
			if !f.hand(fanBatch{from: i, frames: frames, n: n}) {
				return
			}
			select {
			case <-f.release[i]:
			case <-f.done:
				return
			}
		}
		if n == 0 || err != nil {
			if !f.hand(fanBatch{from: i, err: err}) || err != nil {
				return
			}
		}
	}
}

// hand queues b for Receive; false if the FanIn was closed first.
func (f *FanIn) hand(b fanBatch) bool {
	select {
	case f.batches <- b:
		return true
	case <-f.done:
		return false
	}
}

// Close stops the goroutines and waits for them; each must be back from
// its Receiver's Receive, so call it once the ports have stopped
// receiving (or are closed). Receive returns net.ErrClosed afterwards.
func (f *FanIn) Close() {
	select {
	case <-f.done:
	default:
		close(f.done)
	}
	f.wg.Wait()
}
