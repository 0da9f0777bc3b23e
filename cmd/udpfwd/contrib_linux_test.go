package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The dashboard and the alert rules in contrib/ name only metrics udpfwd
// exports, and their PromQL parses.

const (
	dashboardFile  = "../../contrib/grafana-udpfwd.json"
	alertsFile     = "../../contrib/udpfwd-alerts.yml"
	alertTestsFile = "../../contrib/udpfwd-alerts_test.yml"
)

var metricName = regexp.MustCompile(`\budpfwd_[a-z_]+`)

// exported is every metric name the collector describes, with the
// series names of its histograms.
func exported(t *testing.T) map[string]bool {
	ch := make(chan *prometheus.Desc, 64)
	go func() { (&statsCollector{}).Describe(ch); close(ch) }()
	names := map[string]bool{}
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range ch {
		m := fq.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		names[m[1]] = true
		if d == descSegsPerSP || d == descTxLatency {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[m[1]+s] = true
			}
		}
	}
	return names
}

func checkNames(t *testing.T, file, text string, names map[string]bool) {
	t.Helper()
	found := metricName.FindAllString(text, -1)
	if len(found) == 0 {
		t.Fatalf("%s names no udpfwd metric", file)
	}
	for _, n := range found {
		if !names[n] {
			t.Errorf("%s names %s, which udpfwd does not export", file, n)
		}
	}
}

// dashboardExprs returns the PromQL of every panel target.
func dashboardExprs(t *testing.T) (titles []string, exprs []string) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	for _, p := range d.Panels {
		titles = append(titles, p.Title)
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	return titles, exprs
}

func TestContribNames(t *testing.T) {
	names := exported(t)
	titles, exprs := dashboardExprs(t)
	checkNames(t, dashboardFile, strings.Join(exprs, "\n"), names)
	for _, want := range []string{"Throughput", "Drops by reason", "Producer stalls", "Queue depth", "NIC up", "Program attached", "GRO merge ratio"} {
		if !strings.Contains(strings.Join(titles, "\n"), want) {
			t.Errorf("dashboard has no %q panel", want)
		}
	}
	for _, f := range []string{alertsFile, alertTestsFile} {
		rules, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		checkNames(t, f, string(rules), names)
	}
}

// promtool returns the path of promtool. Without it the test fails as
// root, for whom scripts/test-deps installs it (make test runs it), and
// skips otherwise.
func promtool(t *testing.T) string {
	path, err := exec.LookPath("promtool")
	switch {
	case err == nil:
		return path
	case os.Geteuid() == 0:
		t.Fatal("promtool is not installed: run scripts/test-deps (make test does)")
	}
	t.Skip("promtool is not installed (scripts/test-deps installs it, as root): contrib/'s alert rules and dashboard are not checked")
	return ""
}

// TestContribSyntax checks the alert rules, and every dashboard query as
// a recording rule (Grafana's variables replaced), with promtool.
func TestContribSyntax(t *testing.T) {
	promtool := promtool(t)
	_, exprs := dashboardExprs(t)
	var rec strings.Builder
	rec.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	vars := strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*")
	for i, e := range exprs {
		q, _ := json.Marshal(vars.Replace(e)) // a JSON string is a YAML string
		fmt.Fprintf(&rec, "      - record: dashboard:query%d\n        expr: %s\n", i, q)
	}
	dash := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(dash, []byte(rec.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "check", "rules", alertsFile, dash).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

// TestContribAlerts runs promtool's unit tests of the alert rules: an
// idle gateway (its host's router solicitations and MLD reports into the
// TUN are no drops) raises nothing, a dropping one UdpfwdDropsRising, a
// dead one UdpfwdDown and, once it is not scraped at all,
// UdpfwdNotScraped.
func TestContribAlerts(t *testing.T) {
	out, err := exec.Command(promtool(t), "test", "rules", alertTestsFile).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// TestServiceUnit: the unit lets udpfwd open every socket it may need and
// waits for its READY=1.
func TestServiceUnit(t *testing.T) {
	b, err := os.ReadFile("../../contrib/udpfwd.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			unit[k] = v
		}
	}
	if unit["Type"] != "notify" || unit["WatchdogSec"] == "" {
		t.Errorf("Type=%s WatchdogSec=%s, want notify and a watchdog", unit["Type"], unit["WatchdogSec"])
	}
	families := strings.Fields(unit["RestrictAddressFamilies"])
	for _, want := range []string{"AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK", "AF_XDP", "AF_PACKET"} {
		if !slices.Contains(families, want) {
			t.Errorf("RestrictAddressFamilies lacks %s", want)
		}
	}
}
