package main

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gsoplane/gsoplane/internal/buildinfo"
	"github.com/gsoplane/gsoplane/internal/httpserve"
)

// newHTTPServer serves /metrics from reg, /healthz from health (nil:
// forwarding; else why not), a landing page at / and, with pprof,
// /debug/pprof/, within internal/httpserve's limits.
func newHTTPServer(reg *prometheus.Registry, health func() error, pprofOn bool, log *slog.Logger) *httpserve.Server {
	return httpserve.New(reg, httpserve.Config{Name: "udpfwd", Version: version(), Health: health, Pprof: pprofOn, Logger: log})
}

// newRegistry registers the gateway's collector with the build
// information and the Go runtime and process collectors.
func newRegistry(c *statsCollector) *prometheus.Registry {
	b := buildinfo.Read()
	return httpserve.NewRegistry("udpfwd", httpserve.Build{Version: b.Version, Revision: b.Revision, Go: b.Go}, c)
}
