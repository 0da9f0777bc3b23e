package pipeline

import (
	"context"
	"errors"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/txqueue"
)

// sinkBatch is how many segments the sink loop takes from the queue at once.
const sinkBatch = 64

// sender is the forwarder's sink side: it drains the queue into the sink,
// paces it when asked to, and turns the sink's completions into releases.
// The sink loop runs it; with a SyncSink (Forwarder.inline) the producer
// too, whoever holds Forwarder.tx (see push).
type sender struct {
	f        *Forwarder
	items    []txqueue.Item[frame.Frame]
	frames   []frame.Frame
	pending  []frame.Frame // dequeued, not yet taken by the sink
	inFlight int           // taken by the sink, not yet completed
	sent     []sentBatch
	pace     pacer
	backlog  frame.BackloggedSink // the sink, if it has a backlog
	flush    bool                 // its backlog is ready: Transmit even with no frames
	err      error                // the producer's Transmit or Complete failed: the sink loop ends with it
}

// sentBatch remembers when frames were taken by the sink, for the
// completion latency: completions come in Transmit order.
type sentBatch struct {
	n  int
	at time.Time
}

func newSender(f *Forwarder) *sender {
	s := &sender{
		f:      f,
		items:  make([]txqueue.Item[frame.Frame], sinkBatch),
		frames: make([]frame.Frame, sinkBatch),
		pace:   pacer{rate: f.cfg.TxRate},
	}
	s.backlog, _ = f.cfg.Sink.(frame.BackloggedSink)
	return s
}

func (f *Forwarder) sinkLoop(ctx context.Context, s *sender) error {
	for {
		f.sending.beat()
		s.lock()
		stop, err := s.round(ctx)
		s.unlock()
		if stop || err != nil {
			return err
		}
	}
}

// round is one round of the sink loop: it reports true when the loop is
// to end, with the error that ends it.
func (s *sender) round(ctx context.Context) (bool, error) {
	if s.err != nil {
		return true, s.err
	}
	if err := s.fill(); err != nil {
		return true, nil // the queue was closed: nothing more to send
	}
	sent, err := s.transmit()
	if err != nil {
		s.complete() // release what did go out
		return true, err
	}
	done, err := s.complete()
	if err != nil {
		return true, err
	}
	stop, err := s.idle(ctx, sent+done)
	if err != nil {
		s.complete() // release what did go out
	}
	return stop || err != nil, err
}

// lock and unlock take and give up the sender, shared with the producer
// (run to completion); no-ops otherwise.
func (s *sender) lock() {
	if s.f.inline {
		s.f.tx.Lock()
	}
}

func (s *sender) unlock() {
	if s.f.inline {
		s.f.tx.Unlock()
	}
}

// push runs to completion (a SyncSink): the producer transmits what it
// has just queued, unless the sink loop is at work, and wakes the sink
// loop for what it leaves (the sink took less than all: a full device
// queue; frames the sink keeps for their next hop), could not take (the
// sink loop held the sender) or an error.
func (f *Forwarder) push() {
	if !f.inline {
		return
	}
	if !f.tx.TryLock() {
		f.wakeSink()
		return
	}
	more := f.snd.pass()
	f.tx.Unlock()
	if more {
		f.wakeSink()
	}
}

// wakeSink wakes the sink loop (run to completion).
func (f *Forwarder) wakeSink() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// pass transmits and completes what is queued until the queue is empty
// or the sink takes nothing, and reports whether the sink loop has work
// left: frames pending or in flight, or an error to end with.
func (s *sender) pass() bool {
	for s.err == nil {
		if s.fill() != nil {
			return true // closed: the sink loop ends
		}
		if len(s.pending) == 0 {
			break
		}
		sent, err := s.transmit()
		_, cerr := s.complete()
		if s.err = errors.Join(err, cerr); s.err != nil || sent == 0 {
			break
		}
	}
	return s.err != nil || len(s.pending) > 0 || s.inFlight > 0 || s.backlogged()
}

// backlogged reports whether the sink keeps frames to send later (its
// Backlog is not nil): the sink loop, which waits for it, is to look
// again.
func (s *sender) backlogged() bool {
	return s.backlog != nil && s.backlog.Backlog() != nil
}

// fill dequeues a batch when the last one is all taken.
func (s *sender) fill() error {
	if len(s.pending) > 0 {
		return nil
	}
	n, err := s.f.cfg.Queue.Dequeue(s.items)
	for i := range n {
		s.frames[i] = s.items[i].Value
	}
	s.pending = s.frames[:n]
	return err
}

// transmit offers the pending frames to the sink, within the pace, and
// lets the sink work off its backlog.
func (s *sender) transmit() (int, error) {
	if len(s.pending) == 0 {
		if s.flush = s.flush || s.backlogReady(); !s.flush {
			return 0, nil
		}
		s.flush = false
		_, err := s.f.cfg.Sink.Transmit(nil)
		return 0, err
	}
	s.flush = false // Transmit works it off first
	s.pace.wait()
	n, err := s.f.cfg.Sink.Transmit(s.pending)
	var bytes int
	for _, fr := range s.pending[:n] {
		bytes += fr.Len
	}
	s.pace.sent(bytes)
	s.pending = s.pending[n:]
	s.inFlight += n
	if n > 0 {
		s.sent = append(s.sent, sentBatch{n: n, at: time.Now()})
	}
	s.f.stats.transmitted.Add(uint64(n))
	if err != nil {
		s.f.stats.txErrors.Add(1)
	}
	return n, err
}

// complete releases what the sink reports gone and wakes a producer
// waiting for frames.
func (s *sender) complete() (int, error) {
	if s.inFlight == 0 {
		return 0, nil
	}
	n, err := s.f.cfg.Sink.Complete()
	if n > 0 {
		// The frames are back: say so before the queue shows them gone,
		// so that a producer that finds the queue empty finds the signal
		// too (waitFreed).
		s.f.signalFreed()
		s.inFlight -= n
		s.f.stats.completed.Add(uint64(n))
		s.observe(n)
		if qerr := s.f.cfg.Queue.Complete(n); qerr != nil && err == nil {
			err = qerr
		}
	}
	return n, err
}

// observe takes n completed frames off the oldest batches and counts
// their latency.
func (s *sender) observe(n int) {
	now := time.Now()
	i := 0
	for ; n > 0 && i < len(s.sent); i++ {
		b := &s.sent[i]
		k := min(n, b.n)
		s.f.stats.completedAfter(k, now.Sub(b.at))
		if b.n -= k; b.n > 0 {
			break
		}
		n -= k
	}
	s.sent = s.sent[:copy(s.sent, s.sent[i:])]
}

// idle waits when no progress was made: for the queue when nothing is in
// flight, else for the sink. It reports true when ctx has ended: Run has
// drained what it could (frames still in flight, on a link that is down,
// say, are given up; Queue.Close releases their charges). A failed
// Sink.Wait ends the sink loop as a failed Transmit does: the sink will
// not report its frames gone.
func (s *sender) idle(ctx context.Context, progress int) (bool, error) {
	if ctx.Err() != nil {
		return true, nil
	}
	if progress > 0 {
		return false, nil
	}
	if len(s.pending) == 0 && s.inFlight == 0 {
		var backlog <-chan struct{} // nil: none
		if s.backlog != nil {
			backlog = s.backlog.Backlog()
		}
		ready := s.f.cfg.Queue.Ready()
		if s.f.inline {
			ready = s.f.kick // the producer sends what it queues, and says what it leaves
		}
		s.unlock() // for the producer
		defer s.lock()
		s.f.sending.wait() // for the producer
		defer s.f.sending.woke()
		select {
		case <-ready:
			return false, nil
		case <-backlog:
			s.flush = true
			return false, nil
		case <-ctx.Done():
			return true, nil
		}
	}
	return false, s.f.cfg.Sink.Wait(time.Millisecond)
}

// backlogReady reports whether the sink's backlog is ready.
func (s *sender) backlogReady() bool {
	if s.backlog == nil {
		return false
	}
	select {
	case <-s.backlog.Backlog():
		return true
	default:
		return false
	}
}

// pacer spaces transmissions to a rate in bits per second; zero rate
// means no pacing. It is a token bucket: time it overslept (timers are
// coarse on a loaded machine) is credit, up to paceCredit, so the average
// rate holds.
type pacer struct {
	rate int64
	next time.Time // when the bytes sent so far are paid for
}

const paceCredit = 20 * time.Millisecond

func (p *pacer) wait() {
	if p.rate <= 0 {
		return
	}
	if d := time.Until(p.next); d > 0 {
		time.Sleep(d)
	}
}

func (p *pacer) sent(bytes int) {
	if p.rate <= 0 || bytes == 0 {
		return
	}
	if floor := time.Now().Add(-paceCredit); p.next.Before(floor) {
		p.next = floor
	}
	p.next = p.next.Add(time.Duration(int64(bytes) * 8 * int64(time.Second) / p.rate))
}
