package main

// Results as text: a header saying what was measured, one table per
// scenario with the ratios that explain it, and the targets block.

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"
)

// ratio compares two rows (or states one fact about a scenario).
type ratio struct {
	Key    string
	Text   string
	Value  float64 // A/B, in the terms of Form
	Lo, Hi float64 // range of the per-run (paired) ratios, if known
	Form   form
	Show   string  // shown instead of Value, when set
	A, B   operand // the figures divided, when Value is a ratio of two
}

// form is how a ratio is shown.
type form int

const (
	times   form = iota // a ratio: 1.23×
	percent             // a fraction: 12.3%
	delta               // a ratio, as its difference from 1: +1.23%
)

// format shows v in the form.
func (f form) format(v float64) string {
	switch {
	case math.IsInf(v, 0) || math.IsNaN(v):
		return "∞"
	case f == delta:
		return fmt.Sprintf("%+.2f%%", (v-1)*100)
	case f == percent:
		return fmt.Sprintf("%.1f%%", v*100)
	}
	return fmt.Sprintf("%.2f×", v)
}

func (r ratio) String() string {
	switch {
	case r.Show != "":
		return r.Show
	case r.Hi <= 0 || math.IsInf(r.Value, 0) || math.IsNaN(r.Value):
		return r.Form.format(r.Value)
	case r.Form == times:
		return fmt.Sprintf("%s (per run %.2f–%.2f×)", r.Form.format(r.Value), r.Lo, r.Hi)
	}
	return fmt.Sprintf("%s (per run %s to %s)", r.Form.format(r.Value), r.Form.format(r.Lo), r.Form.format(r.Hi))
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

// ratioSpec names a throughput ratio a/b between two rows.
type ratioSpec struct{ a, b, text string }

// throughputRatios computes the ratios of specs whose rows both ran, of
// their throughput, or of their pps where both rows rank by it.
func throughputRatios(rows []*rowResult, specs []ratioSpec) []ratio {
	var out []ratio
	for _, c := range specs {
		if a, b := findRow(rows, c.a), findRow(rows, c.b); a != nil && b != nil {
			out = append(out, ratioOf(c.a+"/"+c.b, c.text, a, b, a.spec.ppsMain && b.spec.ppsMain))
		}
	}
	return out
}

// ratioOf is a's median main metric over b's, with the range of the
// ratios of runs measured side by side (run i of a with run i of b).
func ratioOf(key, text string, a, b *rowResult, pps bool) ratio {
	unit := "bit/s"
	if pps {
		unit = "pps"
	}
	return ratioBy(key, text, a, b, unit, func(r runResult) float64 { return r.main(pps) })
}

// directionRatio is a's throughput in one direction (rev: B→A) over b's,
// each the median of its row's runs that way.
func directionRatio(key, text string, a, b *rowResult, rev bool) ratio {
	va, vb := a.directionMedian(rev), b.directionMedian(rev)
	q := ratio{Key: key, Text: text, A: operand{a.spec.name, va, "bit/s"}, B: operand{b.spec.name, vb, "bit/s"}}
	if vb > 0 {
		q.Value = va / vb
	}
	return q
}

// costRatios computes the ratios of specs whose rows both ran, of the
// gateway's cores per Gbit/s of their median runs.
func costRatios(rows []*rowResult, specs []ratioSpec) []ratio {
	var out []ratio
	for _, c := range specs {
		if a, b := findRow(rows, c.a), findRow(rows, c.b); a != nil && b != nil {
			out = append(out, ratioBy(c.a+"/"+c.b+" cores/Gbit", c.text, a, b, coresPerGbit,
				func(r runResult) float64 { return r.GatewayCoresPerGbit }))
		}
	}
	return out
}

// coresPerGbit is the unit of a cost operand.
const coresPerGbit = "cores/Gbit"

// ratioBy is metric of a's median run over b's, with the range of the
// ratios of runs measured side by side (run i of a with run i of b).
func ratioBy(key, text string, a, b *rowResult, unit string, metric func(runResult) float64) ratio {
	ma, _, _, _ := a.median()
	mb, _, _, _ := b.median()
	q := ratio{Key: key, Text: text, A: operand{a.spec.name, metric(ma), unit}, B: operand{b.spec.name, metric(mb), unit}}
	if d := metric(mb); d > 0 {
		q.Value = metric(ma) / d
	}
	for i := range min(len(a.runs), len(b.runs)) {
		d := metric(b.runs[i])
		if d <= 0 {
			continue
		}
		v := metric(a.runs[i]) / d
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
	build     build
	machine   machine
	scenarios []scenarioResult
}

type scenarioResult struct {
	name, title string
	rows        []*rowResult
	ratios      []ratio
	notes       []string
}

func newReport(o options) *report {
	return &report{opts: o, started: time.Now(), build: readBuild(), machine: readMachine()}
}

// add records a scenario with its ratios and notes.
func (r *report) add(name, title string, rows []*rowResult, ratios []ratio, notes []string) {
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

// header is the lines that say what was measured, where and how.
func (r *report) header() []string {
	m := r.opts.measure
	return []string{
		"gsoplane bench, " + r.started.Format("2006-01-02 15:04 MST"),
		"gsoplane " + r.build.String(),
		"machine: " + r.machine.String(),
		"flags: " + r.opts.setFlags(),
		fmt.Sprintf("each row: median of %d runs of %v (after %v warm-up), [min–max] over the runs; CPU = busy %% per core (100 − idle − iowait, /proc/stat)",
			m.runs, m.duration, m.warmup),
		"gw cores/Gbit = the gateway's CPU time (the bench process's, less its traffic threads') per second, per Gbit/s of the row's",
		"  throughput; busy cores/Gbit = the machine's busy cores (CPU) per Gbit/s; copies = copies of each super-packet's payload",
		"  on the row's path, the sender's and the receiver's own not counted (docs/bench-json.md)",
	}
}

// writeText prints one table per scenario with its ratios and notes, then
// the targets.
func (r *report) writeText(w io.Writer, verbose bool) {
	fmt.Fprintln(w, strings.Join(r.header(), "\n"))
	for _, s := range r.scenarios {
		fmt.Fprintf(w, "\n== %s\n", s.title)
		heads, cells := s.table()
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(heads, "\t")+"\t")
		for _, row := range cells {
			fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
		}
		tw.Flush()
		for _, q := range s.explanatory() {
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
	writeTargets(w, judgeAll(r.scenarios))
}

// table is the scenario's table: the column heads and a row of cells per
// row ("—" where a row has no run).
func (s scenarioResult) table() (heads []string, cells [][]string) {
	cols := columnsFor(s.name)
	for _, c := range cols {
		heads = append(heads, c.head)
	}
	for _, row := range s.rows {
		med, lo, hi, ok := row.median()
		line := make([]string, len(cols))
		for i, c := range cols {
			line[i] = "—"
			if ok || i == 0 {
				line[i] = c.cell(row, med, lo, hi)
			}
		}
		cells = append(cells, line)
	}
	return heads, cells
}

// explanatory is the scenario's ratios that are not targets (those are
// shown in the targets block).
func (s scenarioResult) explanatory() []ratio {
	var out []ratio
	for _, q := range s.ratios {
		if !isTarget(s.name, q.Key) {
			out = append(out, q)
		}
	}
	return out
}

// targetHeads are the columns of the targets block.
var targetHeads = []string{"scenario", "ratio", "value", "row / peer", "target", "result", "aim"}

// cells is a target's line in the targets block.
func (r targetResult) cells() []string {
	return []string{r.scenario, r.key, r.value(), r.operands(), r.bound(), r.status.String(), r.aim}
}

// writeTargets prints the targets block.
func writeTargets(w io.Writer, results []targetResult) {
	if len(results) == 0 {
		return
	}
	fmt.Fprintln(w, "\n== targets: each a ratio of a row to its peer in this run, against the project's target")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(targetHeads, "\t")+"\t")
	for _, t := range results {
		fmt.Fprintln(tw, strings.Join(t.cells(), "\t")+"\t")
	}
	tw.Flush()
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
	name := column{"row", func(r *rowResult, _ runResult, _, _ float64) string { return r.spec.label() }}
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
	cost := costColumns()
	switch scenario {
	case "backpressure":
		msgs := column{"recv msgs", func(_ *rowResult, m runResult, _, _ float64) string { return fmt.Sprint(m.RxMessages) }}
		good := column{"msg goodput Mbit/s", func(_ *rowResult, m runResult, _, _ float64) string { return fmt.Sprintf("%.0f", m.GoodputBps/1e6) }}
		sent.head, recv.head, mbps.head = "sent msgs", "recv dgrams", "rx Mbit/s [min–max]"
		return append([]column{name, sent, errs, msgs, recv, mbps, good, drops, lost, cpu}, cost...)
	case "hook", "xdphook":
		return append([]column{name, mpps, mbps, sent, errs, recv, drops, cpu}, cost...)
	case "tunnel", "wireguard":
		return append([]column{name, mbps, direction("A→B Mbit/s", false), direction("B→A Mbit/s", true), retrans,
			perCall("dgrams/send", func(m runResult) float64 { return m.DgramsPerSend }),
			perCall("dgrams/recv", func(m runResult) float64 { return m.DgramsPerRecv }), cpu}, cost...)
	case "gro":
		spr.head = "pkts/write"
		return append([]column{name, mbps, retrans, mpps, spr, wpp, drops, cpu}, cost...)
	default:
		return append([]column{name, mbps, retrans, mpps, spr, wpp, drops, cpu}, cost...)
	}
}

// costColumns are what a row's throughput costs: the gateway's cores
// and the machine's busy cores per Gbit/s, and the copies of each
// super-packet on its path.
func costColumns() []column {
	perGbit := func(v float64) string {
		if v == 0 {
			return "—"
		}
		return fmt.Sprintf("%.3f", v)
	}
	return []column{
		{"gw cores/Gbit", func(_ *rowResult, m runResult, _, _ float64) string { return perGbit(m.GatewayCoresPerGbit) }},
		{"busy cores/Gbit", func(_ *rowResult, m runResult, _, _ float64) string { return perGbit(m.BusyCoresPerGbit) }},
		{"copies", func(r *rowResult, _ runResult, _, _ float64) string {
			if r.spec.copies == nil {
				return "—"
			}
			return fmt.Sprint(*r.spec.copies)
		}},
	}
}

// direction is the column of a tunnel row's throughput one way, the
// median of its runs that way.
func direction(head string, rev bool) column {
	return column{head, func(r *rowResult, _ runResult, _, _ float64) string {
		return fmt.Sprintf("%.0f", r.directionMedian(rev)/1e6)
	}}
}

// perCall is a column of datagrams per system call, "—" where unknown.
func perCall(head string, f func(runResult) float64) column {
	return column{head, func(_ *rowResult, m runResult, _, _ float64) string {
		if f(m) == 0 {
			return "—"
		}
		return fmt.Sprintf("%.1f", f(m))
	}}
}

// count formats n with its unit.
func count(n uint64, unit string) string {
	if unit == "bytes" {
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	}
	return fmt.Sprint(n)
}
