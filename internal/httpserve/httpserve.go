// Package httpserve is the metrics server of the project's binaries
// (cmd/udpfwd, cmd/wggso): Prometheus's text exposition at /metrics,
// /healthz, a landing page at / and, if asked, Go's /debug/pprof/, on a
// listener that any local user can reach and so is bounded against
// them (see Server). Each binary brings its collectors; the metrics of
// the server itself are NAME_build_info and NAME_http_refused_total.
package httpserve

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
)

// The server's limits. Any local user can reach it, all from the same
// loopback address, so neither many connections, slow or idle ones, nor
// a storm of requests may cost the dataplane more than a little memory
// and CPU, or keep a monitor's /healthz from an answer. At most
// MaxConns connections are open: a new one past them closes the one
// that has been quiet longest (no request begun or answered for the
// longest time; one held idle, or slowly sending or reading), so
// whoever holds connections loses them, and a new connection, whose
// request comes at once, is answered. Idle connections are closed after
// idle, a request must arrive within readHeader and be answered within
// WriteTimeout (not with pprof: a profile takes as long as it asks). Each
// connection may ask connRate requests a second (after a burst of
// connBurst), and all of them together allRate (after allBurst),
// /healthz excepted; past either the answer is 429: a client that asks
// too fast is refused, not the others, and /healthz stays out of a
// limit that others can use up. Each connection's send buffer is
// sendBuffer, so that the answers to a client that sends requests
// without reading them fill it soon: the server's next write then waits
// and WriteTimeout closes the connection, where the kernel's self-tuned buffer
// (up to tcp_wmem's 4 MiB) would take megabytes of answers and leave
// the connection open until idle after its last request.
const (
	MaxConns     = 32
	idle         = 30 * time.Second
	readHeader   = 5 * time.Second
	WriteTimeout = 15 * time.Second
	allRate      = 20
	allBurst     = 40
	connRate     = 5
	connBurst    = 10
	maxHeader    = 8 << 10
	sendBuffer   = 64 << 10
)

// Config configures a Server.
type Config struct {
	// Name is the binary's: the prefix of the server's own metrics and
	// the landing page's title.
	Name string
	// Version is shown on the landing page.
	Version string
	// Health says why the binary cannot do its work now (/healthz: 503
	// and the reason), or nil while it can (200 "ok").
	Health func() error
	// Pprof also serves /debug/pprof/.
	Pprof bool
	// Logger takes the server's errors (nil: slog.Default()).
	Logger *slog.Logger
}

// Listen binds the metrics address addr (a binary's -metrics flag)
// before anything else is set up, so that a taken port fails the start
// cleanly. Empty: no listener (nil, nil).
func Listen(addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-metrics %s: %w (choose another address, or -metrics= to disable)", addr, err)
	}
	return ln, nil
}

// Build is the build NAME_build_info names (internal/buildinfo has it).
type Build struct{ Version, Revision, Go string }

// NewRegistry registers cs with NAME_build_info (always 1; its labels
// version, revision and goversion say which build runs) and the Go
// runtime and process collectors.
func NewRegistry(name string, b Build, cs ...prometheus.Collector) *prometheus.Registry {
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: name + "_build_info", Help: "Always 1; the labels say which build of " + name + " runs.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "goversion": b.Go},
	})
	info.Set(1)
	reg := prometheus.NewRegistry()
	reg.MustRegister(info, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(cs...)
	return reg
}

// A Server serves reg's metrics within the limits above.
type Server struct {
	srv     *http.Server
	refused *refused
}

// New returns the server of reg's metrics and cfg's health, and
// registers NAME_http_refused_total in reg.
func New(reg *prometheus.Registry, cfg Config) *Server {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	r := &refused{desc: prometheus.NewDesc(cfg.Name+"_http_refused_total",
		"Metrics server connections closed to make room past the limit of open ones (what=connection: the one quiet longest) and requests answered 429 (what=request: past a rate limit).",
		[]string{"what"}, nil)}
	reg.MustRegister(r)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelError),
	}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { serveHealth(w, cfg.Health()) })
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) { serveLanding(w, cfg.Name, cfg.Version) })
	srv := &http.Server{Handler: limitRate(mux, rate.NewLimiter(allRate, allBurst), &r.requests), ReadHeaderTimeout: readHeader,
		WriteTimeout: WriteTimeout, IdleTimeout: idle, MaxHeaderBytes: maxHeader,
		ErrorLog:  slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		ConnState: noteActivity,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		}}
	if cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		srv.WriteTimeout = 0
	}
	return &Server{srv, r}
}

// Handler is the server's handler, its limit of all requests included.
func (s *Server) Handler() http.Handler { return s.srv.Handler }

// Serve serves ln within the connection limit until Shutdown or Close
// (http.ErrServerClosed).
func (s *Server) Serve(ln net.Listener) error {
	return s.srv.Serve(&connTable{Listener: ln, max: MaxConns, refused: &s.refused.conns, open: map[*trackedConn]struct{}{}})
}

// Shutdown stops the server gracefully (http.Server.Shutdown).
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// Close closes the listener and every connection.
func (s *Server) Close() error { return s.srv.Close() }

// Refused returns the connections closed past MaxConns and the requests
// answered 429.
func (s *Server) Refused() (conns, requests uint64) {
	return s.refused.conns.Load(), s.refused.requests.Load()
}

// refused counts what the limits turned away: NAME_http_refused_total{what}.
type refused struct {
	desc            *prometheus.Desc
	conns, requests atomic.Uint64
}

func (r *refused) Describe(ch chan<- *prometheus.Desc) { ch <- r.desc }

func (r *refused) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(r.desc, prometheus.CounterValue, float64(r.conns.Load()), "connection")
	ch <- prometheus.MustNewConstMetric(r.desc, prometheus.CounterValue, float64(r.requests.Load()), "request")
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
		tc.SetWriteBuffer(sendBuffer) // best effort: a connection without it is still bounded by idle
	}
	tc := &trackedConn{Conn: c, table: t, limit: rate.NewLimiter(connRate, connBurst)}
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

// connKey is the request context's key of its trackedConn.
type connKey struct{}

// noteActivity notes a request begun on a trackedConn. Its answer is
// noted by limitRate when the handler returns, before the server ends
// the response: the idle state comes after the client may have read it,
// which would let a later request's connection look the quieter.
func noteActivity(c net.Conn, st http.ConnState) {
	if tc, ok := c.(*trackedConn); ok && st == http.StateActive {
		tc.touch()
	}
}

// limitRate notes each answer on its connection, and answers 429 to the requests that their connection's limit
// does not allow, or all's (lim) except for /healthz.
func limitRate(next http.Handler, lim *rate.Limiter, refused *atomic.Uint64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := r.Context().Value(connKey{}).(*trackedConn)
		if c != nil {
			defer c.touch() // answered
		}
		if c != nil && !c.limit.Allow() || r.URL.Path != "/healthz" && !lim.Allow() {
			refused.Add(1)
			w.Header().Set("Retry-After", "1")
			http.Error(w, "too many requests", http.StatusTooManyRequests)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// serveHealth answers 200 "ok" while the binary does its work, 503 and
// the reason while it cannot.
func serveHealth(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, err)
		return
	}
	fmt.Fprintln(w, "ok")
}

func serveLanding(w http.ResponseWriter, name, version string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, "<!doctype html><title>%s</title><h1>%s %s</h1>\n<ul><li><a href=\"/metrics\">/metrics</a><li><a href=\"/healthz\">/healthz</a></ul>\n",
		html.EscapeString(name), html.EscapeString(name), html.EscapeString(version))
}
