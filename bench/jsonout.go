package main

// Results as JSON, in the schema docs/bench-json.md documents. Within a
// schema_version fields are only added; renaming or removing one bumps it.

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"time"
)

// schemaVersion is the version of the JSON schema the bench writes.
const schemaVersion = 1

type jsonReport struct {
	SchemaVersion int               `json:"schema_version"`
	Gsoplane      build             `json:"gsoplane"`
	GoVersion     string            `json:"go_version"`
	Kernel        string            `json:"kernel"`
	CPUModel      string            `json:"cpu_model"`
	CPUCount      int               `json:"cpu_count"`
	Host          string            `json:"host"`
	Started       string            `json:"started"`
	Flags         map[string]string `json:"flags"`
	Scenarios     []jsonScenario    `json:"scenarios"`
	Targets       []jsonTarget      `json:"targets"`
}

type jsonScenario struct {
	Name   string      `json:"name"`
	Title  string      `json:"title"`
	Rows   []jsonRow   `json:"rows"`
	Ratios []jsonRatio `json:"ratios"`
	Notes  []string    `json:"notes"`
}

type jsonRow struct {
	Name          string   `json:"name"`
	Product       bool     `json:"product,omitempty"`
	MainMetric    string   `json:"main_metric"`
	ThroughputBps float64  `json:"throughput_bps"`
	ThroughputMin float64  `json:"throughput_min_bps"`
	ThroughputMax float64  `json:"throughput_max_bps"`
	PPS           float64  `json:"pps"`
	PPSMin        float64  `json:"pps_min"`
	PPSMax        float64  `json:"pps_max"`
	Sent          uint64   `json:"sent"`
	SentUnit      string   `json:"sent_unit"`
	Received      uint64   `json:"received"`
	ReceivedUnit  string   `json:"received_unit"`
	RxMessages    *uint64  `json:"received_messages,omitempty"`
	GoodputBps    *float64 `json:"goodput_bps,omitempty"`
	Drops         uint64   `json:"drops"`
	SendErrors    uint64   `json:"send_errors"`
	Retransmits   *uint64  `json:"retransmits,omitempty"`
	Lost          *int64   `json:"lost,omitempty"`
	SegsPerRead   float64  `json:"segments_per_read,omitempty"`
	WritesPerPkt  float64  `json:"writes_per_packet,omitempty"`
	ReverseBps    float64  `json:"reverse_bps,omitempty"`
	// Each direction's median over the runs (rowResult.directionMedian),
	// in rows with a stream each way: the table's A→B and B→A.
	ForwardMedianBps float64 `json:"forward_median_bps,omitempty"`
	ReverseMedianBps float64 `json:"reverse_median_bps,omitempty"`
	DgramsPerSend    float64 `json:"datagrams_per_send,omitempty"`
	DgramsPerRecv    float64 `json:"datagrams_per_receive,omitempty"`
	// The median run's costs (runResult), and the row's path's copies.
	GatewayCoresPerGbit float64            `json:"gateway_cores_per_gbit,omitempty"`
	BusyCoresPerGbit    float64            `json:"busy_cores_per_gbit,omitempty"`
	Copies              *int               `json:"copies_per_super_packet,omitempty"`
	CPU                 []CoreUsage        `json:"cpu"`
	Extra               map[string]float64 `json:"extra,omitempty"`
	Runs                []runResult        `json:"runs"`
	Errors              []string           `json:"errors"`
}

// jsonValue is a ratio's value and the range of its per-run values.
type jsonValue struct {
	Value *float64 `json:"value"`
	Min   *float64 `json:"min,omitempty"`
	Max   *float64 `json:"max,omitempty"`
}

type jsonRatio struct {
	Key  string `json:"key"`
	Text string `json:"text"`
	jsonValue
	Shown string `json:"shown"`
}

type jsonTarget struct {
	Scenario  string  `json:"scenario"`
	Ratio     string  `json:"ratio"`
	Aim       string  `json:"aim"`
	Op        string  `json:"op"`
	Threshold float64 `json:"threshold"`
	jsonValue
	Row    *jsonOperand `json:"row"`
	Peer   *jsonOperand `json:"peer"`
	Status status       `json:"status"`
}

type jsonOperand struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
}

func (r *report) json() jsonReport {
	out := jsonReport{
		SchemaVersion: schemaVersion, Gsoplane: r.build, GoVersion: r.machine.goVersion,
		Kernel: r.machine.kernel, CPUModel: r.machine.cpuModel, CPUCount: r.machine.cpus, Host: r.machine.host,
		Started: r.started.Format(time.RFC3339), Flags: r.opts.flagMap(),
		Scenarios: []jsonScenario{}, Targets: []jsonTarget{},
	}
	for _, s := range r.scenarios {
		js := jsonScenario{Name: s.name, Title: s.title, Rows: []jsonRow{}, Ratios: []jsonRatio{}, Notes: s.notes}
		if js.Notes == nil {
			js.Notes = []string{}
		}
		for _, row := range s.rows {
			js.Rows = append(js.Rows, rowJSON(s.name, row))
		}
		for _, q := range s.ratios {
			js.Ratios = append(js.Ratios, jsonRatio{Key: q.Key, Text: q.Text, jsonValue: valueJSON(q), Shown: q.String()})
		}
		out.Scenarios = append(out.Scenarios, js)
	}
	for _, t := range judgeAll(r.scenarios) {
		out.Targets = append(out.Targets, targetJSON(t))
	}
	return out
}

// rowJSON is a row's median run with the range of its main metrics, and
// every run.
func rowJSON(scenario string, row *rowResult) jsonRow {
	med, _, _, _ := row.median()
	j := jsonRow{
		Name: row.spec.name, Product: row.spec.product, MainMetric: "throughput_bps",
		ThroughputBps: med.ThroughputBps, PPS: med.PPS,
		Sent: med.Sent, SentUnit: row.spec.units.sent, Received: med.Received, ReceivedUnit: row.spec.units.received,
		Drops: med.Drops, SendErrors: med.SendErrors, Lost: med.Lost, SegsPerRead: med.SegsPerRead, WritesPerPkt: med.WritesPerPkt,
		ReverseBps: med.ReverseBps, DgramsPerSend: med.DgramsPerSend, DgramsPerRecv: med.DgramsPerRecv,
		GatewayCoresPerGbit: med.GatewayCoresPerGbit, BusyCoresPerGbit: med.BusyCoresPerGbit, Copies: row.spec.copies,
		CPU: rowCPU(row), Extra: med.Extra, Runs: row.runs, Errors: row.errs,
	}
	if med.ReverseBps > 0 {
		j.ForwardMedianBps, j.ReverseMedianBps = row.directionMedian(false), row.directionMedian(true)
	}
	if row.spec.ppsMain {
		j.MainMetric = "pps"
	}
	j.ThroughputMin, j.ThroughputMax = metricRange(row, func(r runResult) float64 { return r.main(false) })
	j.PPSMin, j.PPSMax = metricRange(row, func(r runResult) float64 { return r.main(true) })
	if scenario == "backpressure" {
		msgs, good := med.RxMessages, med.GoodputBps
		j.RxMessages, j.GoodputBps = &msgs, &good
	}
	if row.spec.retrans {
		v := med.Retransmits
		j.Retransmits = &v
	}
	if j.Runs == nil {
		j.Runs = []runResult{}
	}
	if j.CPU == nil {
		j.CPU = []CoreUsage{}
	}
	if j.Errors == nil {
		j.Errors = []string{}
	}
	return j
}

// metricRange is the least and the greatest of a figure of the row's
// runs, 0 and 0 without a run.
func metricRange(row *rowResult, metric func(runResult) float64) (lo, hi float64) {
	for i, run := range row.runs {
		v := metric(run)
		if i == 0 {
			lo, hi = v, v
		}
		lo, hi = min(lo, v), max(hi, v)
	}
	return lo, hi
}

func targetJSON(t targetResult) jsonTarget {
	j := jsonTarget{Scenario: t.scenario, Ratio: t.key, Aim: t.aim, Op: ">=", Threshold: t.threshold, Status: t.status}
	if t.atMost {
		j.Op = "<="
	}
	if q := t.ratio; q != nil {
		j.jsonValue = valueJSON(*q)
		j.Row = &jsonOperand{q.A.Name, q.A.Value, q.A.Unit}
		j.Peer = &jsonOperand{q.B.Name, q.B.Value, q.B.Unit}
	}
	return j
}

// finite is v, or nil for an infinity or NaN (JSON has neither).
func finite(v float64) *float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return nil
	}
	return &v
}

// valueJSON is q's value, with its per-run range when it has one.
func valueJSON(q ratio) jsonValue {
	v := jsonValue{Value: finite(q.Value)}
	if q.Hi > 0 {
		v.Min, v.Max = finite(q.Lo), finite(q.Hi)
	}
	return v
}

func (r *report) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r.json())
}

// saveJSON writes the JSON report to path.
func (r *report) saveJSON(path string) error { return saveFile(path, "results", r.writeJSON) }

// saveFile creates path and writes it with write.
func saveFile(path, what string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("save %s: %w", what, err)
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("save %s to %s: %w", what, path, err)
	}
	return nil
}
