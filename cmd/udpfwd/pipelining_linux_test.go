package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/internal/httpserve"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
	"github.com/gsoplane/gsoplane/internal/testing/promtext"
)

// pipelinedRSSGrowth bounds how much udpfwd's resident set may grow
// while a client pipelines requests without reading. The server reads
// a request only after it has written the previous answer, so it holds
// one answer per connection (a /metrics page, tens of KiB) and what the
// socket buffers hold belongs to the kernel; 10,000 answers kept in
// memory would be hundreds of MiB.
const pipelinedRSSGrowth = 16 << 20

// TestMetricsPipelining writes 10,000 GET /metrics requests on one
// connection to udpfwd's metrics port and never reads an answer. The
// server stops reading when its answers fill the socket buffers and
// closes the connection when a write has waited for the write timeout
// (httpserve.WriteTimeout); past the rate limit its answers are 429s. Meanwhile
// another client still gets /healthz, udpfwd's resident set stays
// within pipelinedRSSGrowth, and once the connection is closed its
// goroutines are back to what they were.
func TestMetricsPipelining(t *testing.T) {
	requireRoot(t)
	const requests = 10000
	a, _ := newLab(t)
	p := startUdpfwd(t, a, labEnv, labArgs...)
	waitReady(t, p, a)
	pid := p.cmd.Process.Pid
	m0 := scrapeOnce(t, a)
	rss0 := vmRSS(t, pid)

	c, err := dial(a, "tcp", "127.0.0.1:9464")
	netlab.Must(t, err)
	defer c.Close()
	wrote := make(chan error, 1)
	go func() {
		req := strings.Repeat("GET /metrics HTTP/1.1\r\nHost: udpfwd\r\n\r\n", requests)
		c.SetWriteDeadline(time.Now().Add(time.Minute))
		_, err := io.WriteString(c, req)
		wrote <- err
	}()

	// Until the server closes the connection, another client asks
	// /healthz and udpfwd's footprint is watched.
	start := time.Now()
	var healthz int
	rssMax := rss0
	for open := true; open; {
		if time.Since(start) > httpserve.WriteTimeout+15*time.Second {
			t.Fatalf("the pipelining connection is still open after %v (TCP state %d)", time.Since(start), tcpState(c))
		}
		code, err := healthzRetry(a)
		if err != nil || code != http.StatusOK {
			t.Fatalf("/healthz from another client after %v: %d %v", time.Since(start), code, err)
		}
		healthz++
		rssMax = max(rssMax, vmRSS(t, pid))
		open = tcpState(c) == unix.BPF_TCP_ESTABLISHED
		if open {
			time.Sleep(250 * time.Millisecond)
		}
	}
	closed := time.Since(start)
	werr := <-wrote // the server's close ends a write still blocked
	m1 := scrapeOnce(t, a)
	goroutines := waitGoroutines(t, a, m0["go_goroutines"])
	t.Logf("%d pipelined requests: the server closed the connection after %v (the client's write: %v); %d /healthz answered meanwhile; 429 answers %v",
		requests, closed.Round(time.Millisecond), werr, healthz, m1[`udpfwd_http_refused_total{what="request"}`]-m0[`udpfwd_http_refused_total{what="request"}`])
	t.Logf("udpfwd's RSS %d KiB before, at most %d KiB meanwhile (%+d KiB); goroutines %v before, %v after",
		rss0>>10, rssMax>>10, (int64(rssMax)-int64(rss0))>>10, m0["go_goroutines"], goroutines)
	if rssMax > rss0+pipelinedRSSGrowth {
		t.Errorf("udpfwd's RSS grew from %d KiB to %d KiB (bound +%d KiB)", rss0>>10, rssMax>>10, pipelinedRSSGrowth>>10)
	}
}

// healthzRetry asks /healthz from namespace ns on a connection of its
// own (the server's connections are limited: none is kept open), asking
// again after the Retry-After of a 429 (the rate limit is the server's,
// shared by every client) up to 5 times.
func healthzRetry(ns *netlab.NS) (int, error) {
	for try := 0; ; try++ {
		resp, err := oneShot(ns).Get("http://127.0.0.1:9464/healthz")
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || try == 5 {
			return resp.StatusCode, nil
		}
		time.Sleep(time.Second)
	}
}

// oneShot is an HTTP client from namespace ns that closes each
// connection after its request.
func oneShot(ns *netlab.NS) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(_ context.Context, network, a string) (net.Conn, error) { return dial(ns, network, a) },
	}}
}

// scrapeOnce is scrape on a connection of its own.
func scrapeOnce(t *testing.T, ns *netlab.NS) map[string]float64 {
	t.Helper()
	resp, err := oneShot(ns).Get("http://127.0.0.1:9464/metrics")
	netlab.Must(t, err)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	m, err := promtext.Parse(resp.Body)
	netlab.Must(t, err)
	return m
}

// waitGoroutines waits up to 10 s for udpfwd's go_goroutines to be at
// most want and returns the last value seen.
func waitGoroutines(t *testing.T, ns *netlab.NS, want float64) float64 {
	t.Helper()
	var n float64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if n = scrapeOnce(t, ns)["go_goroutines"]; n <= want || time.Now().After(deadline) {
			break
		}
	}
	if n > want {
		t.Errorf("udpfwd has %v goroutines 10 s after the connection closed, %v before it", n, want)
	}
	return n
}

// tcpState returns the TCP state of c (unix.BPF_TCP_*), or -1.
func tcpState(c net.Conn) int {
	info := netlab.TCPInfo(c.(*net.TCPConn))
	if info == nil {
		return -1
	}
	return int(info.State)
}

// vmRSS reads the resident set of process pid from /proc/PID/status.
func vmRSS(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	netlab.Must(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			netlab.Must(t, err)
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}
