package main

import (
	"net"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStartFailures runs the binary with bad configurations and missing
// privileges: each must exit with the documented status and name the
// problem, leaving nothing behind.
func TestStartFailures(t *testing.T) {
	requireRoot(t)
	a, _ := newLab(t)
	var ln net.Listener
	if err := a.Run(func() (err error) { ln, err = net.Listen("tcp", "127.0.0.1:9464"); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	noNetAdmin := []string{"setpriv", "--inh-caps=-all", "--bounding-set=-net_admin"}
	if _, err := exec.LookPath("setpriv"); err != nil {
		noNetAdmin = nil
	}
	for _, c := range []struct {
		name   string
		prefix []string
		args   []string
		code   int
		want   []string
	}{
		{"unknown NIC", nil, []string{"-nic", "nosuch0", "-metrics="}, exitUsage,
			[]string{`-nic "nosuch0": no such interface`}},
		{"bad values", nil, []string{"-nic", labNIC, "-queues", "300", "-budget", "1K", "-mtu", "100", "-drain-timeout", "1h"}, exitUsage,
			[]string{"4 problems", "-queues 300: want 1 to 256", "-budget 1024: want auto or 557056", "-mtu 100: want 576 to 65535", "-drain-timeout 1h0m0s: want 100ms to 10m0s"}},
		{"bad enum", nil, []string{"-nic", labNIC, "-xdp-mode", "fast"}, exitUsage,
			[]string{`invalid value "fast" for flag -xdp-mode: want auto, native or generic`}},
		{"TUN name too long", nil, []string{"-nic", labNIC, "-tun", "a-very-long-tun-name"}, exitUsage,
			[]string{`-tun "a-very-long-tun-name": name too long: 20 bytes, at most 15`}},
		{"zero-copy refused", nil, []string{"-nic", labNIC, "-tun", labTUN, "-metrics=", "-xdp-zerocopy", "on"}, exitFailure,
			[]string{"driver veth: bind: driver does not support AF_XDP zero-copy"}},
		{"metrics port taken", nil, []string{"-nic", labNIC, "-tun", labTUN}, exitFailure,
			[]string{"-metrics 127.0.0.1:9464", "address already in use"}},
		{"no CAP_NET_ADMIN", noNetAdmin, []string{"-nic", labNIC, "-metrics="}, exitUsage,
			[]string{"missing capabilities CAP_NET_ADMIN (", "setcap cap_net_admin+ep", "AmbientCapabilities=CAP_NET_ADMIN "}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "no CAP_NET_ADMIN" && noNetAdmin == nil {
				t.Skip("setpriv (util-linux) not installed")
			}
			code, out := runUdpfwd(t, a, c.prefix, c.args...)
			if code != c.code {
				t.Errorf("exit %d, want %d", code, c.code)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if left := leftovers(t, a); left != "" {
				t.Errorf("left behind: %s", left)
			}
		})
	}
}

// TestSecondSignal checks that a second signal during the stop exits at
// once with 128+N and leaves no program of its port behind (and, on the
// way, that /debug/pprof/ is off without -pprof).
func TestSecondSignal(t *testing.T) {
	requireRoot(t)
	for _, c := range []struct{ name, filter string }{
		{"default", "auto"},
		{"clsact", "clsact"}, // a cls_bpf filter, which the kernel keeps after the process (before tcx, Linux 6.6)
	} {
		t.Run(c.name, func(t *testing.T) { secondSignal(t, append(slices.Clone(labArgs), "-packet-filter", c.filter)) })
	}
}

func secondSignal(t *testing.T, args []string) {
	a, _ := newLab(t)
	p := startUdpfwd(t, a, labEnv, args...)
	waitReady(t, p, a)
	if code := pprofStatus(t, a); code != 404 {
		t.Errorf("without -pprof: /debug/pprof/ answers %d", code)
	}
	// Sent back to back, the two signals may arrive in either order: the
	// exit code must be 128 + the one udpfwd logs as the second.
	p.cmd.Process.Signal(syscall.SIGINT)
	p.cmd.Process.Signal(syscall.SIGTERM)
	code := p.wait(3 * time.Second)
	out := p.out.String()
	second := map[string]syscall.Signal{"signal=interrupt": syscall.SIGINT, "signal=terminated": syscall.SIGTERM}
	var want int
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "second signal: exiting now") {
			for word, sig := range second {
				if strings.Contains(line, word) {
					want = 128 + int(sig)
				}
			}
		}
	}
	if want == 0 || code != want {
		t.Fatalf("exit %d, want 128 + the second signal (%d):\n%s", code, want, out)
	}
	if left := leftovers(t, a); left != "" {
		t.Errorf("left behind: %s", left)
	}
}
