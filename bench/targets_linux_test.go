package main

import (
	"io"
	"testing"
)

// TestTargetsHaveRatios checks that every target names a ratio (and a
// noise floor) its scenario computes once all its rows have runs: a
// renamed row or ratio would leave the target never measured.
func TestTargetsHaveRatios(t *testing.T) {
	o, _, _ := parseFlags(nil, io.Discard)
	lost := int64(0)
	run := runResult{ThroughputBps: 1e9, PPS: 1e5, Lost: &lost, Extra: map[string]float64{"datagrams_sent": 1000}}
	var results []scenarioResult
	for _, name := range scenarioNames {
		def := scenarios[name]
		var rows []*rowResult
		for _, spec := range def.rows(o) {
			rows = append(rows, &rowResult{scenario: name, spec: spec, runs: []runResult{run, run}})
		}
		results = append(results, scenarioResult{name: name, rows: rows, ratios: def.ratios(rows, o)})
	}
	judged := judgeAll(results)
	if len(judged) != len(targets) {
		t.Errorf("%d targets judged, want %d: a target names a scenario that does not exist", len(judged), len(targets))
	}
	for _, r := range judged {
		if r.status == notMeasured {
			t.Errorf("target %s/%s: not measured with every row run", r.scenario, r.key)
		}
		if r.ratio != nil && (r.ratio.A.Name == "" || r.ratio.B.Name == "") {
			t.Errorf("target %s/%s: the ratio does not name its row and peer: %+v", r.scenario, r.key, r.ratio)
		}
	}
}
