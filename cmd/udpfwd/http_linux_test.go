package main

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
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

// TestHealthz: udpfwd's server (internal/httpserve, whose tests check
// the handlers and limits) answers /healthz from the gateway's health
// and exports the server's own metrics under udpfwd's names.
func TestHealthz(t *testing.T) {
	srv := testServer(func() error { return errors.New("the NIC is down") })
	if rec := serveGet(t, srv.Handler(), "/healthz"); rec.Code != 503 || !strings.Contains(rec.Body.String(), "NIC is down") {
		t.Errorf("NIC down: %d %q, want 503 with the reason", rec.Code, rec.Body)
	}
	metrics := serveGet(t, srv.Handler(), "/metrics").Body.String()
	for _, want := range []string{"udpfwd_build_info{", `udpfwd_http_refused_total{what="connection"}`, `udpfwd_http_refused_total{what="request"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("no %s in /metrics", want)
		}
	}
}
