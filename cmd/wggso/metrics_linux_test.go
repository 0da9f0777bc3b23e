package main

import (
	"bytes"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/tunnel"
	"github.com/gsoplane/gsoplane/dataplane/wireguard"
	"github.com/gsoplane/gsoplane/dataplane/wireguard/wgtunnel"
	"github.com/gsoplane/gsoplane/internal/httpserve"
	"github.com/gsoplane/gsoplane/internal/testing/promtext"
)

// fakeDevice is a device's counters, as a test sets them.
type fakeDevice struct {
	stats wgtunnel.Stats
	peers []wgtunnel.PeerStats
}

func (f *fakeDevice) Stats() wgtunnel.Stats           { return f.stats }
func (f *fakeDevice) PeerStats() []wgtunnel.PeerStats { return f.peers }

// scrapeCollector returns c's /metrics page as wggso's server serves it.
func scrapeCollector(c collector) string {
	srv := httpserve.New(newRegistry(c), httpserve.Config{Name: "wggso", Health: func() error { return nil }, Logger: slog.New(slog.DiscardHandler)})
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// parseMetrics reads a metrics page (promtext.Parse).
func parseMetrics(t *testing.T, page string) map[string]float64 {
	t.Helper()
	m, err := promtext.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestCollector checks the exported values against a known snapshot:
// names, labels and values, every reason of a peer's drops and of the
// refusals exported (zero or not), and the page promtool's lint passes.
func TestCollector(t *testing.T) {
	var key wireguard.Key
	key[0] = 1
	peer := wgtunnel.PeerStats{PublicKey: key, RxBytes: 1000, TxBytes: 2000, RxPackets: 10, TxPackets: 20,
		Initiations: 3, Handshakes: 2, LastHandshake: time.Unix(1700000000, 500_000_000)}
	peer.Drops[wireguard.NoRoom] = 4
	dev := &fakeDevice{peers: []wgtunnel.PeerStats{peer}}
	dev.stats.ControlDropped = 5
	dev.stats.Staged.Full = 11
	dev.stats.DataRefused[wireguard.Replay] = 6
	dev.stats.HandshakeRefused[wireguard.BadMAC1] = 7
	dev.stats.HandshakeRefused[wireguard.SourceLimited] = 12
	dev.stats.Tunnel.Send.Datagrams = 8
	dev.stats.Tunnel.Forward.Drops[frame.DropHook] = 9
	page := scrapeCollector(collector{dev})
	m := parseMetrics(t, page)
	k := `peer="` + key.String() + `"`
	for name, want := range map[string]float64{
		`wggso_peers`: 1,
		`wggso_peer_receive_bytes_total{` + k + `}`:                          1000,
		`wggso_peer_transmit_bytes_total{` + k + `}`:                         2000,
		`wggso_peer_receive_packets_total{` + k + `}`:                        10,
		`wggso_peer_transmit_packets_total{` + k + `}`:                       20,
		`wggso_peer_handshake_initiations_total{` + k + `}`:                  3,
		`wggso_peer_handshakes_total{` + k + `}`:                             2,
		`wggso_peer_last_handshake_seconds{` + k + `}`:                       1700000000.5,
		`wggso_peer_drops_total{` + k + `,reason="no_room"}`:                 4,
		`wggso_staged_packets_total{event="full"}`:                           11,
		`wggso_staged_packets_total{event="sent"}`:                           0,
		`wggso_peer_drops_total{` + k + `,reason="malformed"}`:               0,
		`wggso_handshake_queue_dropped_total`:                                5,
		`wggso_refused_total{message="data",reason="replay"}`:                6,
		`wggso_refused_total{message="handshake",reason="bad_mac1"}`:         7,
		`wggso_refused_total{message="handshake",reason="rate_limited"}`:     0,
		`wggso_refused_total{message="handshake",reason="source_limited"}`:   12,
		`wggso_tunnel_events_total{event="send_datagrams"}`:                  8,
		`wggso_tunnel_drops_total{direction="tun_to_peer",reason="hook"}`:    9,
		`wggso_tunnel_drops_total{direction="peer_to_tun",reason="spoofed"}`: 0,
		`wggso_http_refused_total{what="request"}`:                           0,
	} {
		if got, ok := m[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
	if !strings.Contains(page, "wggso_build_info{") {
		t.Error("no wggso_build_info")
	}
	promtoolCheck(t, page)
}

// TestReasonLabels: every reason a message or packet is dropped for has
// a label, snake_case and of its own, so that a new reason in
// dataplane/wireguard cannot go unexported unnoticed.
func TestReasonLabels(t *testing.T) {
	seen := map[string]bool{}
	for r := wireguard.Reason(1); r.String() != "unknown reason"; r++ {
		if r == wireguard.Keepalive {
			continue
		}
		l, ok := reasonLabels[r]
		if !ok || seen[l] || strings.ToLower(l) != l || strings.ContainsAny(l, " -") {
			t.Errorf("reason %q: label %q", r, l)
		}
		seen[l] = true
	}
}

// promtoolCheck lints a metrics page with promtool check metrics. Without
// promtool the test fails as root, for whom scripts/test-deps installs
// it, and skips the check otherwise.
func promtoolCheck(t *testing.T, page string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Geteuid() == 0 {
			t.Fatal("promtool is not installed: run scripts/test-deps (make test does)")
		}
		t.Log("promtool is not installed: the page is not linted")
		return
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = strings.NewReader(page)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out.String())
	}
}

// TestMetricsDocumented: docs/wireguard.md has a row for every metric
// the collector describes, and its wggso_tunnel_events_total row names
// every counter the tunnel names, so that a new counter is the
// tunnel's and the docs' only.
func TestMetricsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/wireguard.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for line := range strings.Lines(string(b)) {
		if m := regexp.MustCompile("^\\| `(wggso_[a-z_]+)").FindStringSubmatch(line); m != nil {
			rows[m[1]] = line
		}
	}
	descs := make(chan *prometheus.Desc, 64)
	collector{}.Describe(descs)
	close(descs)
	for d := range descs {
		name := regexp.MustCompile(`fqName: "([a-z_]+)"`).FindStringSubmatch(d.String())[1]
		if rows[name] == "" {
			t.Errorf("docs/wireguard.md has no row for %s", name)
		}
	}
	for _, c := range (tunnel.Stats{}).AppendCounters(nil) {
		if !strings.Contains(rows["wggso_tunnel_events_total"], "`"+c.Name+"`") {
			t.Errorf("docs/wireguard.md: wggso_tunnel_events_total does not name the event %s", c.Name)
		}
	}
}
