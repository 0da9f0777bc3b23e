package httpserve

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

func testServer(health func() error) *Server {
	return New(NewRegistry("test", Build{Version: "v0"}), Config{Name: "test", Version: "v0 <x>", Health: health})
}

// serveLoopback serves a healthy testServer on a loopback port until the
// test ends and returns it and its address.
func serveLoopback(t *testing.T) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := testServer(func() error { return nil })
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return srv, ln.Addr().String()
}

// conns is how many connections srv closed past MaxConns.
func conns(srv *Server) uint64 {
	n, _ := srv.Refused()
	return n
}

func serveGet(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec
}

// TestHealthz: /healthz answers 200 ok, or 503 and the reason; / links
// /metrics, its title escaped; /metrics has NAME_build_info and
// NAME_http_refused_total; other paths are 404.
func TestHealthz(t *testing.T) {
	var down atomic.Bool
	srv := testServer(func() error {
		if down.Load() {
			return errors.New("the NIC is down")
		}
		return nil
	})
	if rec := serveGet(t, srv.Handler(), "/healthz"); rec.Code != 200 || rec.Body.String() != "ok\n" {
		t.Errorf("healthy: %d %q, want 200 ok", rec.Code, rec.Body)
	}
	down.Store(true)
	if rec := serveGet(t, srv.Handler(), "/healthz"); rec.Code != 503 || !strings.Contains(rec.Body.String(), "NIC is down") {
		t.Errorf("NIC down: %d %q, want 503 with the reason", rec.Code, rec.Body)
	}
	rec := serveGet(t, srv.Handler(), "/")
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `href="/metrics"`) || !strings.Contains(rec.Body.String(), "<h1>test v0 &lt;x&gt;</h1>") {
		t.Errorf("landing page: %d %q", rec.Code, rec.Body)
	}
	if rec := serveGet(t, srv.Handler(), "/nothing"); rec.Code != 404 {
		t.Errorf("/nothing: %d, want 404", rec.Code)
	}
	metrics := serveGet(t, srv.Handler(), "/metrics").Body.String()
	for _, want := range []string{"test_build_info{", `test_http_refused_total{what="connection"} 0`, `test_http_refused_total{what="request"} 0`, "go_goroutines "} {
		if !strings.Contains(metrics, want) {
			t.Errorf("no %s in /metrics", want)
		}
	}
}

var _ prometheus.Collector = (*refused)(nil)

func TestHTTPRateLimit(t *testing.T) {
	var refused atomic.Uint64
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})
	h := limitRate(ok, rate.NewLimiter(rate.Every(time.Hour), 3), &refused)
	for i := range 5 {
		rec := serveGet(t, h, "/metrics")
		want := 200
		if i >= 3 {
			want = 429
		}
		if rec.Code != want {
			t.Errorf("request %d: %d, want %d", i, rec.Code, want)
		}
	}
	if refused.Load() != 2 {
		t.Errorf("refused %d, want 2", refused.Load())
	}
	if rec := serveGet(t, h, "/healthz"); rec.Code != 200 {
		t.Errorf("/healthz past the limit of all requests: %d, want 200 (not in that limit)", rec.Code)
	}
}

// TestHTTPConnLimit: past MaxConns open connections a new one is
// served and the one quiet longest (no request begun or answered for
// the longest time) is closed and counted.
func TestHTTPConnLimit(t *testing.T) {
	srv, addr := serveLoopback(t)
	held := holdConns(t, addr, MaxConns)
	readers := make([]*bufio.Reader, len(held))
	for i, c := range held {
		readers[i] = bufio.NewReader(c)
		if code, err := ask(c, readers[i]); code != 200 {
			t.Fatalf("connection %d: %d %v", i, code, err)
		}
	}
	if code, err := ask(held[0], readers[0]); code != 200 { // the first is the last active now
		t.Fatalf("connection 0 again: %d %v", code, err)
	}
	if err := healthOverTCP(addr); err != nil {
		t.Fatalf("a connection past the limit: %v, want 200", err)
	}
	held[1].SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := readers[1].ReadByte(); err != io.EOF {
		t.Errorf("the connection quiet longest: read %v, want EOF (closed)", err)
	}
	if n := conns(srv); n != 1 {
		t.Errorf("refused connections %d, want 1", n)
	}
	for i, c := range held {
		if i == 1 {
			continue
		}
		if code, err := ask(c, readers[i]); code != 200 {
			t.Errorf("connection %d closed too: %d %v", i, code, err)
		}
	}
}

// healthOverTCP asks /healthz on a new connection.
func healthOverTCP(addr string) error { return getOverTCP(addr, "/healthz") }

// getOverTCP asks path on a new connection: nil if the answer, within
// 5 s, is 200.
func getOverTCP(addr, path string) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return errors.New(resp.Status)
	}
	return nil
}

// TestHealthUnderAbuse: any local user can reach the metrics server, all
// from 127.0.0.1, so neither connections held open nor a storm of
// requests on one connection may get a monitor's /healthz refused. With
// more idle connections held than the server keeps, with one keep-alive
// connection asking far faster than the rate limit, and with both at
// once, /healthz and /metrics on a new connection answer 200; the held
// connections are the ones closed, and the storm the one answered 429.
func TestHealthUnderAbuse(t *testing.T) {
	for _, c := range []struct {
		name        string
		hold, storm bool
	}{{"held", true, false}, {"storm", false, true}, {"both", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			srv, addr := serveLoopback(t)
			var held []net.Conn
			if c.hold {
				held = holdConns(t, addr, MaxConns+8)
			}
			stormDone, stop, limited := make(chan int, 1), make(chan struct{}), make(chan struct{})
			if c.storm {
				storm := dialT(t, addr)
				go func() { stormDone <- hammer(storm, stop, limited) }()
				select { // ask while the storm is being limited
				case <-limited:
				case <-time.After(10 * time.Second):
					t.Error("the storm of requests on one connection: none answered 429")
				}
			}
			for range 5 {
				for _, path := range []string{"/healthz", "/metrics"} {
					if err := getOverTCP(addr, path); err != nil {
						t.Errorf("%s on a new connection: %v, want 200", path, err)
					}
				}
			}
			close(stop)
			if c.hold && countClosed(held) == 0 {
				t.Error("none of the held connections was closed")
			}
			if c.hold && conns(srv) == 0 {
				t.Error("no connection counted as refused")
			}
			if c.storm {
				t.Logf("the storm: %d requests answered 429", <-stormDone)
			}
		})
	}
}

// holdConns opens n connections to addr and sends nothing on them.
func holdConns(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, n)
	for i := range conns {
		conns[i] = dialT(t, addr)
	}
	return conns
}

func dialT(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// countClosed counts the connections the server closed.
func countClosed(conns []net.Conn) int {
	n := 0
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err == io.EOF {
			n++
		}
	}
	return n
}

// hammer sends requests for /healthz on c, each after the last answer,
// at least 200 and until stop is closed, closes limited on the first
// answered 429 and returns how many were.
func hammer(c net.Conn, stop <-chan struct{}, limited chan<- struct{}) int {
	r := bufio.NewReader(c)
	n := 0
	c.SetDeadline(time.Now().Add(30 * time.Second))
	for i := 0; ; i++ {
		if i >= 200 {
			select {
			case <-stop:
				return n
			default:
			}
		}
		code, err := ask(c, r)
		if err != nil {
			return n
		}
		if code == http.StatusTooManyRequests {
			if n++; n == 1 {
				close(limited)
			}
		}
	}
}

// ask asks /healthz on the keep-alive connection c, whose answers r
// reads, and returns the answer's status.
func ask(c net.Conn, r *bufio.Reader) (int, error) {
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}
