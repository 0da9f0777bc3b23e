package uapi

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// A Server serves a Handler on a unix stream socket.
type Server struct {
	h    *Handler
	l    *net.UnixListener
	path string
	file os.FileInfo // the socket file, removed on Close if still there

	slots chan struct{} // one per connection served
	done  chan struct{} // closed by Close
	once  sync.Once
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}

	removed atomic.Bool // the socket file was
}

// Listen makes the socket at path for h's clients: its directory is
// made (0755) if missing, the socket is root's if the caller is root,
// 0600, and appears whole (bound and set up elsewhere in the directory,
// then renamed into place). A socket file there that nobody listens on
// (left by a process that is gone) is replaced; one that answers is an
// error.
func Listen(path string, h *Handler) (*Server, error) {
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err = os.MkdirAll(dir, 0o755); err == nil {
			err = os.Chmod(dir, 0o755) // whatever the umask
		}
		if err != nil {
			return nil, fmt.Errorf("uapi: %w", err)
		}
	}
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return nil, fmt.Errorf("uapi: %s is in use", path)
	}
	tmp, err := os.MkdirTemp(dir, ".uapi-")
	if err != nil {
		return nil, fmt.Errorf("uapi: %w", err)
	}
	defer os.RemoveAll(tmp)
	bound := filepath.Join(tmp, "s")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: bound, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("uapi: %w", err)
	}
	l.SetUnlinkOnClose(false)
	var fi os.FileInfo
	if err = os.Chmod(bound, 0o600); err == nil {
		if err = os.Rename(bound, path); err == nil {
			fi, err = os.Lstat(path)
		}
	}
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("uapi: %w", err)
	}
	s := &Server{
		h: h, l: l, path: path, file: fi,
		slots: make(chan struct{}, h.lim.Conns),
		done:  make(chan struct{}),
		conns: make(map[net.Conn]struct{}),
	}
	return s, nil
}

// Serve answers clients until Close, and then returns nil, or until
// the socket file is removed or replaced (checked every second), and
// then closes the server and returns ErrSocketRemoved. It serves up to
// Limits.Conns clients at once (the others wait to be accepted). A
// client has Limits.Timeout from its connection to send its operations,
// and again to read each answer (the time the Device takes is not
// counted).
func (s *Server) Serve() error {
	go s.watch()
	for {
		select {
		case s.slots <- struct{}{}:
		case <-s.done:
			return s.stopped()
		}
		c, err := s.l.Accept()
		if err != nil {
			<-s.slots
			select {
			case <-s.done:
				return s.stopped()
			default:
			}
			return fmt.Errorf("uapi: %w", err)
		}
		if !s.track(c, true) {
			c.Close()
			return s.stopped()
		}
		s.wg.Go(func() {
			defer func() { <-s.slots }()
			defer s.track(c, false)
			c.SetReadDeadline(time.Now().Add(s.h.lim.Timeout))
			s.h.Handle(deadlined{c, s.h.lim.Timeout})
		})
	}
}

// stopped is what Serve returns once the server is closed.
func (s *Server) stopped() error {
	if s.removed.Load() {
		return ErrSocketRemoved
	}
	return nil
}

// watch closes the server when its socket file is removed or replaced.
func (s *Server) watch() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		if fi, err := os.Lstat(s.path); err != nil || !os.SameFile(fi, s.file) {
			s.removed.Store(true)
			s.Close()
			return
		}
	}
}

// deadlined is a connection whose every write has Timeout to finish.
type deadlined struct {
	net.Conn
	timeout time.Duration
}

func (c deadlined) Write(b []byte) (int, error) {
	c.SetWriteDeadline(time.Now().Add(c.timeout))
	return c.Conn.Write(b)
}

// track adds c to the connections served (false: the server is closed)
// or removes and closes it.
func (s *Server) track(c net.Conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !add {
		delete(s.conns, c)
		c.Close()
		return true
	}
	select {
	case <-s.done:
		return false
	default:
	}
	s.conns[c] = struct{}{}
	return true
}

// Close stops the server: it closes the socket and the connections,
// waits for their operations to end, and removes the socket file if it
// is still the one Listen made.
func (s *Server) Close() error {
	var err error
	s.once.Do(func() {
		s.mu.Lock()
		close(s.done)
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		err = s.l.Close()
		s.wg.Wait()
		if fi, lerr := os.Lstat(s.path); lerr == nil && os.SameFile(fi, s.file) {
			err = errors.Join(err, os.Remove(s.path))
		}
	})
	return err
}
