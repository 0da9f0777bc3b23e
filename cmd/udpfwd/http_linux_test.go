package main

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/gsoplane/gsoplane/dataplane"
)

func testServer(health func() error) httpServer {
	reg := newRegistry(&statsCollector{stats: func() dataplane.GatewayStats { return dataplane.GatewayStats{} }, port: "xdp"})
	return newHTTPServer(reg, health, false, slog.New(slog.DiscardHandler))
}

func serveGet(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec
}

func TestHealthz(t *testing.T) {
	var down atomic.Bool
	srv := testServer(func() error {
		if down.Load() {
			return errors.New("the NIC is down")
		}
		return nil
	})
	if rec := serveGet(t, srv.Handler, "/healthz"); rec.Code != 200 || rec.Body.String() != "ok\n" {
		t.Errorf("healthy: %d %q, want 200 ok", rec.Code, rec.Body)
	}
	down.Store(true)
	if rec := serveGet(t, srv.Handler, "/healthz"); rec.Code != 503 || !strings.Contains(rec.Body.String(), "NIC is down") {
		t.Errorf("NIC down: %d %q, want 503 with the reason", rec.Code, rec.Body)
	}
	rec := serveGet(t, srv.Handler, "/")
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `href="/metrics"`) {
		t.Errorf("landing page: %d %q", rec.Code, rec.Body)
	}
	if rec := serveGet(t, srv.Handler, "/nothing"); rec.Code != 404 {
		t.Errorf("/nothing: %d, want 404", rec.Code)
	}
	if rec := serveGet(t, srv.Handler, "/metrics"); !strings.Contains(rec.Body.String(), "udpfwd_build_info{") {
		t.Error("no udpfwd_build_info in /metrics")
	}
}

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
}

// TestHTTPConnLimit: past maxHTTPConns open connections a new one is
// closed at once and counted; once one closes, a new one is served.
func TestHTTPConnLimit(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := testServer(func() error { return nil })
	go srv.serve(ln)
	defer srv.Close()
	addr := ln.Addr().String()
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range maxHTTPConns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	extra.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := extra.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("connection past the limit: read %v, want EOF (closed at once)", err)
	}
	extra.Close()
	if n := srv.refused.conns.Load(); n != 1 {
		t.Errorf("refused connections %d, want 1", n)
	}
	held[0].Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if healthOverTCP(addr) == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no connection served after one of the open ones closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// healthOverTCP asks /healthz on a new connection.
func healthOverTCP(addr string) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return errors.New(resp.Status)
	}
	return nil
}

var _ prometheus.Collector = (*httpRefused)(nil)
