package main

import (
	"bufio"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestWatchSignals checks that the first signal stops and the second
// exits at once with 128+N.
func TestWatchSignals(t *testing.T) {
	sigs, done := make(chan os.Signal, 2), make(chan struct{})
	var stops []os.Signal
	now := make(chan os.Signal, 1)
	sigs <- syscall.SIGTERM
	sigs <- syscall.SIGINT
	watchSignals(sigs, done, func(s os.Signal) { stops = append(stops, s) }, func(s os.Signal) { now <- s })
	if len(stops) != 1 || stops[0] != syscall.SIGTERM {
		t.Errorf("stop called for %v, want once for SIGTERM", stops)
	}
	if s := <-now; signalExitCode(s) != 130 {
		t.Errorf("second signal %v: exit %d, want 130", s, signalExitCode(s))
	}

	close(done) // a clean stop: no signal, no call
	watchSignals(make(chan os.Signal), done, func(os.Signal) { t.Error("stop called") }, func(os.Signal) { t.Error("now called") })
}

// TestHangupAndClosedStderr runs udpfwd -v with its standard error on a
// pipe whose reader goes away after the first line: udpfwd goes on
// (SIGPIPE ignored; /healthz still answers) and SIGHUP then stops it
// cleanly, exit 0, nothing left behind.
func TestHangupAndClosedStderr(t *testing.T) {
	requireRoot(t)
	a, _ := newLab(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(udpfwdBinary(t), append([]string{"-v", "-drain-timeout", "2s"}, labArgs...)...)
	cmd.Env = cleanEnv(labEnv...)
	cmd.Stdout, cmd.Stderr = w, w
	if err := a.Start(cmd); err != nil {
		t.Fatal(err)
	}
	w.Close()
	done := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })

	if _, err := bufio.NewReader(r).ReadString('\n'); err != nil {
		t.Fatalf("no first log line: %v", err)
	}
	r.Close() // the reader goes away: every later write gets EPIPE
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := get(a, "127.0.0.1:9464", "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("udpfwd not healthy: %v", err)
		}
		select {
		case <-done:
			t.Fatalf("udpfwd ended with its stderr closed: %v", waitErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
	// -v writes a stats line every second: two of them into the broken pipe.
	select {
	case <-done:
		t.Fatalf("udpfwd ended with its stderr closed: %v", waitErr)
	case <-time.After(2500 * time.Millisecond):
	}
	cmd.Process.Signal(syscall.SIGHUP)
	select {
	case <-done:
		if waitErr != nil {
			t.Fatalf("after SIGHUP: %v, want exit 0", waitErr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("udpfwd still running 10s after SIGHUP")
	}
	if left := leftovers(t, a); left != "" {
		t.Errorf("left behind: %s", left)
	}
}

// TestSystemdNotify runs udpfwd with a NOTIFY_SOCKET of the test's own
// and a watchdog: READY=1 once it forwards, WATCHDOG=1 at half the
// interval, STOPPING=1 on SIGTERM.
func TestSystemdNotify(t *testing.T) {
	requireRoot(t)
	a, _ := newLab(t)
	sock := filepath.Join(t.TempDir(), "notify")
	msgs := readNotify(t, sock)
	p := startUdpfwd(t, a, append([]string{"NOTIFY_SOCKET=" + sock, "WATCHDOG_USEC=400000"}, labEnv...), labArgs...)
	expect(t, msgs, "READY=1", &p.out)
	if resp, err := get(a, "127.0.0.1:9464", "/healthz"); err != nil {
		t.Errorf("READY=1 before the metrics server answers: %v", err)
	} else {
		resp.Body.Close()
	}
	expect(t, msgs, "WATCHDOG=1", &p.out)
	expect(t, msgs, "WATCHDOG=1", &p.out)
	p.cmd.Process.Signal(syscall.SIGTERM)
	expect(t, msgs, "STOPPING=1", &p.out)
	if code := p.wait(5 * time.Second); code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.out.String())
	}
}

// TestNotifyUnread runs udpfwd with a NOTIFY_SOCKET whose reader never
// reads, its queue full before udpfwd starts: the notifications are
// dropped and logged, never waited for, so udpfwd starts, answers
// /healthz and stops on SIGTERM as it does without the socket.
func TestNotifyUnread(t *testing.T) {
	requireRoot(t)
	a, _ := newLab(t)
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fillUnixgram(t, sock)
	p := startUdpfwd(t, a, append([]string{"NOTIFY_SOCKET=" + sock, "WATCHDOG_USEC=400000"}, labEnv...),
		append([]string{"-drain-timeout", "2s"}, labArgs...)...)
	waitReady(t, p, a)
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(10 * time.Second); code != 0 {
		t.Fatalf("after SIGTERM with the notify socket full: exit %d, want 0 within 10 s:\n%s", code, p.out.String())
	}
	for _, state := range []string{"READY=1", "STOPPING=1"} {
		if !strings.Contains(p.out.String(), `msg="systemd notification dropped" state="`+state) {
			t.Errorf("%s not logged as dropped:\n%s", state, p.out.String())
		}
	}
}

// fillUnixgram sends datagrams to the socket at path until its queue
// takes no more.
func fillUnixgram(t *testing.T, path string) {
	t.Helper()
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for n := 0; ; n++ {
		c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := c.Write([]byte("STATUS=filler")); errors.Is(err, os.ErrDeadlineExceeded) && n > 0 {
			return
		} else if err != nil {
			t.Fatalf("filling the notify socket after %d datagrams: %v", n, err)
		}
	}
}
