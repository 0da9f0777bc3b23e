package main

import (
	"context"
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

// The metrics server's limits. Any local user can reach it, all from the
// same loopback address, so neither many connections, slow or idle
// ones, nor a storm of requests may cost the dataplane more than a
// little memory and CPU, or keep a monitor's /healthz from an answer.
// At most maxHTTPConns connections are open: a new one past them closes
// the one that has been quiet longest (no request begun or answered for
// the longest time; one held idle, or slowly sending or reading), so
// whoever holds connections loses them, and a new connection, whose
// request comes at once, is answered. Idle connections are closed after
// httpIdle, a request must arrive within httpReadHeader and be answered
// within httpWrite (not with -pprof: a profile takes as long as it
// asks). Each connection may ask httpConnRate requests a second (after
// a burst of httpConnBurst), and all of them together httpRate (after
// httpBurst), /healthz excepted; past either the answer is 429: a
// client that asks too fast is refused, not the others, and /healthz
// stays out of a limit that others can use up. Each connection's send
// buffer is httpSendBuffer, so that the answers to a client that sends
// requests without reading them fill it soon: the server's next write
// then waits and httpWrite closes the connection, where the kernel's
// self-tuned buffer (up to tcp_wmem's 4 MiB) would take megabytes of
// answers and leave the connection open until httpIdle after its last
// request.
const (
	maxHTTPConns   = 32
	httpIdle       = 30 * time.Second
	httpReadHeader = 5 * time.Second
	httpWrite      = 15 * time.Second
	httpRate       = 20
	httpBurst      = 40
	httpConnRate   = 5
	httpConnBurst  = 10
	httpMaxHeader  = 8 << 10
	httpSendBuffer = 64 << 10
)

// httpRefused counts what the limits turned away; it is a collector of
// udpfwd_http_refused_total{what}.
type httpRefused struct {
	conns, requests atomic.Uint64
}

var descHTTPRefused = desc("http_refused_total", "Metrics server connections closed to make room past the limit of open ones (what=connection: the one quiet longest) and requests answered 429 (what=request: past a rate limit).", "what")

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

// connTable holds the open connections, at most max: past them, Accept
// closes the one quiet longest.
type connTable struct {
	net.Listener
	max     int
	refused *atomic.Uint64
	clock   atomic.Uint64 // ticks at each connection's activity
	mu      sync.Mutex
	open    map[*trackedConn]struct{}
}

func (t *connTable) Accept() (net.Conn, error) {
	c, err := t.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(httpSendBuffer) // best effort: a connection without it is still bounded by httpIdle
	}
	tc := &trackedConn{Conn: c, table: t, limit: rate.NewLimiter(httpConnRate, httpConnBurst)}
	tc.touch()
	t.mu.Lock()
	quiet := t.quietest()
	t.open[tc] = struct{}{}
	t.mu.Unlock()
	if quiet != nil {
		t.refused.Add(1)
		quiet.Close()
	}
	return tc, nil
}

// quietest takes the connection quiet longest out of the table, if it
// is full, and returns it.
func (t *connTable) quietest() *trackedConn {
	if len(t.open) < t.max {
		return nil
	}
	var q *trackedConn
	for c := range t.open {
		if q == nil || c.seen.Load() < q.seen.Load() {
			q = c
		}
	}
	delete(t.open, q)
	return q
}

// trackedConn is a connection of a connTable, with its own rate limit.
type trackedConn struct {
	net.Conn
	table *connTable
	limit *rate.Limiter
	seen  atomic.Uint64 // the table's clock at its last activity
	once  sync.Once
}

// touch notes activity: a request begun or answered.
func (c *trackedConn) touch() { c.seen.Store(c.table.clock.Add(1)) }

// Close gives the connection's place back once.
func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.table.mu.Lock()
		delete(c.table.open, c)
		c.table.mu.Unlock()
	})
	return c.Conn.Close()
}

// httpServer is the metrics server with its limits.
type httpServer struct {
	*http.Server
	refused *httpRefused
}

// serve serves ln within the connection limit.
func (s httpServer) serve(ln net.Listener) error {
	return s.Serve(&connTable{Listener: ln, max: maxHTTPConns, refused: &s.refused.conns, open: map[*trackedConn]struct{}{}})
}

// connKey is the request context's key of its trackedConn.
type connKey struct{}

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
		ErrorLog:  slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		ConnState: noteActivity,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		}}
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

// noteActivity notes a request begun or answered on a trackedConn.
func noteActivity(c net.Conn, st http.ConnState) {
	if tc, ok := c.(*trackedConn); ok && (st == http.StateActive || st == http.StateIdle) {
		tc.touch()
	}
}

// limitRate answers 429 to the requests that their connection's limit
// does not allow, or all's (lim) except for /healthz.
func limitRate(next http.Handler, lim *rate.Limiter, refused *atomic.Uint64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := r.Context().Value(connKey{}).(*trackedConn)
		if c != nil && !c.limit.Allow() || r.URL.Path != "/healthz" && !lim.Allow() {
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
