package main

import (
	"fmt"
	"html"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/time/rate"

	"github.com/gsoplane/gsoplane/internal/buildinfo"
)

// The metrics server's limits. Any local user can reach it, so neither
// many connections, slow or idle ones, nor a storm of requests may cost
// the dataplane more than a little memory and CPU: connections past
// maxHTTPConns are closed at once, idle ones after httpIdle, a request
// must arrive within httpReadHeader and be answered within httpWrite (not
// with -pprof: a profile takes as long as it asks), and requests past
// httpRate a second (after a burst of httpBurst) get 429. Each
// connection's send buffer is httpSendBuffer, so that the answers to a
// client that sends requests without reading them fill it soon: the
// server's next write then waits and httpWrite closes the connection,
// where the kernel's self-tuned buffer (up to tcp_wmem's 4 MiB) would
// take megabytes of answers and leave the connection open until
// httpIdle after its last request.
const (
	maxHTTPConns   = 32
	httpIdle       = 30 * time.Second
	httpReadHeader = 5 * time.Second
	httpWrite      = 15 * time.Second
	httpRate       = 20
	httpBurst      = 40
	httpMaxHeader  = 8 << 10
	httpSendBuffer = 64 << 10
)

// httpRefused counts what the limits turned away; it is a collector of
// udpfwd_http_refused_total{what}.
type httpRefused struct {
	conns, requests atomic.Uint64
}

var descHTTPRefused = desc("http_refused_total", "Metrics server connections closed at once (what=connection: past the limit of open ones) and requests answered 429 (what=request: past the rate limit).", "what")

func (r *httpRefused) Describe(ch chan<- *prometheus.Desc) { ch <- descHTTPRefused }

func (r *httpRefused) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descHTTPRefused, prometheus.CounterValue, float64(r.conns.Load()), "connection")
	ch <- prometheus.MustNewConstMetric(descHTTPRefused, prometheus.CounterValue, float64(r.requests.Load()), "request")
}

// listenMetrics binds the -metrics address before anything else is set
// up, so that a taken port fails the start cleanly. Empty: no listener.
func listenMetrics(addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-metrics %s: %w (choose another address, or -metrics= to disable)", addr, err)
	}
	return ln, nil
}

// limitListener closes a new connection at once while max are open.
type limitListener struct {
	net.Listener
	open    atomic.Int64
	max     int64
	refused *atomic.Uint64
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max {
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetWriteBuffer(httpSendBuffer) // best effort: a connection without it is still bounded by httpIdle
			}
			return &limitedConn{Conn: c, open: &l.open}, nil
		}
		l.open.Add(-1)
		l.refused.Add(1)
		c.Close()
	}
}

// limitedConn gives its place back once, when it is closed.
type limitedConn struct {
	net.Conn
	open *atomic.Int64
	once sync.Once
}

func (c *limitedConn) Close() error {
	c.once.Do(func() { c.open.Add(-1) })
	return c.Conn.Close()
}

// httpServer is the metrics server with its limits.
type httpServer struct {
	*http.Server
	refused *httpRefused
}

// serve serves ln within the connection limit.
func (s httpServer) serve(ln net.Listener) error {
	return s.Serve(&limitListener{Listener: ln, max: maxHTTPConns, refused: &s.refused.conns})
}

// newHTTPServer serves /metrics from reg, /healthz from health (nil:
// forwarding; else why not), a landing page at / and, with pprof,
// /debug/pprof/.
func newHTTPServer(reg *prometheus.Registry, health func() error, pprofOn bool, log *slog.Logger) httpServer {
	refused := &httpRefused{}
	reg.MustRegister(refused)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelError),
	}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { serveHealth(w, health()) })
	mux.HandleFunc("/{$}", serveLanding)
	lim := rate.NewLimiter(httpRate, httpBurst)
	srv := &http.Server{Handler: limitRate(mux, lim, &refused.requests), ReadHeaderTimeout: httpReadHeader,
		WriteTimeout: httpWrite, IdleTimeout: httpIdle, MaxHeaderBytes: httpMaxHeader,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	if pprofOn {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		srv.WriteTimeout = 0
	}
	return httpServer{srv, refused}
}

// limitRate answers 429 to the requests lim does not allow.
func limitRate(next http.Handler, lim *rate.Limiter, refused *atomic.Uint64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !lim.Allow() {
			refused.Add(1)
			w.Header().Set("Retry-After", "1")
			http.Error(w, "too many requests", http.StatusTooManyRequests)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// serveHealth answers 200 "ok" while the gateway forwards, 503 and the
// reason while it cannot.
func serveHealth(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, err)
		return
	}
	fmt.Fprintln(w, "ok")
}

func serveLanding(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, "<!doctype html><title>udpfwd</title><h1>udpfwd %s</h1>\n<ul><li><a href=\"/metrics\">/metrics</a><li><a href=\"/healthz\">/healthz</a></ul>\n",
		html.EscapeString(version()))
}

// newRegistry registers the gateway's collector with the build
// information and the Go runtime and process collectors.
func newRegistry(c *statsCollector) *prometheus.Registry {
	b := buildinfo.Read()
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "udpfwd_build_info", Help: "Always 1; the labels say which build of udpfwd runs.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "goversion": b.Go},
	})
	info.Set(1)
	reg := prometheus.NewRegistry()
	reg.MustRegister(c, info, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
