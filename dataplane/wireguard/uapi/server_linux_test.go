package uapi

import (
	"bufio"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// serve serves h at path until the test ends.
func serve(t *testing.T, path string, h *Handler) *Server {
	t.Helper()
	s, err := Listen(path, h)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; err != nil && err != ErrSocketRemoved {
			t.Errorf("serve: %v", err)
		}
	})
	return s
}

// ask sends ops on a new connection to path and returns the first
// answer.
func ask(t *testing.T, path, ops string) string {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, ops); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	var answer strings.Builder
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("after %q: %v", answer.String(), err)
		}
		answer.WriteString(line)
		if line == "\n" {
			return answer.String()
		}
	}
}

// TestServerSocket: the socket's directory is made 0755 and the socket
// 0600, the caller's; a socket in use is refused, a stale one replaced;
// Close removes the socket file, unless another took its place.
func TestServerSocket(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run", "wireguard")
	path := filepath.Join(dir, "wg0.sock")
	h := NewHandler(newRouter(t), Limits{})
	s := serve(t, path, h)
	if got := ask(t, path, "set=1\nfwmark=3\n\nget=1\n\n"); got != "errno=0\n\n" {
		t.Fatalf("set: %q", got)
	}
	if got := ask(t, path, "get=1\n\n"); got != "fwmark=3\nerrno=0\n\n" {
		t.Fatalf("get: %q", got)
	}
	for p, want := range map[string]os.FileMode{dir: os.ModeDir | 0o755, path: os.ModeSocket | 0o600} {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want || fi.Sys().(*syscall.Stat_t).Uid != uint32(os.Geteuid()) {
			t.Errorf("%s: %v, uid %d", p, fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("left in %s: %v", dir, entries)
	}
	if _, err := Listen(path, h); err == nil {
		t.Fatal("a socket in use taken over")
	}
	s.Close()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Fatalf("socket file left: %v", err)
	}

	// A stale socket file (its process gone) is replaced.
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	s = serve(t, path, h)
	if got := ask(t, path, "get=1\n\n"); got != "fwmark=3\nerrno=0\n\n" {
		t.Fatalf("get after a stale socket: %q", got)
	}
	// Its file removed and another server in its place: Close leaves
	// the other's.
	os.Remove(path)
	serve(t, path, h)
	s.Close()
	if got := ask(t, path, "get=1\n\n"); got != "fwmark=3\nerrno=0\n\n" {
		t.Fatalf("get from the other server: %q", got)
	}
}

// TestServerSocketRemoved: Serve ends when its socket file is removed.
func TestServerSocketRemoved(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wg0.sock")
	s, err := Listen(path, NewHandler(newRouter(t), Limits{}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	ask(t, path, "get=1\n\n")
	os.Remove(path)
	select {
	case err := <-done:
		if err != ErrSocketRemoved {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("still serving 30 s after its socket file was removed")
	}
}

// TestServerLimits: a client that never finishes is cut off after
// Limits.Timeout, another waits for its turn (Limits.Conns), and Close
// ends what is left.
func TestServerLimits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wg0.sock")
	s := serve(t, path, NewHandler(newRouter(t), Limits{Timeout: 500 * time.Millisecond, Conns: 1}))
	slow, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	io.WriteString(slow, "set=1\nfwmark=1\n") // and nothing more
	if got := ask(t, path, "get=1\n\n"); got != "errno=0\n\n" {
		t.Fatalf("get after the slow client: %q", got)
	}
	slow.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := slow.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the slow client: %d bytes, %v", n, err)
	}

	idle, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	io.WriteString(idle, "get=1\n\n")
	idle.SetReadDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(idle)
	if line, err := r.ReadString('\n'); line != "errno=0\n" || err != nil {
		t.Fatalf("idle client's get: %q, %v", line, err)
	}
	r.ReadString('\n')
	s.Close()
	if n, err := r.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after Close: %d bytes, %v", n, err)
	}
}
