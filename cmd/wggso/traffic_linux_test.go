package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/wireguard"
	"github.com/gsoplane/gsoplane/dataplane/wireguard/uapi"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
	"github.com/gsoplane/gsoplane/internal/testing/syncbuf"
)

// end is one wggso served in process in a namespace.
type end struct {
	ns   *netlab.NS
	cfg  *config
	key  wireguard.Key
	done <-chan error
}

// startEnd serves wggso INTERFACE name in ns, its metrics on
// defaultMetrics there, until the test ends.
func startEnd(t *testing.T, ns *netlab.NS, name string) *end {
	t.Helper()
	key, err := wireguard.NewPrivateKey()
	netlab.Must(t, err)
	e := &end{ns: ns, cfg: &config{Interface: name, Queues: 1, Metrics: defaultMetrics}, key: key}
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := serveIn(ctx, ns, e.cfg, slog.New(slog.DiscardHandler))
	e.done = done
	if err := <-ready; err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-e.done; err != nil {
			t.Errorf("wggso %s: %v", name, err)
		}
	})
	return e
}

// configure sets e's key, listen port and one peer through its
// configuration socket, as wg set does, and gives its interface addr.
func (e *end) configure(t *testing.T, port int, peer wireguard.Key, endpoint netip.AddrPort, allowed, addr string) {
	t.Helper()
	path, err := uapi.SocketPath(e.cfg.Interface)
	netlab.Must(t, err)
	c, err := net.Dial("unix", path)
	netlab.Must(t, err)
	defer c.Close()
	fmt.Fprintf(c, "set=1\nprivate_key=%s\nlisten_port=%d\npublic_key=%s\nendpoint=%s\nallowed_ip=%s\n\n",
		hex.EncodeToString(e.key[:]), port, hex.EncodeToString(peer[:]), endpoint, allowed)
	reply, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || reply != "errno=0\n" {
		t.Fatalf("set: %q %v", reply, err)
	}
	netlab.Must(t, e.ns.LinkUp(e.cfg.Interface))
	netlab.Must(t, e.ns.AddAddr(e.cfg.Interface, addr))
}

// get fetches path from e's metrics server: the status and the body.
func (e *end) get(t *testing.T, path string) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(_ context.Context, network, a string) (c net.Conn, err error) {
			err = e.ns.Run(func() (err error) {
				c, err = net.Dial(network, a)
				return err
			})
			return c, err
		},
	}}
	resp, err := client.Get("http://" + defaultMetrics + path)
	netlab.Must(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	netlab.Must(t, err)
	return resp.StatusCode, string(b)
}

// TestMetricsUnderTraffic serves two wggso in two namespaces, each
// the other's peer, and scrapes one's metrics before any configuration,
// once configured and after TCP both ways: /healthz is 503 until it has
// a key and a peer, then 200; the peer's counters and the tunnel's move
// with the traffic (a handshake completed, packets and bytes each way,
// the send datagrams), no series comes or goes between the scrapes, and
// each page passes promtool's lint.
func TestMetricsUnderTraffic(t *testing.T) {
	p := netlab.NewPairT(t, "wggsom")
	suffix := os.Getpid() % 100000
	a := startEnd(t, p.A, fmt.Sprintf("wma%d", suffix))
	b := startEnd(t, p.B, fmt.Sprintf("wmb%d", suffix))
	if code, body := a.get(t, "/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "no private key") {
		t.Errorf("/healthz unconfigured: %d %q, want 503 and why", code, body)
	}
	const port = 51830
	a.configure(t, port, b.key.Public(), netip.AddrPortFrom(p.AddrB, port), "10.6.0.2/32", "10.6.0.1/24")
	b.configure(t, port, a.key.Public(), netip.AddrPortFrom(p.AddrA, port), "10.6.0.1/32", "10.6.0.2/24")
	if code, body := a.get(t, "/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz configured: %d %q, want 200 ok", code, body)
	}
	_, page0 := a.get(t, "/metrics")
	m0 := parseMetrics(t, page0)

	inB := netip.MustParseAddr("10.6.0.2")
	netlab.TCPTransfer(t, p.A, p.B, netip.AddrPortFrom(inB, 5001), 2<<20, false)
	netlab.TCPTransfer(t, p.A, p.B, netip.AddrPortFrom(inB, 5002), 2<<20, true)
	_, page1 := a.get(t, "/metrics")
	m1 := parseMetrics(t, page1)

	k := `{peer="` + b.key.Public().String() + `"}`
	for _, name := range []string{
		"wggso_peer_receive_packets_total" + k, "wggso_peer_transmit_packets_total" + k,
		"wggso_peer_receive_bytes_total" + k, "wggso_peer_transmit_bytes_total" + k,
		"wggso_peer_handshakes_total" + k, "wggso_peer_last_handshake_seconds" + k,
		`wggso_tunnel_events_total{event="send_datagrams"}`, `wggso_tunnel_events_total{event="receive_datagrams"}`,
	} {
		if m1[name] <= m0[name] {
			t.Errorf("%s: %v before the traffic, %v after, want it to grow", name, m0[name], m1[name])
		}
	}
	// 2 MiB each way: over a thousand data packets each way.
	if m1["wggso_peer_receive_packets_total"+k] < 1000 || m1["wggso_peer_transmit_packets_total"+k] < 1000 {
		t.Errorf("packets received %v, sent %v, want over 1000 each", m1["wggso_peer_receive_packets_total"+k], m1["wggso_peer_transmit_packets_total"+k])
	}
	for name := range m0 {
		if _, ok := m1[name]; !ok && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
			t.Errorf("%s went away", name)
		}
	}
	for name := range m1 {
		if _, ok := m0[name]; !ok && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
			t.Errorf("%s came with the traffic", name)
		}
	}
	promtoolCheck(t, page1)
	t.Logf("peer: received %v packets, sent %v; %v handshakes, %v initiations, %v dropped for want of a session",
		m1["wggso_peer_receive_packets_total"+k], m1["wggso_peer_transmit_packets_total"+k], m1["wggso_peer_handshakes_total"+k],
		m1["wggso_peer_handshake_initiations_total"+k], m1[`wggso_peer_drops_total{peer="`+b.key.Public().String()+`",reason="no_key"}`])
}

// TestMetricsAddressTaken: an address given with -metrics that is in use
// fails the start before the interface is created, naming the flag; the
// default address in use (another interface's wggso has it) leaves this
// one without metrics, running.
func TestMetricsAddressTaken(t *testing.T) {
	ns := netlab.NewT(t, "wggsot")
	var ln net.Listener
	netlab.Must(t, ns.Run(func() (err error) {
		ln, err = net.Listen("tcp", defaultMetrics)
		return err
	}))
	defer ln.Close()
	t.Run("given", func(t *testing.T) {
		cfg := &config{Interface: fmt.Sprintf("wmt%d", os.Getpid()%100000), Queues: 1, Metrics: defaultMetrics, MetricsSet: true}
		var readyErr error
		err := ns.Run(func() error {
			return serve(context.Background(), cfg, slog.New(slog.DiscardHandler), nil, func(err error) { readyErr = err })
		})
		if err == nil || readyErr == nil || !strings.Contains(err.Error(), "-metrics "+defaultMetrics) {
			t.Fatalf("serve with its metrics address taken: %v (ready: %v), want the -metrics error", err, readyErr)
		}
		if _, err := ns.Link(cfg.Interface); err == nil {
			t.Error("the interface was created")
		}
	})
	t.Run("default", func(t *testing.T) {
		cfg := &config{Interface: fmt.Sprintf("wmd%d", os.Getpid()%100000), Queues: 1, Metrics: defaultMetrics}
		var logged syncbuf.Buffer
		ctx, cancel := context.WithCancel(context.Background())
		ready, done := serveIn(ctx, ns, cfg, slog.New(slog.NewTextHandler(&logged, nil)))
		err := <-ready
		cancel()
		if derr := <-done; err != nil || derr != nil {
			t.Fatalf("serve with the default metrics address taken: ready %v, stopped %v; want it to run", err, derr)
		}
		if !strings.Contains(logged.String(), "no metrics: the default address is taken or not there") || !strings.Contains(logged.String(), "metrics=off") {
			t.Errorf("the log does not say the metrics are off:\n%s", logged.String())
		}
	})
}
