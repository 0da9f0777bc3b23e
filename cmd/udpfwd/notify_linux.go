package main

import (
	"cmp"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/dataplane/pipeline"
)

// notifier speaks systemd's service notification protocol: one datagram
// per state change to the socket in $NOTIFY_SOCKET (a path, or an
// abstract name after '@'). Without the variable it does nothing, so
// udpfwd runs the same outside systemd. A notification never waits: one
// the socket has no room for (its reader is stuck or gone) is dropped
// and logged, so that no state change, the stop least of all, hangs on
// it.
type notifier struct {
	conn     *net.UnixConn
	watchdog time.Duration // how often to send WATCHDOG=1; 0: never
	log      *slog.Logger
}

// newNotifier connects to $NOTIFY_SOCKET, if set, and reads the watchdog
// interval systemd asks for ($WATCHDOG_USEC, for this process when
// $WATCHDOG_PID names it): half of it, as systemd recommends.
func newNotifier(getenv func(string) string, log *slog.Logger) (*notifier, error) {
	n := &notifier{log: log}
	name := getenv("NOTIFY_SOCKET")
	if name == "" {
		return n, nil
	}
	if name[0] == '@' {
		name = "\x00" + name[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return nil, fmt.Errorf("NOTIFY_SOCKET %s: %w", getenv("NOTIFY_SOCKET"), err)
	}
	n.conn = conn
	if pid := getenv("WATCHDOG_PID"); pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return n, nil
	}
	if usec, err := strconv.ParseInt(getenv("WATCHDOG_USEC"), 10, 64); err == nil && usec > 0 {
		n.watchdog = time.Duration(usec) * time.Microsecond / 2
	}
	return n, nil
}

// send sends one notification, such as "READY=1" or "STOPPING=1", if
// the socket takes it at once; else it logs the drop.
func (n *notifier) send(state string) {
	if n == nil || n.conn == nil {
		return
	}
	rc, err := n.conn.SyscallConn()
	if err == nil {
		cerr := rc.Write(func(fd uintptr) bool {
			_, err = unix.Write(int(fd), []byte(state))
			return true // done, whatever came of it: never wait for room
		})
		err = cmp.Or(cerr, err)
	}
	if err != nil {
		n.log.Warn("systemd notification dropped", "state", state, "err", err)
	}
}

// pet sends WATCHDOG=1 every interval while alive reports that the
// dataplane moves (a wedged one stops the pings, and systemd restarts
// udpfwd), until done is closed.
func (n *notifier) pet(done <-chan struct{}, alive func() bool) {
	if n == nil || n.conn == nil || n.watchdog == 0 {
		return
	}
	t := time.NewTicker(n.watchdog)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			if alive() {
				n.send("WATCHDOG=1")
			} else {
				n.log.Error("a dataplane loop is wedged (it neither came round nor waits for work): the watchdog is not petted")
			}
		}
	}
}

// moving returns a function that reports, at each call, whether every
// loop of the dataplane came round or waited for work since the last
// call (the first: since moving), from the loops' pulses.
func moving(pulses func() []pipeline.Pulse) func() bool {
	last := pulses()
	return func() bool {
		now := pulses()
		ok := pipeline.Alive(last, now)
		last = now
		return ok
	}
}

func (n *notifier) close() error {
	if n == nil || n.conn == nil {
		return nil
	}
	return n.conn.Close()
}
