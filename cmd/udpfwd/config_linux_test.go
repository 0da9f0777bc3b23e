package main

import (
	"bytes"
	"context"
	"flag"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// env returns a lookupEnv over vars.
func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

func TestParseConfigDefaults(t *testing.T) {
	cfg, err := parseConfig([]string{"-nic", "eth0"}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TUN != "udpfwd0" || cfg.Queues != 1 || !cfg.GSO || !cfg.GRO || !cfg.Backpressure ||
		cfg.Budget.bytes != 0 || cfg.Metrics != "127.0.0.1:9464" || cfg.Port.value != "auto" || cfg.XDPMode.value != "auto" {
		t.Errorf("defaults: %+v", cfg)
	}
}

// TestParseConfigEnv checks UDPFWD_* variables and that flags win.
func TestParseConfigEnv(t *testing.T) {
	cfg, err := parseConfig([]string{"-queues", "2", "-route", "198.19.0.0/24"}, env(map[string]string{
		"UDPFWD_NIC":          "eth1",
		"UDPFWD_QUEUES":       "4", // the flag wins
		"UDPFWD_ADDR":         "198.18.0.1/24, 2001:2::1/64",
		"UDPFWD_ROUTE":        "198.19.1.0/24", // the flag wins
		"UDPFWD_TX_QUEUE_LEN": "0",
		"UDPFWD_BUDGET":       "4MiB",
		"UDPFWD_BACKPRESSURE": "false",
		"UDPFWD_NEXT_HOP":     "198.18.100.2",
		"UDPFWD_METRICS":      "",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("198.18.0.1/24"), netip.MustParsePrefix("2001:2::1/64")}
	switch {
	case cfg.NIC != "eth1" || cfg.Queues != 2 || cfg.Budget.bytes != 4<<20 || cfg.Backpressure || cfg.Metrics != "":
		t.Errorf("env not applied, or over a flag: %+v", cfg)
	case len(cfg.Addrs) != 2 || cfg.Addrs[0] != want[0] || cfg.Addrs[1] != want[1]:
		t.Errorf("UDPFWD_ADDR: %v", cfg.Addrs)
	case cfg.Routes.String() != "198.19.0.0/24":
		t.Errorf("-route with UDPFWD_ROUTE: %v, want the flag's only", cfg.Routes)
	case cfg.NextHop.addr != netip.MustParseAddr("198.18.100.2"):
		t.Errorf("UDPFWD_NEXT_HOP: %v", cfg.NextHop)
	case cfg.redirects()[0] != netip.MustParsePrefix("198.18.0.0/24"):
		t.Errorf("default -redirect: %v, want the networks of -addr", cfg.redirects())
	}
}

// TestParseConfigErrors checks that each bad value is named with its
// accepted range, all in one error.
func TestParseConfigErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want []string
	}{
		{[]string{}, nil, []string{"-nic is required"}},
		{[]string{"-nic", "eth0", "-tun", "0123456789abcdef"}, nil, []string{`-tun "0123456789abcdef": name too long: 16 bytes, at most 15`}},
		{[]string{"-nic", "eth0", "-tun", "a/b"}, nil, []string{`-tun "a/b": name contains '/'`}},
		{[]string{"-nic", "eth0"}, map[string]string{"UDPFWD_TUN": ""}, []string{`-tun "": empty: want a device name`}},
		{[]string{"-nic", "udpfwd0"}, nil, []string{`-nic "udpfwd0": the same device as -tun`}},
		{[]string{"-nic", "eth0", "-mtu", "70000", "-queues", "0"}, nil, []string{"2 problems", "-mtu 70000: want 576 to 65535", "-queues 0: want 1 to 256"}},
		{[]string{"-nic", "eth0", "-mtu", "1000", "-addr", "2001:2::1/64"}, nil, []string{"-mtu 1000: IPv6 needs at least 1280"}},
		{[]string{"-nic", "eth0", "-route", "198.19.0.1/24"}, nil, []string{"-route 198.19.0.1/24: host bits set; did you mean 198.19.0.0/24?"}},
		{[]string{"-nic", "eth0", "-budget", "100K"}, nil, []string{"-budget 102400: want auto or 557056 (544KiB) to 569868288 (543MiB) bytes"}},
		{[]string{"-nic", "eth0", "-tx-queue-len", "-1"}, nil, []string{"-tx-queue-len -1: want 1 to 2048 (the TX frames with -budget auto), or 0"}},
		{[]string{"-nic", "eth0", "-budget", "8M", "-tx-queue-len", "3000"}, nil, []string{"-tx-queue-len 3000: want 1 to 2056 (the TX frames with -budget 8388608)"}},
		{[]string{"-nic", "eth0", "-budget", "1G"}, nil, []string{"-budget 1073741824: want auto or 557056"}},
		{[]string{"-nic", "eth0", "-tx-queue-len", "64", "-queues", "2"}, nil, []string{"-tx-queue-len 64: only with -queues 1"}},
		{[]string{"-nic", "eth0", "-drain-timeout", "1ms"}, nil, []string{"-drain-timeout 1ms: want 100ms to 10m0s"}},
		{[]string{"-nic", "eth0", "-metrics", "9464"}, nil, []string{`-metrics "9464": want host:port`}},
		{[]string{"-nic", "eth0", "-metrics", "", "-pprof"}, nil, []string{"-pprof: needs a -metrics address"}},
		{[]string{"-nic", "eth0", "extra"}, nil, []string{`unexpected argument "extra"`}},
		{[]string{"-nic", "eth0"}, map[string]string{"UDPFWD_QUEUES": "many", "UDPFWD_XDP_MODE": "fast"},
			[]string{"2 problems", `UDPFWD_QUEUES="many" (for -queues)`, `UDPFWD_XDP_MODE="fast" (for -xdp-mode): want auto, native or generic`}},
		{[]string{"-nic", "eth0", "-budget", "lots"}, nil, []string{`invalid value "lots" for flag -budget: want auto or a byte count`}},
		{[]string{"-nic", "eth0", "-addr", "198.18.0.1"}, nil, []string{`invalid value "198.18.0.1" for flag -addr: want ADDRESS/LENGTH`}},
		{[]string{"-nic", "eth0", "-next-hop", "gw"}, nil, []string{`invalid value "gw" for flag -next-hop: want an IPv4 or IPv6 address`}},
		{[]string{"-nic", "eth0", "-port", "dpdk"}, nil, []string{`invalid value "dpdk" for flag -port: want xdp, packet or auto`}},
		{[]string{"-nic", "eth0", "-packet-gso", "tso"}, nil, []string{`invalid value "tso" for flag -packet-gso: want auto, offload, partial or full`}},
		{[]string{"-nic", "eth0", "-packet-filter", "ingress"}, nil, []string{`invalid value "ingress" for flag -packet-filter: want auto, tcx or clsact`}},
		{[]string{"-nic", "eth0", "-queues", "many"}, nil, []string{`invalid value "many" for flag -queues: parse error: want a whole number`}},
		{[]string{"-nic", "eth0", "-v=maybe"}, nil, []string{`for -v: parse error: want true or false`}},
		{[]string{"-nic", "eth0"}, map[string]string{"UDPFWD_DRAIN_TIMEOUT": "5"}, []string{`UDPFWD_DRAIN_TIMEOUT="5" (for -drain-timeout): parse error: want a duration such as 500ms`}},
		{[]string{"-nic", "eth0", "-addr", "::ffff:198.18.0.1/120"}, nil, []string{`IPv4-mapped IPv6 prefix: write it as IPv4 (198.18.0.1/24)`}},
		{[]string{"-nic", "eth0", "-route", "::ffff:198.19.0.0/120"}, nil, []string{`IPv4-mapped IPv6 prefix: write it as IPv4 (198.19.0.0/24)`}},
		{[]string{"-nic", "eth0", "-next-hop", "224.0.0.1"}, nil, []string{`-next-hop 224.0.0.1: a multicast or broadcast address`}},
		{[]string{"-nic", "eth0", "-next-hop", "ff02::1"}, nil, []string{`-next-hop ff02::1: a multicast or broadcast address`}},
		{[]string{"-nic", "eth0", "-next-hop", "255.255.255.255"}, nil, []string{`-next-hop 255.255.255.255: a multicast or broadcast address`}},
		{[]string{"-nic", "eth0", "-next-hop", "::"}, nil, []string{`-next-hop ::: want the unicast address of a router`}},
	} {
		_, err := parseConfig(c.args, env(c.env))
		if err == nil {
			t.Errorf("%v %v: no error", c.args, c.env)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v %v: error lacks %q:\n%v", c.args, c.env, w, err)
			}
		}
	}
}

// TestConfigWarnings: a TUN device to which nothing from the NIC would
// be written (no -redirect, no -addr) is warned of; -addr or -redirect,
// or -ingress, is not.
func TestConfigWarnings(t *testing.T) {
	for _, c := range []struct {
		args []string
		warn bool
	}{
		{[]string{"-nic", "eth0"}, true},
		{[]string{"-nic", "eth0", "-route", "198.19.0.0/24"}, true},
		{[]string{"-nic", "eth0", "-addr", "198.18.0.1/24"}, false},
		{[]string{"-nic", "eth0", "-redirect", "198.18.0.0/24"}, false},
		{[]string{"-nic", "eth0", "-ingress", "gw-c", "-redirect", "198.18.0.0/24", "-ingress-redirect", "198.19.0.0/24"}, false},
	} {
		cfg, err := parseConfig(c.args, env(nil))
		if err != nil {
			t.Fatal(err)
		}
		if w := cfg.warnings(); (len(w) > 0) != c.warn || c.warn && !strings.Contains(w[0], "no -redirect prefix") {
			t.Errorf("%v: warnings %q, want a warning %v", c.args, w, c.warn)
		}
	}
}

// TestRunUsage checks the exit statuses of -h and of bad flags, which
// touch nothing and need no privileges.
func TestRunUsage(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"-h"}, &out, &errOut); code != exitOK {
		t.Errorf("-h: exit %d", code)
	}
	for _, g := range flagGroups {
		if !strings.Contains(out.String(), "\n"+g.title+":\n") {
			t.Errorf("help lacks group %q", g.title)
		}
		for _, name := range g.names {
			if !strings.Contains(out.String(), "  -"+name) || !strings.Contains(out.String(), "[$"+envName(name)+"]") {
				t.Errorf("help lacks -%s or $%s", name, envName(name))
			}
		}
	}
	out.Reset()
	if code := run(context.Background(), []string{"-nic", "eth0", "-queues", "0"}, &out, &errOut); code != exitUsage {
		t.Errorf("bad flag: exit %d, want %d", code, exitUsage)
	}
	if !strings.Contains(errOut.String(), "-queues 0: want 1 to 256") || out.Len() != 0 {
		t.Errorf("bad flag: stdout %q, stderr %q", out.String(), errOut.String())
	}
}

// TestUnknownEnv checks that a misspelled UDPFWD_* variable is named
// with the closest real one, and that others are left alone.
func TestUnknownEnv(t *testing.T) {
	got := unknownEnv([]string{"UDPFWD_NEXTHOP=198.18.100.2", "UDPFWD_NIC=eth0", "PATH=/bin", "UDPFWD_DRAIN_TIMOUT=2s"})
	want := []string{
		"UDPFWD_NEXTHOP sets no option and is ignored (did you mean UDPFWD_NEXT_HOP?)",
		"UDPFWD_DRAIN_TIMOUT sets no option and is ignored (did you mean UDPFWD_DRAIN_TIMEOUT?)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("unknownEnv = %q, want %q", got, want)
	}
}

// TestVersion checks -version: exit 0, one line on stdout, whatever else
// is set (no -nic needed).
func TestVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"-version"}, &out, &errOut); code != exitOK || errOut.Len() != 0 {
		t.Fatalf("-version: exit %d, stderr %q", code, errOut.String())
	}
	if line := out.String(); !strings.HasPrefix(line, "udpfwd ") || !strings.Contains(line, runtime.Version()) || strings.Count(line, "\n") != 1 {
		t.Errorf("-version printed %q", line)
	}
}

// TestFlagGroupsComplete checks that the help shows every flag once.
func TestFlagGroupsComplete(t *testing.T) {
	seen := map[string]int{}
	for _, g := range flagGroups {
		for _, n := range g.names {
			seen[n]++
		}
	}
	newFlagSet(new(config)).VisitAll(func(f *flag.Flag) {
		if seen[f.Name] != 1 {
			t.Errorf("-%s is in %d help groups", f.Name, seen[f.Name])
		}
		delete(seen, f.Name)
	})
	for n := range seen {
		t.Errorf("help group names unknown flag -%s", n)
	}
}

func TestBudgetValue(t *testing.T) {
	for in, want := range map[string]int64{"auto": 0, "557056": 557056, "8M": 8 << 20, "8MiB": 8 << 20, "1G": 1 << 30, "544K": 544 << 10} {
		var b budgetValue
		if err := b.Set(in); err != nil || b.bytes != want {
			t.Errorf("%q: %d, %v; want %d", in, b.bytes, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1", "1.5M", "8MB", "99999999999G"} {
		var b budgetValue
		if err := b.Set(in); err == nil {
			t.Errorf("%q: accepted as %d", in, b.bytes)
		}
	}
}

// TestRouterAddrs: the gateway's address on the TUN's link is the first
// host address of the first -addr prefix of each IP version that is not
// the TUN's own; a prefix with no room gives none.
func TestRouterAddrs(t *testing.T) {
	for _, c := range []struct {
		addrs string
		want  string
	}{
		{"198.18.0.1/24,2001:2:0:1::1/64", "198.18.0.2 2001:2:0:1::2"},
		{"198.18.0.9/24,2001:2::2/64,198.18.5.1/24", "198.18.0.1 2001:2::1"},
		{"198.18.0.1/32,2001:2::1/127", ""},
		{"198.18.0.1/30", "198.18.0.2"},
	} {
		var addrs prefixList
		if err := addrs.Set(c.addrs); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, a := range routerAddrs(addrs) {
			got = append(got, a.String())
		}
		if g := strings.Join(got, " "); g != c.want {
			t.Errorf("-addr %s: router addresses %q, want %q", c.addrs, g, c.want)
		}
	}
}
