package txqueue

// A waiter is one parked caller: a producer blocked in Budget.Admit or
// Queue.Enqueue, or the event loop behind Budget.Ready. The waker removes it
// from its list and sends one token on ch, both under the list owner's
// mutex, so a waiter that is no longer listed always has its token in ch.
type waiter struct {
	ch     chan struct{} // capacity 1
	queued bool          // in a waitList

	flow uint64 // Budget: the flow asking for admission

	packets int   // Queue: free slots needed before waking
	bytes   int64 // Queue: free bytes needed before waking
}

// spares recycles waiters, so that blocking allocates nothing in steady
// state. Its owner guards it with the mutex of its waitList.
type spares []*waiter

func (s *spares) get() *waiter {
	n := len(*s)
	if n == 0 {
		return &waiter{ch: make(chan struct{}, 1)}
	}
	w := (*s)[n-1]
	*s = (*s)[:n-1]
	return w
}

func (s *spares) put(w *waiter) { *s = append(*s, w) }

// waitList is a set of parked waiters. Its owner guards it with a mutex.
type waitList []*waiter

func (l *waitList) add(w *waiter) {
	if !w.queued {
		w.queued = true
		*l = append(*l, w)
	}
}

func (l *waitList) remove(w *waiter) {
	if !w.queued {
		return
	}
	w.queued = false
	s := *l
	for i, x := range s {
		if x == w {
			last := len(s) - 1
			s[i] = s[last]
			s[last] = nil
			*l = s[:last]
			return
		}
	}
}

// cancel takes back a waiter that gave up (its context ended): it is either
// still listed, or it was woken and its token is waiting in ch.
func (l *waitList) cancel(w *waiter) {
	if w.queued {
		l.remove(w)
		return
	}
	<-w.ch
}

// wakeIf wakes and removes every waiter for which ready returns true.
func (l *waitList) wakeIf(ready func(*waiter) bool) {
	s := *l
	kept := s[:0]
	for _, w := range s {
		if !ready(w) {
			kept = append(kept, w)
			continue
		}
		w.queued = false
		select {
		case w.ch <- struct{}{}:
		default: // Budget.Ready's waiter may still hold an unread token
		}
	}
	clear(s[len(kept):])
	*l = kept
}
