package main

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/dataplane"
)

// TestStatsRecord checks the -v record as JSON: fields, not a string,
// with rates per second, and durations written as Go writes them.
func TestStatsRecord(t *testing.T) {
	var a, b dataplane.GatewayStats
	b.Forward.SuperPackets, b.Forward.Segments, b.Forward.Bytes = 20, 900, 1_250_000
	b.Return.Packets, b.Return.Writes = 400, 10
	b.Budget.InFlight, b.Budget.Limit = 4352, 1<<20
	var out bytes.Buffer
	cfg := &config{LogLevel: choice{value: "info"}, LogFormat: choice{value: "json"}}
	log := newLogger(cfg, &out)
	log.Info("stats", statsAttrs(a, b, 2*time.Second)...)
	log.Info("stopping", "drain_timeout", 1500*time.Millisecond)

	dec := json.NewDecoder(&out)
	var rec struct {
		Msg      string
		TUNToNIC map[string]float64 `json:"tun_to_nic"`
		NICToTUN map[string]float64 `json:"nic_to_tun"`
		Budget   int64              `json:"budget_bytes"`
	}
	if err := dec.Decode(&rec); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"super_per_s": 10, "segments_per_s": 450, "segments_per_super": 45, "mbit_per_s": 5}
	for k, v := range want {
		if rec.TUNToNIC[k] != v {
			t.Errorf("tun_to_nic.%s = %v, want %v (record %+v)", k, rec.TUNToNIC[k], v, rec)
		}
	}
	if rec.NICToTUN["writes_per_packet"] != 0.03 || rec.Budget != 4352 {
		t.Errorf("record %+v", rec)
	}
	var stop struct {
		DrainTimeout string `json:"drain_timeout"`
	}
	if err := dec.Decode(&stop); err != nil || stop.DrainTimeout != "1.5s" {
		t.Errorf("duration written as %q (%v), want 1.5s", stop.DrainTimeout, err)
	}
}
