package main

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/dataplane"
	"github.com/gsoplane/gsoplane/internal/testing/syncbuf"
)

// TestWatchdogWedged serves a udpfwd daemon in this process, on each NIC
// port, with a hook in its forwarder that blocks on demand: WATCHDOG=1
// comes while the dataplane idles; once a packet wedges the producer in
// the hook, it stops coming (the wedge is logged at each interval), and
// it comes again once the hook lets go.
func TestWatchdogWedged(t *testing.T) {
	requireRoot(t)
	for _, port := range []string{"xdp", "packet"} {
		t.Run(port, func(t *testing.T) {
			a, _ := newLab(t)
			env := map[string]string{"UDPFWD_ADDR": strings.TrimPrefix(labEnv[0], "UDPFWD_ADDR=")}
			cfg, err := parseConfig(append([]string{"-port", port, "-metrics="}, labArgs...), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
			if err != nil {
				t.Fatal(err)
			}
			var logs syncbuf.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			var wedge atomic.Bool
			entered, release := make(chan struct{}, 1), make(chan struct{})
			dc := gatewayConfig(cfg)
			dc.Log = log
			dc.Hook = func([]byte) bool {
				if wedge.Load() {
					entered <- struct{}{}
					<-release
				}
				return true
			}
			var g *gateway
			a.Do(t, func() {
				dg, err := dataplane.OpenGateway(dc)
				if err != nil {
					t.Fatal(err)
				}
				g = &gateway{Gateway: dg, nic: dg.Ifindex(), log: log}
				if err := g.configureTUN(cfg); err != nil {
					g.close()
					t.Fatal(err)
				}
			})
			sock := filepath.Join(t.TempDir(), "notify")
			msgs := readNotify(t, sock)
			notify, err := newNotifier(func(k string) string {
				return map[string]string{"NOTIFY_SOCKET": sock, "WATCHDOG_USEC": "100000"}[k]
			}, log)
			if err != nil {
				t.Fatal(err)
			}
			defer notify.close()
			d := &daemon{cfg: cfg, log: log, gw: g, notify: notify}
			ctx, cancel := context.WithCancel(context.Background())
			code := make(chan int, 1)
			go func() { code <- d.serve(ctx, make(chan os.Signal)) }()
			defer func() {
				select {
				case <-release:
				default:
					close(release)
				}
				cancel()
				if c := <-code; c != 0 {
					t.Errorf("serve: exit %d:\n%s", c, logs.String())
				}
			}()

			expect(t, msgs, "READY=1", &logs)
			expect(t, msgs, "WATCHDOG=1", &logs)
			wedge.Store(true)
			c, err := dial(a, "udp", net.JoinHostPort(srv4, "9"))
			if err != nil {
				t.Fatal(err)
			}
			c.Write([]byte("wedge"))
			c.Close()
			select {
			case <-entered:
			case <-time.After(15 * time.Second):
				t.Fatalf("the packet did not reach the hook:\n%s", logs.String())
			}
			// A loop kept off the CPU for an interval on a busy machine is
			// logged as wedged too, so the wedge's own logs are counted
			// from here: the first comes at the first interval in which
			// the producer did not come round, and every pet sent since it
			// entered the hook came before that. Those pets may still be
			// on their way to msgs: a marker sent then comes after them.
			const wedged = "a dataplane loop is wedged"
			before := strings.Count(logs.String(), wedged)
			if !logged(&logs, wedged, before+1) {
				t.Fatalf("%d WATCHDOG=1 in 15 s with the producer wedged, and no wedge logged:\n%s", drain(msgs), logs.String())
			}
			mark(t, sock)
			expect(t, msgs, "MARK=1", &logs)
			if !logged(&logs, wedged, before+4) {
				t.Fatalf("the wedge not logged at each interval:\n%s", logs.String())
			}
			if n := drain(msgs); n > 0 {
				t.Errorf("%d WATCHDOG=1 while the producer was wedged:\n%s", n, logs.String())
			}
			wedge.Store(false)
			close(release)
			expect(t, msgs, "WATCHDOG=1", &logs)
		})
	}
}

// readNotify listens on a notify socket at path and passes on what comes.
func readNotify(t *testing.T, path string) <-chan string {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	msgs := make(chan string, 1024)
	go func() {
		buf := make([]byte, 512)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	return msgs
}

// mark sends the notify socket at path a marker, MARK=1, which readNotify
// passes on after everything sent before it.
func mark(t *testing.T, path string) {
	t.Helper()
	c, err := net.Dial("unixgram", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("MARK=1")); err != nil {
		t.Fatal(err)
	}
}

// expect waits up to 15 s for a notification containing want.
func expect(t *testing.T, msgs <-chan string, want string, logs *syncbuf.Buffer) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case m := <-msgs:
			if strings.Contains(m, want) {
				return
			}
		case <-deadline:
			t.Fatalf("no %s:\n%s", want, logs.String())
		}
	}
}

// drain returns how many WATCHDOG=1 came so far, taking every
// notification.
func drain(msgs <-chan string) int {
	n := 0
	for {
		select {
		case m := <-msgs:
			if strings.Contains(m, "WATCHDOG=1") {
				n++
			}
		default:
			return n
		}
	}
}

// logged waits up to 15 s for s to be logged n times and reports
// whether it was.
func logged(logs *syncbuf.Buffer, s string, n int) bool {
	for deadline := time.Now().Add(15 * time.Second); strings.Count(logs.String(), s) < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}
