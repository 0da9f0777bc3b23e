package main

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gsoplane/gsoplane/dataplane"
	"github.com/gsoplane/gsoplane/internal/httpserve"
)

func testServer(health func() error) *httpserve.Server {
	reg := newRegistry(&statsCollector{stats: func() dataplane.GatewayStats { return dataplane.GatewayStats{} }, port: "xdp"})
	return newHTTPServer(reg, health, false, slog.New(slog.DiscardHandler))
}

func serveGet(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec
}

// TestHealthz: udpfwd's server (internal/httpserve) answers /healthz
// from the gateway's health, links /metrics from /, and exports the
// server's own metrics under udpfwd's names.
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
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `href="/metrics"`) {
		t.Errorf("landing page: %d %q", rec.Code, rec.Body)
	}
	if rec := serveGet(t, srv.Handler(), "/nothing"); rec.Code != 404 {
		t.Errorf("/nothing: %d, want 404", rec.Code)
	}
	metrics := serveGet(t, srv.Handler(), "/metrics").Body.String()
	for _, want := range []string{"udpfwd_build_info{", `udpfwd_http_refused_total{what="connection"}`, `udpfwd_http_refused_total{what="request"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("no %s in /metrics", want)
		}
	}
}
