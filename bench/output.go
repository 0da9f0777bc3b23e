package main

// Results: plain-text tables with the ratios spelt out, and JSON (one
// object per row, one ratios object per scenario).

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"
)

// ratio compares two rows (or states one fact about a scenario).
type ratio struct {
	Key    string
	Text   string
	Value  float64 // a/b, or a fraction when Pct
	Lo, Hi float64 // range of the per-run (paired) ratios, if known
	Pct    bool    // Value is a fraction, shown as a percentage
	Delta  bool    // Value is a ratio, shown as its difference from 1 in percent
	Show   string  // shown instead of Value, when set
	// Target, if set, is the least Value the row is meant to reach; the
	// table says whether its median did (never asserted: the bench
	// reports, it does not judge a shared machine's numbers).
	Target float64
	// Ceiling, if set, is the most Value is meant to be (a spread, a
	// cost), reported as Target is.
	Ceiling float64
}

// missed reports whether the median missed the target or the ceiling.
func (r ratio) missed() bool {
	return r.Target > 0 && r.Value < r.Target || r.Ceiling > 0 && r.Value > r.Ceiling
}

// verdict says whether the ratio reached its target (or stayed under its
// ceiling), or "" without one.
func (r ratio) verdict() string {
	if r.Target <= 0 && r.Ceiling <= 0 {
		return ""
	}
	s := "met"
	switch {
	case r.missed():
		s = "MISSED"
	case r.Hi > 0 && (r.Target > 0 && r.Lo < r.Target || r.Ceiling > 0 && r.Hi > r.Ceiling):
		s = "met by the median, not by every run"
	}
	return fmt.Sprintf("target %s: %s", r.bound(), s)
}

// bound is the target or ceiling as the value is shown.
func (r ratio) bound() string {
	op, v := "≥", r.Target
	if r.Ceiling > 0 {
		op, v = "≤", r.Ceiling
	}
	switch {
	case r.Show != "":
		return fmt.Sprintf("%s %g", op, v)
	case r.Delta:
		return fmt.Sprintf("%s %+.2f%%", op, (v-1)*100)
	case r.Pct:
		return fmt.Sprintf("%s %.1f%%", op, v*100)
	}
	return fmt.Sprintf("%s %.2f×", op, v)
}

func (r ratio) String() string {
	switch {
	case r.Show != "":
		return r.Show
	case math.IsInf(r.Value, 0) || math.IsNaN(r.Value):
		return "∞"
	case r.Delta:
		s := fmt.Sprintf("%+.2f%%", (r.Value-1)*100)
		if r.Hi > 0 {
			s += fmt.Sprintf(" (per run %+.2f%% to %+.2f%%)", (r.Lo-1)*100, (r.Hi-1)*100)
		}
		return s
	case r.Pct:
		return fmt.Sprintf("%.1f%%", r.Value*100)
	}
	s := fmt.Sprintf("%.2f×", r.Value)
	if r.Hi > 0 {
		s += fmt.Sprintf(" (per run %.2f–%.2f×)", r.Lo, r.Hi)
	}
	return s
}

// findRow returns the row called name, or nil when it has no run.
func findRow(rows []*rowResult, name string) *rowResult {
	for _, r := range rows {
		if r.spec.name == name && len(r.runs) > 0 {
			return r
		}
	}
	return nil
}

// ratioSpec names a throughput ratio a/b between two rows, with its
// target (0: none).
type ratioSpec struct {
	a, b, text string
	target     float64
}

// throughputRatios computes the ratios of specs whose rows both ran, of
// their throughput, or of their pps where both rows rank by it.
func throughputRatios(rows []*rowResult, specs []ratioSpec) []ratio {
	var out []ratio
	for _, c := range specs {
		if a, b := findRow(rows, c.a), findRow(rows, c.b); a != nil && b != nil {
			q := ratioOf(c.a+"/"+c.b, c.text, a, b, a.spec.ppsMain && b.spec.ppsMain)
			q.Target = c.target
			out = append(out, q)
		}
	}
	return out
}

// ratioOf is a's median main metric over b's, with the range of the
// ratios of runs measured side by side (run i of a with run i of b).
func ratioOf(key, text string, a, b *rowResult, pps bool) ratio {
	ma, _, _, _ := a.median()
	mb, _, _, _ := b.median()
	q := ratio{Key: key, Text: text}
	if d := mb.main(pps); d > 0 {
		q.Value = ma.main(pps) / d
	}
	for i := range min(len(a.runs), len(b.runs)) {
		d := b.runs[i].main(pps)
		if d <= 0 {
			continue
		}
		v := a.runs[i].main(pps) / d
		if q.Hi == 0 || v < q.Lo {
			q.Lo = v
		}
		q.Hi = max(q.Hi, v)
	}
	if len(a.runs) < 2 || len(b.runs) < 2 {
		q.Lo, q.Hi = 0, 0 // one pair: no range to speak of
	}
	return q
}

// report gathers every scenario's results.
type report struct {
	opts      options
	started   time.Time
	scenarios []scenarioResult
}

type scenarioResult struct {
	name, title string
	rows        []*rowResult
	ratios      []ratio
	notes       []string
}

func newReport(o options) *report { return &report{opts: o, started: time.Now()} }

// add records a scenario with its notes and, for a ratio that missed its
// target, one saying so.
func (r *report) add(name, title string, rows []*rowResult, ratios []ratio, notes []string) {
	for _, q := range ratios {
		if q.missed() {
			notes = append(notes[:len(notes):len(notes)], fmt.Sprintf("target missed: %s = %s, the target is %s (%s)", q.Key, q, q.bound(), q.Text))
		}
	}
	r.scenarios = append(r.scenarios, scenarioResult{name, title, rows, ratios, notes})
}

// failed reports whether some row has a failed run or none at all.
func (r *report) failed() bool {
	for _, s := range r.scenarios {
		for _, row := range s.rows {
			if len(row.errs) > 0 || len(row.runs) == 0 {
				return true
			}
		}
	}
	return false
}

// machine describes where the numbers come from.
func machine() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s, %d cores, %s, %s", host, runtime.NumCPU(), kernelRelease(), runtime.Version())
}

// writeText prints one table per scenario, then its ratios and notes.
func (r *report) writeText(w io.Writer, verbose bool) {
	m := r.opts.measure
	fmt.Fprintf(w, "gsoplane bench, %s on %s\n", r.started.Format("2006-01-02 15:04 MST"), machine())
	fmt.Fprintf(w, "each row: median of %d runs of %v (after %v warm-up), [min–max] over the runs; CPU = busy %% per core (100 − idle − iowait, /proc/stat)\n",
		m.runs, m.duration, m.warmup)
	for _, s := range r.scenarios {
		fmt.Fprintf(w, "\n== %s\n", s.title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		cols := columnsFor(s.name)
		heads := make([]string, len(cols))
		for i, c := range cols {
			heads[i] = c.head
		}
		fmt.Fprintln(tw, strings.Join(heads, "\t")+"\t")
		for _, row := range s.rows {
			med, lo, hi, ok := row.median()
			cells := make([]string, len(cols))
			for i, c := range cols {
				if !ok && i > 0 {
					cells[i] = "—"
					continue
				}
				cells[i] = c.cell(row, med, lo, hi)
			}
			fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
		}
		tw.Flush()
		for _, q := range s.ratios {
			if v := q.verdict(); v != "" {
				fmt.Fprintf(w, "  %s = %s   (%s; %s)\n", q.Key, q, q.Text, v)
				continue
			}
			fmt.Fprintf(w, "  %s = %s   (%s)\n", q.Key, q, q.Text)
		}
		for _, row := range s.rows {
			for _, e := range row.errs {
				fmt.Fprintf(w, "  %s: run failed: %s\n", row.spec.name, e)
			}
		}
		for _, n := range s.notes {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
		if verbose {
			writeSar(w, s)
		}
	}
}

// writeSar prints sar's per-core "Average:" block for each row.
func writeSar(w io.Writer, s scenarioResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "  Average:\trow\tCPU\t%%user\t%%nice\t%%system\t%%iowait\t%%irq\t%%soft\t%%steal\t%%idle\t\n")
	for _, row := range s.rows {
		for _, c := range rowCPU(row) {
			fmt.Fprintf(tw, "  Average:\t%s\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", row.spec.name,
				strings.TrimPrefix(c.CPU, "cpu"), c.User, c.Nice, c.System, c.IOWait, c.IRQ, c.SoftIRQ, c.Steal, c.Idle)
		}
	}
	tw.Flush()
}

// rowCPU is the row's per-core utilisation averaged over its runs.
func rowCPU(row *rowResult) []CoreUsage {
	var all [][]CoreUsage
	for _, r := range row.runs {
		all = append(all, r.CPU)
	}
	return meanUsage(all)
}

// column is one column of a scenario's table.
type column struct {
	head string
	cell func(row *rowResult, med runResult, lo, hi float64) string
}

func columnsFor(scenario string) []column {
	name := column{"row", func(r *rowResult, _ runResult, _, _ float64) string { return r.spec.name }}
	mbps := column{"Mbit/s [min–max]", func(r *rowResult, m runResult, lo, hi float64) string {
		if r.spec.ppsMain {
			return fmt.Sprintf("%.0f", m.ThroughputBps/1e6)
		}
		return fmt.Sprintf("%.0f [%.0f–%.0f]", m.ThroughputBps/1e6, lo/1e6, hi/1e6)
	}}
	mpps := column{"Mpps", func(r *rowResult, m runResult, lo, hi float64) string {
		if r.spec.ppsMain {
			return fmt.Sprintf("%.3f [%.3f–%.3f]", m.PPS/1e6, lo/1e6, hi/1e6)
		}
		return fmt.Sprintf("%.3f", m.PPS/1e6)
	}}
	sent := column{"sent", func(r *rowResult, m runResult, _, _ float64) string { return count(m.Sent, r.spec.units.sent) }}
	errs := column{"send errors", func(_ *rowResult, m runResult, _, _ float64) string { return fmt.Sprint(m.SendErrors) }}
	recv := column{"received", func(r *rowResult, m runResult, _, _ float64) string { return count(m.Received, r.spec.units.received) }}
	drops := column{"drops", func(_ *rowResult, m runResult, _, _ float64) string { return fmt.Sprint(m.Drops) }}
	lost := column{"lost", func(_ *rowResult, m runResult, _, _ float64) string {
		if m.Lost == nil {
			return "—"
		}
		return fmt.Sprint(*m.Lost)
	}}
	retrans := column{"retrans", func(_ *rowResult, m runResult, _, _ float64) string { return fmt.Sprint(m.Retransmits) }}
	spr := column{"segs/read", func(_ *rowResult, m runResult, _, _ float64) string {
		if m.SegsPerRead == 0 {
			return "—"
		}
		return fmt.Sprintf("%.1f", m.SegsPerRead)
	}}
	wpp := column{"writes/pkt", func(_ *rowResult, m runResult, _, _ float64) string {
		if m.WritesPerPkt == 0 {
			return "—"
		}
		return fmt.Sprintf("%.3f", m.WritesPerPkt)
	}}
	cpu := column{"CPU busy/core", func(r *rowResult, _ runResult, _, _ float64) string {
		var parts []string
		for _, c := range rowCPU(r) {
			parts = append(parts, fmt.Sprintf("%.0f%%", c.Busy()))
		}
		return strings.Join(parts, " ")
	}}
	switch scenario {
	case "backpressure":
		msgs := column{"recv msgs", func(_ *rowResult, m runResult, _, _ float64) string { return fmt.Sprint(m.RxMessages) }}
		good := column{"msg goodput Mbit/s", func(_ *rowResult, m runResult, _, _ float64) string { return fmt.Sprintf("%.0f", m.GoodputBps/1e6) }}
		sent.head, recv.head, mbps.head = "sent msgs", "recv dgrams", "rx Mbit/s [min–max]"
		return []column{name, sent, errs, msgs, recv, mbps, good, drops, lost, cpu}
	case "hook", "xdphook":
		return []column{name, mpps, mbps, sent, errs, recv, drops, cpu}
	case "gro":
		spr.head = "pkts/write"
		return []column{name, mbps, retrans, mpps, spr, wpp, drops, cpu}
	default:
		return []column{name, mbps, retrans, mpps, spr, wpp, drops, cpu}
	}
}

// count formats n with its unit.
func count(n uint64, unit string) string {
	if unit == "bytes" {
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	}
	return fmt.Sprint(n)
}

// JSON output.

type jsonReport struct {
	Date     string                        `json:"date"`
	Machine  string                        `json:"machine"`
	Cores    int                           `json:"cores"`
	Duration string                        `json:"duration"`
	Warmup   string                        `json:"warmup"`
	Runs     int                           `json:"runs"`
	LineRate int64                         `json:"line_rate_bps"`
	Rows     []jsonRow                     `json:"rows"`
	Ratios   map[string]map[string]float64 `json:"ratios"`
	Notes    map[string][]string           `json:"notes,omitempty"`
}

type jsonRow struct {
	Scenario      string             `json:"scenario"`
	Row           string             `json:"row"`
	Runs          int                `json:"runs"`
	ThroughputBps float64            `json:"throughput_bps"`
	ThroughputMin float64            `json:"throughput_min_bps"`
	ThroughputMax float64            `json:"throughput_max_bps"`
	PPS           float64            `json:"pps"`
	PPSMin        float64            `json:"pps_min"`
	PPSMax        float64            `json:"pps_max"`
	Sent          uint64             `json:"sent"`
	SentUnit      string             `json:"sent_unit"`
	Received      uint64             `json:"received"`
	ReceivedUnit  string             `json:"received_unit"`
	RxMessages    *uint64            `json:"received_messages,omitempty"`
	GoodputBps    *float64           `json:"goodput_bps,omitempty"`
	Drops         uint64             `json:"drops"`
	SendErrors    uint64             `json:"send_errors"`
	Retransmits   *uint64            `json:"retransmits,omitempty"`
	Lost          *int64             `json:"lost,omitempty"`
	SegsPerRead   float64            `json:"segments_per_read,omitempty"`
	WritesPerPkt  float64            `json:"writes_per_packet,omitempty"`
	CPU           []CoreUsage        `json:"cpu"`
	Extra         map[string]float64 `json:"extra,omitempty"`
	PerRun        []runResult        `json:"per_run"`
	Errors        []string           `json:"errors,omitempty"`
}

func (r *report) json() jsonReport {
	m := r.opts.measure
	out := jsonReport{
		Date: r.started.Format(time.RFC3339), Machine: machine(), Cores: runtime.NumCPU(),
		Duration: m.duration.String(), Warmup: m.warmup.String(), Runs: m.runs, LineRate: r.opts.lineRate,
		Rows: []jsonRow{}, Ratios: map[string]map[string]float64{}, Notes: map[string][]string{},
	}
	for _, s := range r.scenarios {
		for _, row := range s.rows {
			med, lo, hi, _ := row.median()
			j := jsonRow{
				Scenario: s.name, Row: row.spec.name, Runs: len(row.runs),
				ThroughputBps: med.ThroughputBps, PPS: med.PPS,
				Sent: med.Sent, SentUnit: row.spec.units.sent, Received: med.Received, ReceivedUnit: row.spec.units.received,
				Drops: med.Drops, SendErrors: med.SendErrors, Lost: med.Lost, SegsPerRead: med.SegsPerRead, WritesPerPkt: med.WritesPerPkt,
				CPU: rowCPU(row), Extra: med.Extra, PerRun: row.runs, Errors: row.errs,
			}
			if j.PerRun == nil {
				j.PerRun = []runResult{}
			}
			if j.CPU == nil {
				j.CPU = []CoreUsage{}
			}
			j.ThroughputMin, j.ThroughputMax, j.PPSMin, j.PPSMax = med.ThroughputBps, med.ThroughputBps, med.PPS, med.PPS
			if row.spec.ppsMain {
				j.PPSMin, j.PPSMax = lo, hi
			} else {
				j.ThroughputMin, j.ThroughputMax = lo, hi
			}
			for _, run := range row.runs {
				if row.spec.ppsMain {
					j.ThroughputMin, j.ThroughputMax = min(j.ThroughputMin, run.ThroughputBps), max(j.ThroughputMax, run.ThroughputBps)
				} else {
					j.PPSMin, j.PPSMax = min(j.PPSMin, run.PPS), max(j.PPSMax, run.PPS)
				}
			}
			if s.name == "backpressure" {
				msgs, good := med.RxMessages, med.GoodputBps
				j.RxMessages, j.GoodputBps = &msgs, &good
			}
			if row.spec.retrans {
				v := med.Retransmits
				j.Retransmits = &v
			}
			out.Rows = append(out.Rows, j)
		}
		q := map[string]float64{}
		for _, x := range s.ratios {
			if math.IsInf(x.Value, 0) || math.IsNaN(x.Value) {
				continue // JSON has no infinity; the text table says it
			}
			q[x.Key] = x.Value
			if x.Hi > 0 {
				q[x.Key+" min"], q[x.Key+" max"] = x.Lo, x.Hi
			}
			if x.Target > 0 {
				q[x.Key+" target"] = x.Target
			}
			if x.Ceiling > 0 {
				q[x.Key+" ceiling"] = x.Ceiling
			}
		}
		out.Ratios[s.name] = q
		out.Notes[s.name] = s.notes
	}
	return out
}

func (r *report) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r.json())
}

func (r *report) saveJSON(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("save results: %w", err)
	}
	err = r.writeJSON(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("save results to %s: %w", path, err)
	}
	return nil
}
