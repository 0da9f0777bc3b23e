package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/internal/testing/docrecipe"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// TestDocsQuickStart runs docs/wireguard.md's quick start as written,
// with bash, from the repository's root: it builds wggso, makes two
// namespaces, brings an interface up in each with wg-quick (wggso as its
// userspace implementation), pings through the tunnel, shows it with wg,
// asks /healthz and /metrics, brings both down and cleans up.
func TestDocsQuickStart(t *testing.T) {
	script, err := docrecipe.Block("../../docs/wireguard.md", "## Quick start in two network namespaces", "sh")
	if err != nil {
		t.Fatal(err)
	}
	netlab.RequireRoot(t)
	t.Setenv("PATH", os.Getenv("PATH")+":/usr/sbin:/sbin")
	for _, tool := range []string{"ip", "wg", "wg-quick", "ping", "curl", "bash", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the quick start needs %s (scripts/test-deps installs it as root)", tool)
		}
	}
	for _, path := range []string{"/run/netns/wgA", "/run/netns/wgB", "/tmp/wgq", "/var/run/wireguard/wga.sock", "/var/run/wireguard/wgb.sock"} {
		if _, err := os.Lstat(path); err == nil {
			t.Skipf("%s exists (a quick start of someone's own?): the recipe would take it over, and its clean-up remove it", path)
		}
	}
	t.Cleanup(func() { // after a failure: deleting the namespaces stops both wggso
		exec.Command("ip", "netns", "del", "wgA").Run()
		exec.Command("ip", "netns", "del", "wgB").Run()
		os.RemoveAll("/tmp/wgq")
	})
	out, err := docrecipe.Run(script, "../..", 3*time.Minute)
	if err != nil {
		t.Fatalf("the quick start failed: %v\n%s", err, out)
	}
	for _, want := range []string{
		"[#] /tmp/wggso wga", // wg-quick ran wggso, not a kernel module's interface
		"bytes from 10.7.0.2", "latest handshake:", "\nok\n",
		"wggso_peer_handshakes_total{peer=", "wggso_peer_receive_packets_total{peer=",
		"[#] ip link delete dev wgb",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the quick start's output lacks %q:\n%s", want, out)
		}
	}
	// wggso notices the interface's deletion within a second.
	for _, sock := range []string{"/var/run/wireguard/wga.sock", "/var/run/wireguard/wgb.sock"} {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if _, err := os.Lstat(sock); err != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s outlived wg-quick down by 10 s", sock)
				break
			}
		}
	}
}
