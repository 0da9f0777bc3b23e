package main

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"strings"
	"testing"
	"time"
)

// Tests of the parts that need no privileges: flags, statistics, CPU
// accounting and output.

func TestParseFlags(t *testing.T) {
	o, code, err := parseFlags([]string{"-scenario", "gso,hook,gso", "-line-rate", "500M", "-duration", "2s", "-runs", "5"}, io.Discard)
	if err != nil || code != exitOK {
		t.Fatalf("parseFlags: %v (%d)", err, code)
	}
	if strings.Join(o.scenarios, ",") != "gso,hook" || o.lineRate != 500e6 || o.measure.duration != 2*time.Second || o.measure.runs != 5 {
		t.Errorf("got %+v", o)
	}
	o, _, _ = parseFlags(nil, io.Discard)
	if strings.Join(o.scenarios, ",") != strings.Join(scenarioNames, ",") || o.lineRate != 1e9 || o.measure.runs != 3 {
		t.Errorf("defaults: %+v", o)
	}
	for _, bad := range [][]string{
		{"-scenario", "nope"}, {"-runs", "0"}, {"-duration", "0s"}, {"-line-rate", "fast"}, {"extra"},
	} {
		if _, code, err := parseFlags(bad, io.Discard); err == nil || code != exitUsage {
			t.Errorf("%q: err %v, code %d", bad, err, code)
		}
	}
	if _, code, _ := parseFlags([]string{"-h"}, io.Discard); code != exitOK {
		t.Errorf("-h: code %d", code)
	}
}

func TestSelectRows(t *testing.T) {
	o, _, err := parseFlags([]string{"-rows", " packet, floor ,"}, io.Discard)
	if err != nil || strings.Join(o.rows, ",") != "packet,floor" {
		t.Fatalf("-rows: %q, %v", o.rows, err)
	}
	rows := []rowSpec{{name: "floor"}, {name: "kernel"}, {name: "packet"}}
	var got []string
	for _, r := range selectRows(rows, o.rows) {
		got = append(got, r.name)
	}
	if strings.Join(got, ",") != "floor,packet" {
		t.Errorf("selected %q, want the rows named, in the scenario's order", got)
	}
	if len(selectRows(rows, nil)) != len(rows) {
		t.Error("no -rows: not every row")
	}
}

func TestBitrate(t *testing.T) {
	for in, want := range map[string]int64{"1G": 1e9, "2.5g": 2.5e9, "100M": 100e6, "64k": 64e3, "1e9": 1e9} {
		var b bitrate
		if err := b.Set(in); err != nil || int64(b) != want {
			t.Errorf("%s: %d, %v; want %d", in, b, err, want)
		}
	}
}

func TestMedianAndRatio(t *testing.T) {
	rows := func(vals ...float64) *rowResult {
		r := &rowResult{spec: rowSpec{name: "x"}}
		for _, v := range vals {
			r.runs = append(r.runs, runResult{ThroughputBps: v})
		}
		return r
	}
	a, b := rows(30, 10, 20), rows(10, 5, 10)
	m, lo, hi, ok := a.median()
	if !ok || m.ThroughputBps != 20 || lo != 10 || hi != 30 {
		t.Errorf("median %v [%v, %v]", m.ThroughputBps, lo, hi)
	}
	if m, _, _, _ := rows(4, 1, 3, 2).median(); m.ThroughputBps != 2 {
		t.Errorf("even count: median %v, want the lower middle 2", m.ThroughputBps)
	}
	q := ratioOf("a/b", "", a, b, false)
	if q.Value != 2 || q.Lo != 2 || q.Hi != 3 {
		t.Errorf("ratio %+v", q)
	}
	if s := q.String(); s != "2.00× (per run 2.00–3.00×)" {
		t.Errorf("ratio text %q", s)
	}
	// Each direction's median is its own: here no run has both.
	two := &rowResult{runs: []runResult{
		{ThroughputBps: 30, ReverseBps: 10}, // A→B 20
		{ThroughputBps: 31, ReverseBps: 21}, // A→B 10
		{ThroughputBps: 29, ReverseBps: 14}, // A→B 15
	}}
	if ab, ba := two.directionMedian(false), two.directionMedian(true); ab != 15 || ba != 14 {
		t.Errorf("direction medians %v, %v, want 15, 14", ab, ba)
	}
	peer := &rowResult{runs: []runResult{{ThroughputBps: 3, ReverseBps: 2}}}
	if q := directionRatio("k", "", two, peer, true); q.Value != 7 {
		t.Errorf("direction ratio %v, want 7 (B→A medians 14 / 2)", q.Value)
	}
	if s := (ratio{Value: 0.995, Form: delta}).String(); s != "-0.50%" {
		t.Errorf("delta text %q", s)
	}
	if s := (ratio{Value: math.Inf(1)}).String(); s != "∞" {
		t.Errorf("infinite ratio text %q", s)
	}
}

func TestCPU(t *testing.T) {
	a := parseCPU([]byte("cpu  1 2 3 4 5 6 7 8 0 0\ncpu0 100 0 100 800 0 0 0 0 0 0\ncpu1 0 0 0 1000 0 0 0 0 0 0\nintr 1\n"))
	b := parseCPU([]byte("cpu  1 2 3 4 5 6 7 8 0 0\ncpu0 150 0 130 800 0 0 20 0 0 0\ncpu1 0 0 0 1100 0 0 0 0 0 0\n"))
	u := cpuUsage(a, b)
	if len(u) != 2 || u[0].CPU != "cpu0" || u[0].User != 50 || u[0].System != 30 || u[0].SoftIRQ != 20 || u[0].Busy() != 100 || u[1].Busy() != 0 {
		t.Fatalf("usage %+v", u)
	}
	avg := meanUsage([][]CoreUsage{u, {{CPU: "cpu0", Idle: 100}, {CPU: "cpu1", Idle: 100}}})
	if avg[0].User != 25 || avg[0].Idle != 50 {
		t.Errorf("mean %+v", avg)
	}
}

// TestCosts: a run's costs per Gbit/s, the gateway's from its CPU time,
// the machine's from the cores' busy shares; none without throughput.
func TestCosts(t *testing.T) {
	r := runResult{Seconds: 2, ThroughputBps: 4e9, CPU: []CoreUsage{{Idle: 50}, {Idle: 20, IOWait: 10}}}
	r.costs(time.Second)
	if r.GatewayCores != 0.5 || r.GatewayCoresPerGbit != 0.125 || r.BusyCoresPerGbit != 0.3 {
		t.Errorf("costs: %v cores, %v per Gbit/s, machine %v per Gbit/s; want 0.5, 0.125, 0.3",
			r.GatewayCores, r.GatewayCoresPerGbit, r.BusyCoresPerGbit)
	}
	r = runResult{Seconds: 1, CPU: []CoreUsage{{Idle: 50}}}
	if r.costs(time.Second); r.GatewayCoresPerGbit != 0 || r.BusyCoresPerGbit != 0 {
		t.Errorf("costs without throughput: %+v", r)
	}
}

func TestSNMPField(t *testing.T) {
	snmp := "Ip: Forwarding DefaultTTL\nIp: 1 64\nUdp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\nUdp: 10 2 3 4 5 6\n"
	if v := snmpField(snmp, "Udp:", "RcvbufErrors"); v != 5 {
		t.Errorf("RcvbufErrors %d, want 5", v)
	}
}

// TestOutput renders a synthetic report as text and JSON.
func TestOutput(t *testing.T) {
	rep := syntheticReport()
	var text bytes.Buffer
	rep.writeText(&text, true)
	out := text.String()
	for _, want := range []string{
		"gsoplane bench, ", "gsoplane ", "machine: ", "flags: -runs=2 -scenario=backpressure,gso",
		"== backpressure title", "980 [980–990]", "20%", "on/off = 1.00×", "off: run failed: boom", "note: a note", "Average:",
		"== targets", "on delivered", "100.0%", "≥ 100.0%", "262676 / 262676 datagrams",
		"packet-offload/kernel", "0.71× (per run 0.64–0.80×)", "7661 / 10795 Mbit/s", "≥ 0.90×", "MISSED",
		"packet-full/xdp", "not measured",
		"gw cores/Gbit", "busy cores/Gbit", "copies", " 0.918 ", " 0.204 ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q:\n%s", want, out)
		}
	}
	// A target is shown in the targets block, not under its table.
	if strings.Contains(out, "on delivered = ") || strings.Contains(out, "target missed") {
		t.Errorf("a target is mixed into a table:\n%s", out)
	}
	var js bytes.Buffer
	if err := rep.writeJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back jsonReport
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	bp := back.Scenarios[0]
	if back.SchemaVersion != 1 || len(bp.Rows) != 2 || bp.Rows[0].ThroughputBps != 980e6 || bp.Rows[0].Lost == nil ||
		bp.Rows[0].Copies == nil || *bp.Rows[0].Copies != 3 || bp.Rows[0].GatewayCoresPerGbit != 0.9/0.98 ||
		*bp.Ratios[0].Value != 1 || bp.Ratios[1].Value != nil || back.Flags["runs"] != "2" {
		t.Errorf("JSON round trip: %+v", back)
	}
	var st []string
	for _, x := range back.Targets {
		st = append(st, x.Ratio+" "+string(x.Status))
	}
	if got := strings.Join(st, ", "); got != "on delivered met, default/floor not_measured, default/floor cores/Gbit not_measured, default/kernel not_measured, packet-offload/kernel missed, packet-full/xdp not_measured" {
		t.Errorf("targets: %s", got)
	}
	if !rep.failed() {
		t.Error("a row with a failed run does not fail the report")
	}
}
