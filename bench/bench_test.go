package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// requireRoot skips unless the test runs as root: the bench builds
// network namespaces, TUN devices and AF_XDP sockets.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs CAP_NET_ADMIN, CAP_BPF, CAP_NET_RAW: run as root (sudo go test ./bench)")
	}
}

// ourNamespaces lists the namespaces this process's bench runs created.
func ourNamespaces(t *testing.T) []string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(netnsDir, netnsPrefix+strconv.Itoa(os.Getpid())+"-*"))
	if err != nil {
		t.Fatal(err)
	}
	return matches
}

// TestSmoke runs every scenario once, briefly, in process, and checks the
// outcome the scenarios exist to show: no drops with backpressure, drops
// without. No speed is asserted.
func TestSmoke(t *testing.T) {
	requireRoot(t)
	if dead, live := leftovers(); len(dead) > 0 || len(live) > 0 {
		// bench refuses to run beside them; a crashed run left them.
		t.Fatalf("bench namespaces from another run exist (%v, live pids %v): remove them with: %s", dead, live, cleanupCommand)
	}
	out := filepath.Join(t.TempDir(), "results.json")
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Second)
	defer cancel()
	start := time.Now()
	code := run(ctx, []string{"-duration", "1s", "-warmup", "300ms", "-runs", "1", "-json", "-out", out}, &stdout, &stderr)
	t.Logf("run took %v; progress:\n%s", time.Since(start).Round(time.Millisecond), stderr.String())
	if code != exitOK {
		t.Fatalf("run exited %d", code)
	}
	if left := ourNamespaces(t); len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}

	var rep jsonReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("stdout is not the JSON report: %v\n%s", err, stdout.String())
	}
	saved, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("-out: %v", err)
	}
	var rep2 jsonReport
	if err := json.Unmarshal(saved, &rep2); err != nil {
		t.Fatalf("-out file is not JSON: %v", err)
	}
	if len(rep2.Rows) != len(rep.Rows) {
		t.Errorf("-out has %d rows, stdout %d", len(rep2.Rows), len(rep.Rows))
	}

	rows := map[string]jsonRow{}
	for _, r := range rep.Rows {
		rows[r.Scenario+"/"+r.Row] = r
		if r.Runs != 1 || len(r.Errors) > 0 {
			t.Errorf("%s/%s: %d runs, errors %v", r.Scenario, r.Row, r.Runs, r.Errors)
		}
		if len(r.CPU) == 0 {
			t.Errorf("%s/%s: no CPU utilisation", r.Scenario, r.Row)
		}
	}
	for _, want := range []string{
		"backpressure/on", "backpressure/off",
		"gso/gsoplane", "gso/no-offload", "gso/kernel",
		"hook/none", "hook/noop", "hook/inspect",
		"peers/gsoplane", "peers/wireguard-go", "peers/tailscale-split",
	} {
		if _, ok := rows[want]; !ok {
			t.Errorf("no row %s", want)
		}
	}
	for _, s := range scenarioNames {
		if _, ok := rep.Ratios[s]; !ok {
			t.Errorf("no ratios for %s", s)
		}
	}
	on, off := rows["backpressure/on"], rows["backpressure/off"]
	for _, r := range []jsonRow{on, off} {
		t.Logf("backpressure %s: %d sends, %d send errors, %d datagrams received, %.0f Mbit/s, %d drops",
			r.Row, r.Sent, r.SendErrors, r.Received, r.ThroughputBps/1e6, r.Drops)
	}
	if on.Drops != 0 {
		t.Errorf("backpressure on: %d drops, want 0", on.Drops)
	}
	if off.Drops == 0 {
		t.Errorf("backpressure off: no drops")
	}
	for _, r := range []string{"gso/gsoplane", "gso/kernel", "peers/wireguard-go"} {
		if rows[r].Retransmits == nil {
			t.Errorf("%s: no retransmits field", r)
		}
	}
}

// TestLeftovers checks that a namespace left by a crashed run stops the
// bench, with the command that removes it.
func TestLeftovers(t *testing.T) {
	requireRoot(t)
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("ip (iproute2) not installed")
	}
	// A pid above pid_max belongs to no process: a crashed run.
	name := netnsPrefix + "4194305-1-a"
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"-scenario", "gso", "-runs", "1", "-duration", "1s"}, &stdout, &stderr)
	if code != exitUsage {
		t.Errorf("exit %d with leftovers, want %d", code, exitUsage)
	}
	if !strings.Contains(stderr.String(), name) || !strings.Contains(stderr.String(), cleanupCommand) {
		t.Errorf("stderr does not name the leftover and the command:\n%s", stderr.String())
	}
	if stdout.Len() > 0 {
		t.Errorf("stdout: %q", stdout.String())
	}
}
