package xsk

// Waiting on an AF_XDP socket, the way a NIC's NAPI does it: while
// traffic flows, a wait naps a few microseconds at a time and takes
// whatever arrived meanwhile as one batch; only a socket that stays idle
// blocks, in poll(2) on its fd and an eventfd, which costs nothing until
// a frame arrives or the socket is stopped or closed.
//
// Why not the Go runtime's netpoller (which waited here before): a
// socket registered with epoll has the netpoller call its poll handler
// on every wakeup, once per received frame and once per transmitted
// frame freed, and on Linux 6.18 the poll handler of a copy-mode socket
// transmits from the TX ring as well (xsk_poll runs the generic xmit
// whenever the socket has a TX ring; cached_need_wakeup is set for every
// socket), racing our own sendto for the socket's TX mutex. Measured with
// udpfwd under one TCP stream on the reference veth (3 interleaved runs),
// the netpoller cost 0.20-0.24 cores per Gbit/s backward against 0.10
// for napping, and 0.30-0.32 forward against 0.25-0.29.
//
// The conditions are checked under the socket's read lock, and a blocked
// wait holds it: closing first signals the eventfd, which ends every
// blocked wait, and then takes the write lock before it unmaps the
// rings, so it never races a waiter. Waits for TX completions never
// block: they run only while frames are in flight, and nap until the
// kernel completes them or the caller's deadline passes.
//
// With busy polling (Config.BusyPoll), a wait first drives the queue's
// NAPI context itself: it makes one non-blocking recvfrom (sendto while
// TX frames wait on the ring, which also sends them in copy mode) at a
// time, in each of which the kernel runs one NAPI poll of up to the
// budget (sk_busy_loop with nonblock: one round, whatever SO_BUSY_POLL
// says), and checks the rings between them, for up to BusyPoll; then it
// waits as without. Each round holds the read lock across its syscall
// and checks for close and stop first, so closing still ends every
// waiter within one round.

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// errStopped: receiving was stopped (Port.StopReceive).
var errStopped = errors.New("xsk: receiving stopped")

// How waits nap: up to rxNaps naps of nap for received frames before a
// wait blocks, naps of nap for TX completions.
const (
	nap    = 20 * time.Microsecond
	rxNaps = 3
)

// poller holds what a socket's waits need besides its rings.
type poller struct {
	wake   int            // eventfd, signalled to end blocked waits for good
	ending atomic.Bool    // wake was signalled: the socket is stopping or closing
	rxFds  [2]unix.PollFd // a blocked RX wait's poll set: the socket and wake
	busy   time.Duration  // Config.BusyPoll: how long a wait polls before it naps; 0: off
}

// init opens the eventfd of x's waits.
func (p *poller) init(x *Socket) error {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return os.NewSyscallError("eventfd", err)
	}
	p.wake = fd
	p.rxFds = [2]unix.PollFd{{Fd: int32(x.fd), Events: unix.POLLIN}, {Fd: int32(fd), Events: unix.POLLIN}}
	return nil
}

// signal ends every blocked wait, now and later: the eventfd stays
// readable.
func (p *poller) signal() {
	if p.wake < 0 || p.ending.Swap(true) {
		return
	}
	one := [8]byte{1}
	unix.Write(p.wake, one[:])
}

// close closes the socket's fd and the eventfd; the caller has signalled
// and holds the write lock.
func (p *poller) close(fd int) error {
	err := os.NewSyscallError("close", unix.Close(fd))
	if p.wake >= 0 {
		err = errors.Join(err, os.NewSyscallError("close", unix.Close(p.wake)))
		p.wake = -1
	}
	return err
}

// waitRX waits until received frames are on the RX ring: it naps while
// traffic flows and blocks once the socket stays idle. It returns
// ErrClosed once the socket is closed and errStopped once receiving was
// stopped.
func (x *Socket) waitRX() error {
	if x.poll.busy > 0 {
		x.busyPollRX()
	}
	for range rxNaps {
		if done, err := x.rxDone(); done {
			return err
		}
		time.Sleep(nap)
	}
	return x.blockRX()
}

// rxDone reports whether a wait for received frames is over, and with
// what.
func (x *Socket) rxDone() (bool, error) {
	if !x.enter() {
		return true, ErrClosed
	}
	defer x.mu.RUnlock()
	return x.rxOver()
}

// rxOver is rxDone with the read lock held.
func (x *Socket) rxOver() (bool, error) {
	switch {
	case x.rx.loadProducer() != x.rx.local:
		return true, nil
	case x.rxStopped.Load():
		return true, errStopped
	case x.poll.ending.Load():
		return true, ErrClosed
	}
	return false, nil
}

// blockRX blocks in poll(2) until frames arrive or the eventfd says the
// socket is stopping or closing.
func (x *Socket) blockRX() error {
	if !x.enter() {
		return ErrClosed
	}
	defer x.mu.RUnlock()
	for {
		if done, err := x.rxOver(); done {
			return err
		}
		if _, err := unix.Poll(x.poll.rxFds[:], -1); err != nil && err != unix.EINTR {
			return fmt.Errorf("xsk: queue %d: %w", x.queueID, os.NewSyscallError("poll", err))
		}
	}
}

// waitCompletions waits up to d until transmitted frames are on the
// completion ring, kicking the kernel for TX entries still waiting. It
// naps; it returns ErrClosed once the socket is closed.
func (x *Socket) waitCompletions(d time.Duration) error {
	end := time.Now().Add(d)
	if x.poll.busy > 0 {
		x.busyPollTX(min(x.poll.busy, d))
	}
	for {
		if done, err := x.cqDone(); done {
			return err
		}
		left := time.Until(end)
		if left <= 0 {
			return nil
		}
		time.Sleep(min(nap, left))
	}
}

// cqDone reports whether a wait for completions is over; it kicks the
// kernel for TX entries it has not taken yet.
func (x *Socket) cqDone() (bool, error) {
	if !x.enter() {
		return true, ErrClosed
	}
	defer x.mu.RUnlock()
	if x.comp.loadProducer() != x.comp.local {
		return true, nil
	}
	if err := x.kickTX(); err != nil && x.txErr == nil {
		x.txErr = err
	}
	return false, nil
}

// stopRX makes every wait for received frames return at once, now and
// later.
func (x *Socket) stopRX() {
	x.rxStopped.Store(true)
	x.poll.signal()
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
