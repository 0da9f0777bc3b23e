package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/internal/testing/docrecipe"
)

// recipe returns the first sh block after the heading title in the
// markdown file path, as a reader copies it.
func recipe(t *testing.T, path, title string) string {
	t.Helper()
	b, err := docrecipe.Block(path, title, "sh")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDocsQuickStart checks that the README's udpfwd quick start is an
// excerpt of docs/udpfwd.md's, and runs docs/udpfwd.md's quick start as
// written, with bash, from the repository's root: it builds udpfwd,
// makes the two namespaces, starts udpfwd, pings, runs iperf3 both ways
// and UDP, scrapes the metrics, stops udpfwd and cleans up.
func TestDocsQuickStart(t *testing.T) {
	script := recipe(t, "../../docs/udpfwd.md", "### Quick start in two network namespaces")
	if err := docrecipe.Excerpt(recipe(t, "../../README.md", "### Run udpfwd"), script); err != nil {
		t.Errorf("the README's udpfwd quick start is no excerpt of docs/udpfwd.md's: %v", err)
	}
	requireRoot(t)
	for _, tool := range []string{"ip", "ethtool", "iperf3", "ping", "curl", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the quick start needs %s (scripts/test-deps installs it as root)", tool)
		}
	}
	for _, ns := range []string{"gsoA", "gsoB"} {
		if _, err := os.Stat("/run/netns/" + ns); err == nil {
			t.Skipf("namespace %s exists (a quick start of someone's own?): the recipe would take it over, and its clean-up remove it", ns)
		}
	}
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", "gsoA").Run()
		exec.Command("ip", "netns", "del", "gsoB").Run()
	})
	out, err := docrecipe.Run(script, "../..", 3*time.Minute)
	if err != nil {
		t.Fatalf("the quick start failed: %v\n%s", err, out)
	}
	for _, want := range []string{"3 packets transmitted, 3 received", "receiver", "udpfwd_packets_total", "udpfwd stopped"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the quick start's output lacks %q:\n%s", want, out)
		}
	}
	var port []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "msg=\"NIC port") {
			port = append(port, line)
		}
		if strings.Contains(line, "receiver") || strings.Contains(line, "msg=\"NIC port") {
			t.Log(strings.TrimSpace(line))
		}
	}
	// The quick start's veth has no AF_XDP zero-copy and does TSO: the
	// default port is AF_PACKET handing it whole super-packets, said once.
	if len(port) != 1 || !strings.Contains(port[0], `msg="NIC port: AF_PACKET offload`) || !strings.Contains(port[0], "driver veth has no AF_XDP zero-copy") {
		t.Errorf("the quick start's NIC port lines: %q, want one, AF_PACKET offload, as the veth has no AF_XDP zero-copy", port)
	}
}
