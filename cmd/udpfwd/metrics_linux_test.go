package main

import (
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/dataplane"
	"github.com/gsoplane/gsoplane/dataplane/afpacket"
	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/icmp"
	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/dataplane/xsk"
	"github.com/gsoplane/gsoplane/internal/testing/promtext"
)

// TestCollector checks the exported values against a known snapshot:
// names, labels, and histograms made cumulative with exact sums.
func TestCollector(t *testing.T) {
	var s dataplane.GatewayStats
	s.Forward.SuperPackets, s.Forward.Segments, s.Forward.Transmitted = 10, 95, 93
	s.Port.Kind, s.Port.Sent, s.Port.Completed = dataplane.PortXDP, 90, 88 // Transmitted less the 3 unresolved
	s.Forward.Drops[frame.DropHook] = 5
	s.Forward.SegmentsPerRead[0], s.Forward.SegmentsPerRead[6], s.Forward.SegmentsPerRead[8] = 2, 7, 1 // 1, ≤64, >128
	s.Forward.TxLatency[0], s.Forward.TxLatency[len(pipeline.LatencyBounds)] = 80, 10
	s.Forward.TxLatencySum = 1500 * time.Millisecond
	s.Forward.Drops[frame.DropUnresolved] = 3
	s.Return.Packets, s.Return.Writes, s.Return.SuperPackets, s.Return.Drops[frame.DropWriteError] = 11, 4, 2, 1
	s.Return.GRO.NoPayload, s.Return.Refused, s.Return.BigTCP = 3, 1, 5
	s.Budget.Limit, s.Budget.InFlight, s.Budget.Stalls, s.Budget.StallTime = 1<<20, 4352, 4, 2*time.Second
	s.Queue.Pending, s.Queue.PeakHeld = 3, 40
	s.Port.Sockets = []dataplane.SocketStats{{RX: 5}, {RX: 6, Counters: xsk.Stats{RXRingFull: 2, OtherHost: 7, Kicks: 9}.AppendCounters(nil)}}
	s.NIC = dataplane.NICStats{Up: true, MTU: 1400, MTUChanges: 1, TUNMTU: 1400, SendMTU: 1400, MACChanges: 3, Downs: 2, Attached: true, Detaches: 1, Reattaches: 1}
	s.Replies = icmp.Stats{Sent: 4, Limited: 2, Silent: 1}

	rec := httptest.NewRecorder()
	newHTTPServer(newRegistry(&statsCollector{stats: func() dataplane.GatewayStats { return s }, port: "xdp", backpressure: true}), func() error { return nil }, false, slog.New(slog.DiscardHandler)).
		Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	m, err := promtext.Parse(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]float64{
		`udpfwd_super_packets_total{direction="tun_to_nic",port="xdp"}`:           10,
		`udpfwd_segments_total{direction="nic_to_tun",port="xdp"}`:                11,
		`udpfwd_packets_total{direction="nic_to_tun",port="xdp"}`:                 4,
		`udpfwd_super_packets_total{direction="nic_to_tun",port="xdp"}`:           2,
		`udpfwd_gro_passthrough_total{reason="no_payload"}`:                       3,
		`udpfwd_gro_refused_total`:                                                1,
		`udpfwd_big_tcp_total`:                                                    5,
		`udpfwd_nic_up`:                                                           1,
		`udpfwd_nic_mtu_bytes`:                                                    1400,
		`udpfwd_nic_mtu_changes_total`:                                            1,
		`udpfwd_tun_mtu_bytes`:                                                    1400,
		`udpfwd_nic_mac_changes_total`:                                            3,
		`udpfwd_send_mtu_bytes`:                                                   1400,
		`udpfwd_program_attached`:                                                 1,
		`udpfwd_icmp_errors_total{outcome="sent"}`:                                4,
		`udpfwd_icmp_errors_total{outcome="rate_limited"}`:                        2,
		`udpfwd_xsk_events_total{device="nic",event="pass_other_host",queue="1"}`: 7,
		`udpfwd_tx_completed_total{port="xdp"}`:                                   88,
		`udpfwd_nic_down_total`:                                                   2,
		`udpfwd_program_detached_total`:                                           1,
		`udpfwd_packets_total{direction="tun_to_nic",port="xdp"}`:                 90,
		`udpfwd_drops_total{direction="tun_to_nic",reason="hook"}`:                5,
		`udpfwd_drops_total{direction="tun_to_nic",reason="unresolved"}`:          3,
		`udpfwd_drops_total{direction="nic_to_tun",reason="write_error"}`:         1,
		`udpfwd_xsk_events_total{device="nic",event="rx_ring_full",queue="1"}`:    2,
		`udpfwd_xsk_events_total{device="nic",event="kicks",queue="1"}`:           9,
		`udpfwd_budget_limit_bytes`:                                               1 << 20,
		`udpfwd_budget_in_use_bytes`:                                              4352,
		`udpfwd_producer_stalls_total{cause="budget"}`:                            4,
		`udpfwd_producer_stall_seconds_total{cause="budget"}`:                     2,
		`udpfwd_queue_depth_segments{state="pending"}`:                            3,
		`udpfwd_queue_high_water_segments`:                                        40,
		`udpfwd_segments_per_super_packet_bucket{le="1"}`:                         2,
		`udpfwd_segments_per_super_packet_bucket{le="64"}`:                        9,
		`udpfwd_segments_per_super_packet_bucket{le="128"}`:                       9,
		`udpfwd_segments_per_super_packet_bucket{le="+Inf"}`:                      10,
		`udpfwd_segments_per_super_packet_sum`:                                    100, // queued + refused by the hook
		`udpfwd_tx_completion_latency_seconds_bucket{le="1e-05"}`:                 80,
		`udpfwd_tx_completion_latency_seconds_count`:                              90,
		`udpfwd_tx_completion_latency_seconds_sum`:                                1.5,
	} {
		if got, ok := m[k]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, want)
		}
	}
	for _, k := range []string{`udpfwd_drops_total{direction="nic_to_tun",reason="hook"}`, `udpfwd_drops_total{direction="tun_to_nic",reason="write_error"}`} {
		if _, ok := m[k]; ok {
			t.Errorf("%s exported: that reason cannot happen in that direction", k)
		}
	}
	if _, ok := m["go_goroutines"]; !ok {
		t.Error("no Go runtime metrics")
	}
}

// TestSocketCountersDocumented: every counter a port's sockets name is
// an event of its metric in docs/udpfwd.md, so that a new counter is
// its port's and the docs' only.
func TestSocketCountersDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/udpfwd.md")
	if err != nil {
		t.Fatal(err)
	}
	for metric, names := range map[string][]frame.Counter{
		"udpfwd_xsk_events_total":    xsk.Stats{}.AppendCounters(nil),
		"udpfwd_packet_events_total": afpacket.Stats{}.AppendCounters(nil),
	} {
		var row string
		for line := range strings.Lines(string(b)) {
			if strings.HasPrefix(line, "| `"+metric+"{") {
				row = line
			}
		}
		if row == "" {
			t.Fatalf("docs/udpfwd.md has no row for %s", metric)
		}
		for _, c := range names {
			if !strings.Contains(row, "`"+c.Name+"`") {
				t.Errorf("docs/udpfwd.md: %s does not name the event %s", metric, c.Name)
			}
		}
	}
}
