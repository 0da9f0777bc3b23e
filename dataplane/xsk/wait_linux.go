package xsk

// Waiting on an AF_XDP socket through the Go runtime's netpoller: the
// socket's fd is an os.File in non-blocking mode, so a goroutine waiting
// for received frames or for TX completions parks without holding a
// thread, wakes on the socket's own events (the kernel signals readable
// when it adds RX descriptors, writable when transmitted frames are
// released), and is woken when the socket is closed. The condition is
// checked under the socket's read lock, so closing, which takes the write
// lock before it unmaps the rings, never races a waiter.

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
	if !x.enter() {
		return ErrClosed
	}
	p := x.poll
	x.mu.RUnlock()
	if err := p.file.SetWriteDeadline(time.Now().Add(d)); err != nil {
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
	case errors.Is(err, os.ErrClosed):
		return ErrClosed
	}
	return fmt.Errorf("xsk: queue %d: %w", x.queueID, err)
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
	if x.enter() {
		x.poll.file.SetReadDeadline(time.Unix(1, 0))
		x.mu.RUnlock()
	}
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
