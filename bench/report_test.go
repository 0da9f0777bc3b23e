package main

import (
	"bytes"
	"encoding/json"
	"github.com/gsoplane/gsoplane/internal/buildinfo"
	"io"
	"math"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"
)

// syntheticReport is a report of two scenarios with every optional field
// of the JSON filled in, a failed row, an infinite ratio, and a target
// met, one missed and one not measured.
func syntheticReport() *report {
	o, _, _ := parseFlags([]string{"-scenario", "backpressure,gso", "-runs", "2"}, io.Discard)
	rep := newReport(o)
	lost, msgs := int64(0), uint64(5710)
	run := func(bps float64) runResult {
		return runResult{Seconds: 1, ThroughputBps: bps, PPS: bps / 12000, Sent: 100, SendErrors: 3, Received: 4600,
			RxMessages: msgs, GoodputBps: bps, Drops: 1, Retransmits: 2, SegsPerRead: 44.9, WritesPerPkt: 0.032, ReverseBps: bps / 2, DgramsPerSend: 30, DgramsPerRecv: 60, Lost: &lost,
			GatewayCores: 0.9, GatewayCoresPerGbit: 0.9e9 / bps, BusyCoresPerGbit: 0.2e9 / bps,
			CPU: []CoreUsage{{CPU: "cpu0", Idle: 80}}, Extra: map[string]float64{"datagrams_sent": 262676}}
	}
	row := func(scenario, name string, retrans bool, bps ...float64) *rowResult {
		r := &rowResult{scenario: scenario, spec: rowSpec{name: name, units: units{"sends", "datagrams"}, retrans: retrans}.copying(forwardCopies)}
		for _, v := range bps {
			r.runs = append(r.runs, run(v))
		}
		return r
	}
	on, off := row("backpressure", "on", false, 980e6, 990e6), row("backpressure", "off", false)
	off.errs = []string{"boom"}
	rep.add("backpressure", "backpressure title", []*rowResult{on, off}, []ratio{
		{Key: "on/off", Text: "throughput", Value: 1, Lo: 1, Hi: 1.01},
		{Key: "on/off goodput", Text: "goodput", Value: math.Inf(1)},
		{Key: "on delivered", Text: "delivered", Value: 1, Form: percent,
			A: operand{"on received", 262676, "datagrams"}, B: operand{"on sent", 262676, "datagrams"}},
	}, []string{"a note"})
	rows := []*rowResult{row("gso", "packet-offload", true, 7661e6, 7183e6), row("gso", "kernel", true, 10795e6, 9622e6)}
	rows[0].spec.product = true
	rep.add("gso", "gso title", rows, []ratio{
		{Key: "packet-offload/kernel", Text: "AF_PACKET / kernel", Value: 0.71, Lo: 0.64, Hi: 0.80,
			A: operand{"packet-offload", 7661e6, "bit/s"}, B: operand{"kernel", 10795e6, "bit/s"}},
	}, nil)
	return rep
}

// TestJSONSchemaDoc checks that docs/bench-json.md documents exactly the
// fields the bench writes: every object's keys against the table of its
// section.
func TestJSONSchemaDoc(t *testing.T) {
	doc, free := readSchemaDoc(t, "../docs/bench-json.md")
	var js bytes.Buffer
	if err := syntheticReport().writeJSON(&js); err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(js.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]bool{}
	collectKeys(v, "", free, got)
	for path, keys := range got {
		if want := doc[path]; strings.Join(sortedSet(keys), " ") != strings.Join(sortedSet(want), " ") {
			t.Errorf("object %q: JSON fields %v, documented %v", path, sortedSet(keys), sortedSet(want))
		}
	}
	for path := range doc {
		if got[path] == nil {
			t.Errorf("documented object %q is not in the JSON", path)
		}
	}
	if !strings.Contains(mustRead(t, "../docs/bench-json.md"), "`schema_version` is 1") {
		t.Errorf("the doc does not name schema version %d", schemaVersion)
	}
}

var (
	docHeading = regexp.MustCompile("^#+ (.*)$")
	docPath    = regexp.MustCompile("`([a-z_\\[\\].]+)`")
	docField   = regexp.MustCompile("^\\| `([a-z_]+)` \\| ([^|]+) \\|")
)

// readSchemaDoc parses the doc: each heading names the objects its table
// describes by their JSON paths in backquotes ("Top level" the root), each
// table row a field and its type. A field of type "map ..." holds free
// keys (flag names, row facts), not documented one by one.
func readSchemaDoc(t *testing.T, name string) (fields map[string]map[string]bool, free map[string]bool) {
	fields, free = map[string]map[string]bool{}, map[string]bool{}
	var paths []string
	for _, line := range strings.Split(mustRead(t, name), "\n") {
		if m := docHeading.FindStringSubmatch(line); m != nil {
			paths = nil
			if m[1] == "Top level" {
				paths = []string{""}
			}
			for _, p := range docPath.FindAllStringSubmatch(m[1], -1) {
				paths = append(paths, p[1])
			}
			continue
		}
		m := docField.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		for _, p := range paths {
			if fields[p] == nil {
				fields[p] = map[string]bool{}
			}
			fields[p][m[1]] = true
			if strings.HasPrefix(strings.TrimSpace(m[2]), "map") {
				free[joinPath(p, m[1])] = true
			}
		}
	}
	return fields, free
}

// collectKeys records the keys of every object in v by its path, not
// looking into the free maps.
func collectKeys(v any, path string, free map[string]bool, out map[string]map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		if out[path] == nil {
			out[path] = map[string]bool{}
		}
		for k, e := range x {
			out[path][k] = true
			if p := joinPath(path, k); !free[p] {
				collectKeys(e, p, free, out)
			}
		}
	case []any:
		for _, e := range x {
			collectKeys(e, path+"[]", free, out)
		}
	}
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func sortedSet(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func mustRead(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestHTML renders the synthetic report: well-formed, a chart per
// scenario, the targets coloured, no script and no address to fetch.
func TestHTML(t *testing.T) {
	rep := syntheticReport()
	var b bytes.Buffer
	if err := rep.writeHTML(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	doc, err := html.Parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	svgs := map[string]int{} // per section id
	var scripts, rects int
	var classes []string
	var walk func(n *html.Node, section string)
	walk = func(n *html.Node, section string) {
		if n.Type == html.ElementNode {
			switch n.Data {
			case "section":
				section = attr(n, "id")
			case "svg":
				svgs[section]++
			case "rect":
				rects++
			case "script", "link", "img", "iframe", "object":
				scripts++
			case "tr":
				if c := attr(n, "class"); c != "" {
					classes = append(classes, c)
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, section)
		}
	}
	walk(doc, "")
	if svgs["backpressure"] != 3 || svgs["gso"] != 3 || len(svgs) != 2 {
		t.Errorf("SVG charts per section: %v, want three per scenario (throughput, gateway and busy cores per Gbit/s)", svgs)
	}
	if rects != 12 {
		t.Errorf("%d bars, want one per row and chart (12)", rects)
	}
	if scripts > 0 || strings.Contains(out, "http://") || strings.Contains(out, "https://") || strings.Contains(out, "<script") {
		t.Errorf("the report is not self-contained:\n%s", out)
	}
	if strings.Join(classes, " ") != "met none none none missed none" { // default/floor, its cores, default/kernel not measured
		t.Errorf("target rows' classes %q", classes)
	}
	for _, want := range []string{"<h1>gsoplane bench, ", "machine: ", "flags: -runs=2", "on/off</b> = 1.00×", "off: run failed: boom", "980 [980–990]"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
}

func TestJoinNotes(t *testing.T) {
	got := joinNotes([]string{"one", "  more of one", "two", "  and", "  more"})
	if strings.Join(got, "|") != "one more of one|two and more" {
		t.Errorf("%q", got)
	}
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

// TestChart checks the bars' geometry: lengths in proportion, whiskers
// from the least to the greatest run.
func TestChart(t *testing.T) {
	c := chartsOf(syntheticReport().scenarios[1])[0]
	pkt, kern := c.Bars[0], c.Bars[1]
	if kern.Hi != c.LabelW+c.BarW || kern.W != int(9622e6/10795e6*float64(c.BarW)) || !kern.Whisker {
		t.Errorf("kernel bar %+v (chart %+v)", kern, c)
	}
	if pkt.Value != "7183" || pkt.Lo != c.LabelW+int(7183e6/10795e6*float64(c.BarW)) || pkt.Y != 0 || kern.Y != chartRowH {
		t.Errorf("packet-offload bar %+v", pkt)
	}
}

func TestProgress(t *testing.T) {
	var b bytes.Buffer
	t0 := time.Unix(1000, 0)
	p := &progress{w: &b, total: 4, planned: 4 * time.Second}
	p.begin(t0)
	p.status(t0.Add(time.Second), "a") // 3 trials of 4s, and 3s of this one
	p.end()
	p.begin(t0.Add(6 * time.Second))
	p.status(t0.Add(7*time.Second), "b") // 2 of 6s (the first took 6s), and 5s
	if want := "row 1/4, ETA 15s  a\nrow 2/4, ETA 17s  b\n"; b.String() != want {
		t.Errorf("plain lines %q, want %q", b.String(), want)
	}
	b.Reset()
	p.width = 12
	p.status(t0.Add(8*time.Second), "c")
	first := b.String()
	p.status(t0.Add(9*time.Second), "d")
	p.Write([]byte("failed\n"))
	p.close()
	if want := "\rrow 2/4, ET\x1b[K"; first != want {
		t.Errorf("terminal status %q, want %q", first, want)
	}
	if want := "\rrow 2/4, ET\x1b[K\rrow 2/4, ET\x1b[K\nfailed\n"; b.String() != want {
		t.Errorf("terminal output %q, want %q", b.String(), want)
	}
}

func TestJudge(t *testing.T) {
	i := slices.IndexFunc(targets, func(t target) bool { return t.key == "noop/none" })
	if i < 0 || targets[i].lessBy != "none-spread" {
		t.Fatalf("no noop/none target with a noise floor: %+v", targets)
	}
	noop := targets[i]
	spread := ratio{Key: "none-spread", Value: 0.06}
	for _, c := range []struct {
		q    ratio
		with []ratio
		want status
	}{
		{ratio{Key: "noop/none", Value: 0.97}, []ratio{spread}, met},
		{ratio{Key: "noop/none", Value: 0.97, Lo: 0.9, Hi: 1.1}, []ratio{spread}, metByMedian},
		{ratio{Key: "noop/none", Value: 0.93}, []ratio{spread}, missed},
		{ratio{Key: "noop/none", Value: 0.97}, nil, notMeasured},
	} {
		r := judge(noop, append(c.with, c.q))
		if r.status != c.want {
			t.Errorf("%+v with %v: %s, want %s", c.q, c.with, r.status, c.want)
		}
	}
	j := slices.IndexFunc(targets, func(t target) bool { return t.key == "none-spread" })
	if r := judge(targets[j], []ratio{spread}); r.status != missed || r.bound() != "≤ 5.0%" {
		t.Errorf("spread 6%%: %s, %s", r.status, r.bound())
	}
	if r := judge(noop, []ratio{spread, {Key: "noop/none", Value: 0.97}}); r.bound() != "≥ -6.00%" || r.value() != "-3.00%" {
		t.Errorf("noop/none: value %s, target %s", r.value(), r.bound())
	}
}

func TestAbout(t *testing.T) {
	if m := cpuModel([]byte("processor\t: 0\nvendor_id\t: X\nmodel name\t: Some CPU @ 2.00GHz\nprocessor\t: 1\nmodel name\t: Other\n")); m != "Some CPU @ 2.00GHz" {
		t.Errorf("cpu model %q", m)
	}
	if m := cpuModel([]byte("processor\t: 0\nCPU part\t: 0xd0c\n")); m != "" {
		t.Errorf("cpu model without one: %q", m)
	}
	for v, want := range map[buildinfo.Info]string{
		{Version: "(devel)"}: "(devel), no VCS revision",
		{Version: "v1.2.0", Revision: "648a899abcdef0123", Modified: true}: "v1.2.0, revision 648a899abcde (modified)",
		{}: "unknown version, no VCS revision",
	} {
		if s := v.String(); s != want {
			t.Errorf("%+v: %q, want %q", v, s, want)
		}
	}
}

// TestBuildRevision: a build without a VCS stamp (go run's, with
// -buildvcs=false) takes its revision from git in the source directory,
// and says so; without a repository it says that nothing could.
func TestBuildRevision(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir := sourceDir()
	if dir == "" {
		t.Fatal("no source directory")
	}
	rev, at, _, from := gitRevision(dir)
	if from != fromGit || !regexp.MustCompile("^[0-9a-f]{40}$").MatchString(rev) || at == "" {
		t.Errorf("git in %s: revision %q at %q, from %q", dir, rev, at, from)
	}
	if rev, _, _, from := gitRevision(t.TempDir()); from != fromUnknown || rev != "" {
		t.Errorf("outside a repository: revision %q, from %q", rev, from)
	}
	b := build{Info: buildinfo.Info{Version: "(devel)", Revision: rev}, RevisionFrom: fromGit}
	if s := b.String(); !strings.Contains(s, "revision "+rev[:12]) || !strings.Contains(s, "from git") {
		t.Errorf("build line %q", s)
	}
	if b := readBuild(); b.Revision == "" && b.RevisionFrom != fromUnknown {
		t.Errorf("readBuild: %+v", b)
	}
}
