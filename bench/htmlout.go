package main

// Results as one self-contained HTML file (-html): the header, per
// scenario its table, bar charts of its main metric and of its CPU cost
// per Gbit/s (the product's row in its own colour, beside the floor and
// the kernel), its ratios, and the targets. Inline CSS and SVG only: no script, nothing fetched.

import (
	"fmt"
	"html/template"
	"io"
	"strings"
)

// htmlPage is what the template renders.
type htmlPage struct {
	Title     string   // the header's first line
	Header    []string // its other lines
	Scenarios []htmlScenario
	Targets   []htmlTarget
	Heads     []string // of the targets table
}

type htmlScenario struct {
	Name, Title string
	Heads       []string
	Cells       [][]string
	Charts      []barChart
	Ratios      []ratio
	Errors      []string
	Notes       []string
}

type htmlTarget struct {
	Class string // met, median, missed or none
	Cells []string
}

// barChart is a horizontal bar per row: the median, with a whisker from
// the least to the greatest run where there are several.
type barChart struct {
	Label                 string // the metric and its unit
	Width, Height, LabelW int
	BarW                  int // the width of the largest value
	Bars                  []bar
	AxisX, AxisY          int
}

type bar struct {
	Name, Value string
	Y, W        int
	Whisker     bool
	Product     bool // the product's row: drawn in its own colour
	Lo, Hi      int  // x of the whisker's ends
	TextX       int  // x of the value's label
}

// Chart geometry, in pixels.
const (
	chartWidth  = 760
	chartLabelW = 180
	chartValueW = 90
	chartRowH   = 24
)

// chartMetric is what a bar chart plots: a figure of a row's runs.
type chartMetric struct {
	label  string // the metric and its unit
	format string // of a value, once scaled
	scale  float64
	value  func(r runResult) float64
}

// chartsOf are the scenario's bar charts: its main metric (pps if its
// first row ranks by pps, else throughput), then what it costs, the
// gateway's cores and the machine's busy cores per Gbit/s.
func chartsOf(s scenarioResult) []barChart {
	pps := len(s.rows) > 0 && s.rows[0].spec.ppsMain
	main := chartMetric{"Mbit/s", "%.0f", 1e6, func(r runResult) float64 { return r.main(false) }}
	if pps {
		main = chartMetric{"Mpps", "%.3f", 1e6, func(r runResult) float64 { return r.main(true) }}
	}
	return []barChart{
		chartOf(s, main),
		chartOf(s, chartMetric{"gateway cores per Gbit/s", "%.3f", 1, func(r runResult) float64 { return r.GatewayCoresPerGbit }}),
		chartOf(s, chartMetric{"busy cores per Gbit/s (the whole machine)", "%.3f", 1, func(r runResult) float64 { return r.BusyCoresPerGbit }}),
	}
}

// chartOf is the bar chart of m: per row its median run's (the run
// of the median main metric), whiskers from the least to the greatest
// run.
func chartOf(s scenarioResult, m chartMetric) barChart {
	c := barChart{Label: m.label + ": median run; whiskers: least to greatest run", Width: chartWidth, LabelW: chartLabelW,
		BarW: chartWidth - chartLabelW - chartValueW}
	top := 0.0
	for _, row := range s.rows {
		_, hi := metricRange(row, m.value)
		top = max(top, hi)
	}
	x := func(v float64) int {
		if top <= 0 {
			return 0
		}
		return int(v / top * float64(c.BarW))
	}
	for i, row := range s.rows {
		med, _, _, ok := row.median()
		lo, hi := metricRange(row, m.value)
		b := bar{Name: row.spec.label(), Value: "no run", Y: i * chartRowH, W: x(m.value(med)), Whisker: len(row.runs) > 1,
			Lo: c.LabelW + x(lo), Hi: c.LabelW + x(hi), Product: row.spec.product}
		switch {
		case ok && m.value(med) == 0:
			b.Value, b.Whisker = "—", false
		case ok:
			b.Value = fmt.Sprintf(m.format, m.value(med)/m.scale)
		}
		b.TextX = c.LabelW + max(b.W, x(hi)) + 6
		c.Bars = append(c.Bars, b)
	}
	c.AxisX, c.AxisY = c.LabelW, len(s.rows)*chartRowH
	c.Height = c.AxisY + 22
	return c
}

func (r *report) html() htmlPage {
	header := r.header()
	p := htmlPage{Title: header[0], Header: header[1:], Heads: targetHeads}
	for _, s := range r.scenarios {
		h := htmlScenario{Name: s.name, Title: s.title, Charts: chartsOf(s), Ratios: s.explanatory(), Notes: joinNotes(s.notes)}
		h.Heads, h.Cells = s.table()
		for _, row := range s.rows {
			for _, e := range row.errs {
				h.Errors = append(h.Errors, row.spec.name+": run failed: "+e)
			}
		}
		p.Scenarios = append(p.Scenarios, h)
	}
	for _, t := range judgeAll(r.scenarios) {
		p.Targets = append(p.Targets, htmlTarget{Class: statusClass[t.status], Cells: t.cells()})
	}
	return p
}

// joinNotes joins each note's continuation lines (indented, in the text
// output) to it.
func joinNotes(notes []string) []string {
	var out []string
	for _, n := range notes {
		if rest, ok := strings.CutPrefix(n, "  "); ok && len(out) > 0 {
			out[len(out)-1] += " " + strings.TrimSpace(rest)
			continue
		}
		out = append(out, n)
	}
	return out
}

// statusClass is the CSS class of each status.
var statusClass = map[status]string{met: "met", metByMedian: "median", missed: "missed", notMeasured: "none"}

func (r *report) writeHTML(w io.Writer) error { return htmlTemplate.Execute(w, r.html()) }

// saveHTML writes the HTML report to path.
func (r *report) saveHTML(path string) error { return saveFile(path, "the HTML report", r.writeHTML) }

var htmlTemplate = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{.Title}}</title>
<style>
body { font: 14px/1.45 system-ui, sans-serif; color: #1d2330; margin: 2em auto; max-width: 1400px; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: .2em; }
h2 { font-size: 1.2em; margin: 2em 0 .2em; border-bottom: 1px solid #ccd; }
.header { list-style: none; padding: 0; color: #445; }
.title { color: #445; margin-top: 0; }
table { border-collapse: collapse; margin: .6em 0; }
th, td { padding: .2em .7em; text-align: left; border-bottom: 1px solid #e3e5ec; white-space: nowrap; }
th { background: #f0f2f7; }
td:not(:first-child) { font-variant-numeric: tabular-nums; }
.scroll { overflow-x: auto; }
.ratios, .notes, .errors { color: #334; padding-left: 1.2em; }
.notes { color: #667; font-size: .92em; }
.errors { color: #b3261e; }
svg text { font: 12px system-ui, sans-serif; fill: #1d2330; }
svg .bar { fill: #4a78c2; }
svg .bar.product { fill: #2e7d32; }
svg .whisker { stroke: #1d2330; stroke-width: 1.5; }
svg .axis { stroke: #99a; }
svg .label { fill: #667; }
tr.met td:nth-child(6) { color: #fff; background: #2e7d32; }
tr.median td:nth-child(6) { color: #1d2330; background: #f2c94c; }
tr.missed td:nth-child(6) { color: #fff; background: #c62828; }
tr.none td:nth-child(6) { color: #1d2330; background: #dde; }
#targets td:nth-child(7) { white-space: normal; min-width: 16em; color: #445; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<ul class="header">{{range .Header}}<li>{{.}}</li>{{end}}</ul>
{{range .Scenarios}}
<section id="{{.Name}}">
<h2>{{.Name}}</h2>
<p class="title">{{.Title}}</p>
<div class="scroll"><table>
<tr>{{range .Heads}}<th>{{.}}</th>{{end}}</tr>
{{range .Cells}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table></div>
{{range .Charts}}{{$c := .}}<svg width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}" role="img" aria-label="{{.Label}}">
{{range .Bars}}<g transform="translate(0 {{.Y}})">
<text x="{{$c.LabelW}}" dx="-8" y="16" text-anchor="end">{{.Name}}</text>
<rect class="bar{{if .Product}} product{{end}}" x="{{$c.LabelW}}" y="4" width="{{.W}}" height="16"></rect>
{{if .Whisker}}<line class="whisker" x1="{{.Lo}}" x2="{{.Hi}}" y1="12" y2="12"></line>
<line class="whisker" x1="{{.Lo}}" x2="{{.Lo}}" y1="7" y2="17"></line>
<line class="whisker" x1="{{.Hi}}" x2="{{.Hi}}" y1="7" y2="17"></line>
{{end}}<text x="{{.TextX}}" y="16">{{.Value}}</text>
</g>
{{end}}<line class="axis" x1="{{.AxisX}}" x2="{{.AxisX}}" y1="0" y2="{{.AxisY}}"></line>
<text class="label" x="{{.AxisX}}" y="{{.AxisY}}" dy="16">{{.Label}}</text>
</svg>
{{end}}
{{if .Ratios}}<ul class="ratios">{{range .Ratios}}<li><b>{{.Key}}</b> = {{.String}} <span class="notes">({{.Text}})</span></li>{{end}}</ul>{{end}}
{{if .Errors}}<ul class="errors">{{range .Errors}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{if .Notes}}<ul class="notes">{{range .Notes}}<li>{{.}}</li>{{end}}</ul>{{end}}
</section>
{{end}}
{{if .Targets}}<section id="targets">
<h2>targets</h2>
<p class="title">Each a ratio of a row to its peer in this run, against the project's target.</p>
<div class="scroll"><table>
<tr>{{range .Heads}}<th>{{.}}</th>{{end}}</tr>
{{range .Targets}}<tr class="{{.Class}}">{{range .Cells}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table></div>
</section>{{end}}
</body>
</html>
`))
