package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// requireRoot skips unless the test runs as root: the bench builds
// network namespaces, TUN devices and AF_XDP sockets.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs CAP_NET_ADMIN, CAP_BPF, CAP_NET_RAW: run as root (sudo go test ./bench)")
	}
}

// smokeDuration is each of TestSmoke's runs.
const smokeDuration = time.Second

// failures returns the lines of the bench's progress that say what
// failed and each line after such a line (the failure's cause).
func failures(progress string) string {
	var out []string
	lines := strings.Split(progress, "\n")
	for i, l := range lines {
		if strings.Contains(l, "failed") || (i > 0 && strings.Contains(lines[i-1], "failed:")) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestSmoke runs every scenario once, briefly, in process, and checks the
// outcome the scenarios exist to show: no drops with backpressure, drops
// without. No speed is asserted. PATH is empty: the bench needs no
// binary (ethtool, ip, tc), and skips its optional iperf3 row.
func TestSmoke(t *testing.T) {
	requireRoot(t)
	t.Setenv("PATH", t.TempDir())
	out := filepath.Join(t.TempDir(), "results.json")
	var stdout, stderr bytes.Buffer
	// A bound, not a speed: on a quiet machine it takes under a minute,
	// on a shared one busy with other work more than twice that.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Second)
	defer cancel()
	start := time.Now()
	code := run(ctx, []string{"-duration", smokeDuration.String(), "-warmup", "300ms", "-runs", "1", "-json", "-out", out}, &stdout, &stderr)
	took := time.Since(start).Round(time.Millisecond)
	// The progress goes last, after any failure, which a reader of a
	// cut log then finds at its top.
	defer func() { t.Logf("run took %v; progress:\n%s", took, stderr.String()) }()
	if code != exitOK {
		t.Fatalf("run exited %d; what failed:\n%s", code, failures(stderr.String()))
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
	if len(rep2.Scenarios) != len(rep.Scenarios) || rep.SchemaVersion != schemaVersion {
		t.Errorf("-out has %d scenarios, stdout %d; schema version %d", len(rep2.Scenarios), len(rep.Scenarios), rep.SchemaVersion)
	}

	rows := map[string]jsonRow{}
	ratios := map[string]int{}
	for _, s := range rep.Scenarios {
		ratios[s.Name] = len(s.Ratios)
		for _, r := range s.Rows {
			rows[s.Name+"/"+r.Name] = r
			if len(r.Runs) != 1 || len(r.Errors) > 0 {
				t.Errorf("%s/%s: %d runs, errors %v", s.Name, r.Name, len(r.Runs), r.Errors)
			}
			if len(r.CPU) == 0 {
				t.Errorf("%s/%s: no CPU utilisation", s.Name, r.Name)
			}
		}
	}
	for _, want := range []string{
		"backpressure/on", "backpressure/off",
		"gso/default", "gso/floor", "gso/kernel", "gso/packet-offload", "gso/packet-partial", "gso/packet-full",
		"gso/xdp", "gso/xdp-no-csum", "gso/xdp-no-offload",
		"tunnel-gso/on", "tunnel-gso/off", "tunnel-gso/kernel",
		"gro/packet-gro", "gro/floor", "gro/kernel", "gro/wireguard-go", "gro/xdp-gro", "gro/xdp-no-gro", "gro/xdp-forward",
		"queues/fwd-1q-1f", "queues/fwd-2q-2f", "queues/rev-1q-1f", "queues/rev-2q-2f",
		"hook/none", "hook/noop", "hook/inspect",
		"xdphook/none", "xdphook/noop", "xdphook/inspect", "xdphook/generator", "xdphook/tun",
		"ingress/packet", "ingress/floor", "ingress/xdp", "ingress/packet-cut", "ingress/kernel", "ingress/tun",
		"peers/gsoplane", "peers/wireguard-go", "peers/tailscale-split",
		"tunnel/kernel", "tunnel/tunnel", "tunnel/wg-plumbing", "tunnel/vpn", "tunnel/wg-device",
		"wireguard/wireguard", "wireguard/wg-device", "wireguard/tunnel",
	} {
		if _, ok := rows[want]; !ok {
			t.Errorf("no row %s", want)
		}
	}
	for _, s := range scenarioNames {
		if ratios[s] == 0 {
			t.Errorf("no ratios for %s", s)
		}
	}
	if len(rep.Targets) != len(targets) {
		t.Errorf("%d targets judged, want every one of the %d", len(rep.Targets), len(targets))
	}
	on, off := rows["backpressure/on"], rows["backpressure/off"]
	for _, r := range []jsonRow{on, off} {
		t.Logf("backpressure %s: %d sends, %d send errors, %d datagrams received, %.0f Mbit/s, %d drops",
			r.Name, r.Sent, r.SendErrors, r.Received, r.ThroughputBps/1e6, r.Drops)
	}
	if on.Drops != 0 {
		t.Errorf("backpressure on: %d drops, want 0", on.Drops)
	}
	// Without backpressure the gateway drops what the paced link cannot
	// carry, if the sender offers more than that: on a busy machine it
	// may not.
	segs, _ := bpSendSegs()
	offered := float64(off.Sent) * float64(segs*(bpSize+udpIPOverhead)*8) / smokeDuration.Seconds()
	switch {
	case off.Drops > 0:
	case offered < 1.1*1e9:
		t.Logf("backpressure off: no drops, the sender offering %.0f Mbit/s to a link paced at 1000: a machine too busy to overrun it", offered/1e6)
	default:
		t.Errorf("backpressure off: no drops, though the sender offered %.0f Mbit/s to a link paced at 1000", offered/1e6)
	}
	if w := rows["gro/xdp-gro"].WritesPerPkt; w <= 0 || w >= 0.5 {
		t.Errorf("gro/xdp-gro: %.3f TUN writes per packet, want GRO to merge", w)
	}
	// One write per packet; the two counters are read apart, so a
	// snapshot may catch a batch counted and not yet written.
	if w := rows["gro/xdp-no-gro"].WritesPerPkt; math.Abs(w-1) > 0.01 {
		t.Errorf("gro/xdp-no-gro: %.4f TUN writes per packet, want 1", w)
	}
	// The AF_PACKET rows: each TX mode did what it says, and the
	// kernel's GRO merged before the port on the reverse path. In the
	// offload mode only a packet that is no super-packet goes out with a
	// partial checksum: a stream may send none of those in its second
	// (a fast machine's did), so that count is not asked of it.
	for _, c := range []struct {
		row     string
		super   bool
		partial int // 1: some, 0: none, -1: either
	}{{"gso/packet-offload", true, -1}, {"gso/packet-partial", false, 1}, {"gso/packet-full", false, 0}} {
		x := rows[c.row].Extra
		t.Logf("%s: %v", c.row, x)
		partial := x["packet_tx_partial"] > 0
		if (x["packet_tx_super"] > 0) != c.super || (c.partial >= 0 && partial != (c.partial == 1)) {
			t.Errorf("%s: %.0f super-packets sent whole, %.0f with partial checksums; want whole ones %v, partial ones %d (1 some, 0 none, -1 either)",
				c.row, x["packet_tx_super"], x["packet_tx_partial"], c.super, c.partial)
		}
	}
	// The generator's frames went through the gateway's ingress port,
	// many per wake-up; C's super-packets reached it whole and were cut.
	for _, r := range []string{"xdphook/none", "xdphook/generator"} {
		if x := rows[r]; x.PPS == 0 || x.Sent == 0 || x.Extra["gen_frames_per_kick"] < 8 {
			t.Errorf("%s: %.0f pps, %d frames sent, %.1f frames per wake-up", r, x.PPS, x.Sent, x.Extra["gen_frames_per_kick"])
		}
	}
	if x := rows["xdphook/none"]; x.Received == 0 {
		t.Error("xdphook/none: nothing reached gw-b")
	}
	if r := rows["ingress/xdp"]; r.SegsPerRead < 2 || r.ThroughputBps == 0 {
		t.Errorf("ingress/xdp: %.0f bit/s, %.1f segments per packet read: want C's super-packets cut", r.ThroughputBps, r.SegsPerRead)
	}
	if x := rows["gro/packet-gro"].Extra; x["packet_rx_super"] == 0 {
		t.Errorf("gro/packet-gro: no GRO super-packet received: %v", x)
	}
	for _, r := range []string{"gso/xdp", "gso/kernel", "gso/packet-offload", "gro/packet-gro", "peers/wireguard-go", "ingress/xdp", "ingress/kernel"} {
		if rows[r].Retransmits == nil {
			t.Errorf("%s: no retransmits field", r)
		}
	}
	// The floor rows carried their streams and have a cost to compare
	// the gateway's with.
	for _, r := range []string{"gso/floor", "gro/floor", "ingress/floor", "tunnel/floor"} {
		if x := rows[r]; x.ThroughputBps == 0 || x.GatewayCoresPerGbit == 0 {
			t.Errorf("%s: %.0f bit/s, %.3f gateway cores per Gbit/s", r, x.ThroughputBps, x.GatewayCoresPerGbit)
		}
	}
	for _, r := range []string{"gso/default", "gro/packet-gro", "tunnel/tunnel", "wireguard/wireguard"} {
		if !rows[r].Product {
			t.Errorf("%s: not marked as the product", r)
		}
	}
}

// TestLeftovers checks that namespaces left by a crashed bench run are
// removed with a message, and that a bench running in another process
// stops this one.
func TestLeftovers(t *testing.T) {
	requireRoot(t)
	// A pid above pid_max belongs to no process: a crashed run. Pid 1 is
	// alive: another run.
	stale, busy := netlab.Prefix+labTag+"-a-4194305-1", netlab.Prefix+labTag+"-a-1-1"
	for _, name := range []string{stale, busy} {
		h, err := netlab.NewNamed(name)
		if err != nil {
			t.Fatal(err)
		}
		h.Close()
		t.Cleanup(func() { netns.DeleteNamed(name) })
	}
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"-scenario", "gso", "-runs", "1", "-duration", "1s"}, &stdout, &stderr)
	if code != exitUsage {
		t.Errorf("exit %d beside another run, want %d", code, exitUsage)
	}
	for _, want := range []string{"removed namespace " + stale, "another bench run (pid 1)"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	if _, err := os.Stat("/run/netns/" + stale); !os.IsNotExist(err) {
		t.Errorf("the stale namespace is still there: %v", err)
	}
	if stdout.Len() > 0 {
		t.Errorf("stdout: %q", stdout.String())
	}
}

func TestMain(m *testing.M) { os.Exit(netlab.Main(m)) }
