package xsk

// Waiting on an AF_XDP socket through the Go runtime's netpoller: the
// socket's fd is an os.File in non-blocking mode, so a goroutine waiting
// for received frames or for TX completions parks without holding a
// thread, wakes on the socket's own events (the kernel signals readable
// when it adds RX descriptors, writable when transmitted frames are
// released), and is woken when the socket is closed. The condition is
// checked under the socket's read lock, so closing, which takes the write
// lock before it unmaps the rings, never races a waiter.
//
// With busy polling (Config.BusyPoll), a wait first drives the queue's
// NAPI context itself: it makes one non-blocking recvfrom (sendto while
// TX frames wait on the ring, which also sends them in copy mode) at a
// time, in each of which the kernel runs one NAPI poll of up to the
// budget (sk_busy_loop with nonblock: one round, whatever SO_BUSY_POLL
// says), and checks the rings between them, for up to BusyPoll; then it
// sleeps in the netpoller as without. Each round holds the read lock
// across its syscall and checks for close and stop first, so closing
// still wakes every waiter within one round.

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// errStopped: receiving was stopped (Port.StopReceive).
var errStopped = errors.New("xsk: receiving stopped")

// poller waits for a socket's events.
type poller struct {
	file    *os.File
	rc      syscall.RawConn
	rxReady func(uintptr) bool // made once, so that waits do not allocate
	cqReady func(uintptr) bool
	busy    time.Duration // Config.BusyPoll: how long a wait polls before it sleeps; 0: off
}

// init hands x's fd to the runtime's netpoller.
func (p *poller) init(x *Socket) error {
	if err := unix.SetNonblock(x.fd, true); err != nil {
		return os.NewSyscallError("fcntl", err)
	}
	p.file = os.NewFile(uintptr(x.fd), "xsk")
	rc, err := p.file.SyscallConn()
	if err != nil {
		return fmt.Errorf("netpoller: %w", err)
	}
	p.rc, p.rxReady, p.cqReady = rc, x.rxReady, x.cqReady
	return nil
}

// close closes the fd (through its File once it has one), waking every
// waiter.
func (p *poller) close(fd int) error {
	if p.file == nil {
		return os.NewSyscallError("close", unix.Close(fd))
	}
	return p.file.Close()
}

// waitRX waits until received frames are on the RX ring. It returns
// ErrClosed once the socket is closed and errStopped once receiving was
// stopped.
func (x *Socket) waitRX() error {
	if x.poll.busy > 0 {
		x.busyPollRX()
	}
	if !x.enter() {
		return ErrClosed
	}
	p := x.poll
	x.mu.RUnlock()
	return x.waitError(p.rc.Read(p.rxReady))
}

// waitCompletions waits up to d until transmitted frames are on the
// completion ring, kicking the kernel for TX entries still waiting.
func (x *Socket) waitCompletions(d time.Duration) error {
	end := time.Now().Add(d)
	if x.poll.busy > 0 {
		x.busyPollTX(min(x.poll.busy, d))
	}
	if !x.enter() {
		return ErrClosed
	}
	p := x.poll
	x.mu.RUnlock()
	if err := p.file.SetWriteDeadline(end); err != nil {
		return x.waitError(err)
	}
	if err := x.waitError(p.rc.Write(p.cqReady)); !errors.Is(err, errStopped) {
		return err
	}
	return nil // the deadline: d has passed
}

// waitError turns a netpoller error into the socket's.
func (x *Socket) waitError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return errStopped
	case errors.Is(err, os.ErrClosed) || x.isClosed():
		// A waiter parked when the socket closes gets the poller's
		// "use of closed file", which is not os.ErrClosed.
		return ErrClosed
	}
	return fmt.Errorf("xsk: queue %d: %w", x.queueID, err)
}

// isClosed reports whether the socket is closed (waiting for a close in
// progress to finish).
func (x *Socket) isClosed() bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.closed
}

// rxReady reports, for the netpoller, whether the wait for received
// frames is over.
func (x *Socket) rxReady(uintptr) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.closed || x.rx.loadProducer() != x.rx.local
}

// cqReady reports, for the netpoller, whether the wait for completions is
// over; it kicks the kernel for TX entries it has not taken yet.
func (x *Socket) cqReady(uintptr) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.closed || x.comp.loadProducer() != x.comp.local {
		return true
	}
	if err := x.kickTX(); err != nil && x.txErr == nil {
		x.txErr = err
	}
	return false
}

// stopRX makes every wait for received frames return at once, now and
// later.
func (x *Socket) stopRX() {
	x.rxStopped.Store(true)
	if x.enter() {
		x.poll.file.SetReadDeadline(time.Unix(1, 0))
		x.mu.RUnlock()
	}
}

// busyPollRX polls until frames are on the RX ring, the socket is
// closed or receiving stopped, or the busy-poll time has passed.
func (x *Socket) busyPollRX() {
	var end time.Time
	for {
		if !x.enter() {
			return
		}
		done := x.rxStopped.Load() || x.rx.loadProducer() != x.rx.local
		if !done {
			x.busyPollOnce(unix.SYS_RECVFROM)
			done = x.rx.loadProducer() != x.rx.local
		}
		x.mu.RUnlock()
		switch now := time.Now(); {
		case done:
			return
		case end.IsZero():
			end = now.Add(x.poll.busy)
		case !now.Before(end):
			return
		}
	}
}

// busyPollTX polls for up to d until transmitted frames are on the
// completion ring or the socket is closed. A round is a sendto while TX
// entries wait (the NAPI poll, then in copy mode a batch sent; its
// errors are counted and kept for the next transmit as a kick's), else
// a recvfrom (the NAPI poll only: a sendto with nothing to send would
// count as TXRingEmpty).
func (x *Socket) busyPollTX(d time.Duration) {
	var end time.Time
	for {
		if !x.enter() {
			return
		}
		done := x.comp.loadProducer() != x.comp.local
		if !done {
			if x.tx.local == x.tx.loadConsumer() {
				x.busyPollOnce(unix.SYS_RECVFROM)
			} else if err := x.kickResult("sendto", x.busyPollOnce(unix.SYS_SENDTO)); err != nil && x.txErr == nil {
				x.txErr = err
			}
			done = x.comp.loadProducer() != x.comp.local
		}
		x.mu.RUnlock()
		switch now := time.Now(); {
		case done:
			return
		case end.IsZero():
			end = now.Add(d)
		case !now.Before(end):
			return
		}
	}
}

// busyPollOnce makes one non-blocking recvfrom or sendto (trap) on the
// socket, which runs its NAPI poll; the caller holds the read lock.
func (x *Socket) busyPollOnce(trap uintptr) unix.Errno {
	x.st.busyPolls.Add(1)
	_, _, e := unix.Syscall6(trap, uintptr(x.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return e
}

// Busy-poll socket options (variables so that a test can make the kernel
// refuse one).
var (
	soBusyPoll       = unix.SO_BUSY_POLL
	soPreferBusyPoll = unix.SO_PREFER_BUSY_POLL
	soBusyPollBudget = unix.SO_BUSY_POLL_BUDGET
)

// setBusyPoll turns preferred busy polling on for fd: busy polling for
// d (SO_BUSY_POLL, in µs: with non-blocking calls, only on or off),
// preferred over the interrupt-driven NAPI (SO_PREFER_BUSY_POLL: after
// a busy poll, with napi_defer_hard_irqs and gro_flush_timeout set, the
// kernel arms the gro_flush_timeout timer instead of rescheduling the
// NAPI), with up to budget packets per poll (SO_BUSY_POLL_BUDGET).
// Raising the last two needs CAP_NET_ADMIN.
func setBusyPoll(fd int, d time.Duration, budget int) error {
	for _, o := range [...]struct {
		name string
		opt  int
		val  int
	}{
		{"SO_BUSY_POLL", soBusyPoll, int(d / time.Microsecond)},
		{"SO_PREFER_BUSY_POLL", soPreferBusyPoll, 1},
		{"SO_BUSY_POLL_BUDGET", soBusyPollBudget, budget},
	} {
		err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, o.opt, o.val)
		switch {
		case err == nil:
			continue
		case errors.Is(err, unix.ENOPROTOOPT):
			err = fmt.Errorf("kernel without CONFIG_NET_RX_BUSY_POLL or older than Linux 5.11: %w", os.NewSyscallError("setsockopt", err))
		case errors.Is(err, unix.EPERM):
			err = fmt.Errorf("needs CAP_NET_ADMIN: %w", os.NewSyscallError("setsockopt", err))
		default:
			err = os.NewSyscallError("setsockopt", err)
		}
		return fmt.Errorf("busy poll: %s=%d: %w: %w", o.name, o.val, ErrNoBusyPoll, err)
	}
	return nil
}

// BusyPoll returns the socket's busy-poll time (Config.BusyPoll; 0: off).
func (x *Socket) BusyPoll() time.Duration { return x.poll.busy }

// NAPIID returns the ID of the NAPI context the kernel busy polls for the
// socket (SO_INCOMING_NAPI_ID): 0 until a packet reached the socket from
// one. Only a driver's native XDP path has one; generic XDP has none, nor
// (Linux 6.18) a veth's native XDP: there busy polling polls nothing.
func (x *Socket) NAPIID() (uint32, error) {
	if !x.enter() {
		return 0, ErrClosed
	}
	defer x.mu.RUnlock()
	id, err := unix.GetsockoptInt(x.fd, unix.SOL_SOCKET, unix.SO_INCOMING_NAPI_ID)
	if err != nil {
		return 0, fmt.Errorf("xsk: queue %d: %w", x.queueID, os.NewSyscallError("getsockopt", err))
	}
	return uint32(id), nil
}

// setTxBudget asks the kernel to send up to n frames per kick in copy mode
// (XDP_MAX_TX_SKB_BUDGET, Linux 6.17; the kernel allows 32 up to the TX
// ring's size) and returns the budget in force: 32, the kernel's fixed
// batch, where the option is missing.
func setTxBudget(fd, n int) int {
	const defaultBudget = 32
	if n <= defaultBudget || unix.SetsockoptInt(fd, unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET, n) != nil {
		return defaultBudget
	}
	return n
}

// TxBudget returns how many frames the kernel sends per kick in copy
// mode: what XDP_MAX_TX_SKB_BUDGET was set to, or the kernel's fixed 32.
func (x *Socket) TxBudget() int { return x.txBudget }
