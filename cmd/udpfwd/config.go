package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// config is udpfwd's configuration, from flags and UDPFWD_* variables.
type config struct {
	TUN      string
	Addrs    prefixList
	MTU      int
	Routes   prefixList
	Redirect prefixList
	Queues   int
	GSO      bool
	GRO      bool

	Ingress         string
	IngressRedirect prefixList

	NIC          string
	NextHop      addrValue
	Port         choice
	PacketGSO    choice
	PacketFilter choice
	XDPMode      choice
	ZeroCopy     choice
	BusyPoll     time.Duration
	Detached     choice

	Budget       budgetValue
	TxQueueLen   int
	Backpressure bool
	DrainTimeout time.Duration

	Metrics   string
	Pprof     bool
	LogLevel  choice
	LogFormat choice
	Verbose   bool

	User string

	RouteTakeover bool
	Version       bool
}

// envPrefix starts the environment variable of every flag: -tx-queue-len
// is UDPFWD_TX_QUEUE_LEN.
const envPrefix = "UDPFWD_"

// envName returns the environment variable that sets flag name.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// newFlagSet binds the flags to cfg, with their defaults.
func newFlagSet(cfg *config) *flag.FlagSet {
	fs := flag.NewFlagSet("udpfwd", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // run reports errors and prints the help itself
	fs.Usage = func() {}
	cfg.Port = choice{"auto", []string{"xdp", "packet", "auto"}}
	cfg.PacketGSO = choice{"auto", []string{"auto", "offload", "partial", "full"}}
	cfg.PacketFilter = choice{"auto", []string{"auto", "tcx", "clsact"}}
	cfg.XDPMode = choice{"auto", []string{"auto", "native", "generic"}}
	cfg.ZeroCopy = choice{"auto", []string{"auto", "on", "off"}}
	cfg.Detached = choice{"reattach", []string{"reattach", "stop"}}
	cfg.LogLevel = choice{"info", []string{"debug", "info", "warn", "error"}}
	cfg.LogFormat = choice{"text", []string{"text", "json"}}

	fs.StringVar(&cfg.TUN, "tun", "udpfwd0", "`NAME` of the TUN device: created if missing, attached if it exists (at most 15 bytes)")
	fs.Var(&cfg.Addrs, "addr", "`PREFIX` to put on the TUN device, e.g. 198.18.0.1/24; repeatable or comma-separated")
	fs.IntVar(&cfg.MTU, "mtu", 0, "MTU of the TUN device in `BYTES`, 576 to 65535 and at most the NIC's; 0 leaves it")
	fs.Var(&cfg.Routes, "route", "destination `PREFIX` to route into the TUN device (ip route add PREFIX dev TUN); repeatable or comma-separated")
	fs.StringVar(&cfg.Ingress, "ingress", "", "`NAME` of a network device to forward from instead of a TUN device (a container's veth, a jumbo-frame link): packets for -ingress-redirect arriving on it go out of -nic, cut to its MTU; packets for -redirect arriving on -nic go out of it")
	fs.Var(&cfg.IngressRedirect, "ingress-redirect", "destination `PREFIX` behind -nic: packets to it arriving on -ingress are forwarded; repeatable or comma-separated (required with -ingress)")
	fs.Var(&cfg.Redirect, "redirect", "destination `PREFIX` behind the TUN device: packets to it arriving on the NIC go into the TUN; repeatable or comma-separated (default: the networks of -addr)")
	fs.IntVar(&cfg.Queues, "queues", 1, "`N` TUN queues, one forwarder each, 1 to 256 and at most the NIC's RX queues")
	fs.BoolVar(&cfg.GSO, "gso", true, "take TCP/UDP super-packets from the TUN and segment them here (false: the kernel segments before the TUN)")
	fs.BoolVar(&cfg.GRO, "gro", true, "coalesce the packets from the NIC into TCP (and, with USO, UDP) super-packets before the TUN, by the kernel's GRO rules")

	fs.StringVar(&cfg.NIC, "nic", "", "`NAME` of the NIC to transmit on and receive from (required)")
	fs.Var(&cfg.NextHop, "next-hop", "`ADDR` of the NIC-side gateway for every destination (default: each destination's route through the NIC)")
	fs.Var(&cfg.Port, "port", "NIC port `KIND`: xdp (AF_XDP), packet (AF_PACKET) or auto (AF_XDP where the driver takes zero-copy sockets, else AF_PACKET, with whole super-packets where the NIC segments them)")
	fs.Var(&cfg.PacketGSO, "packet-gso", "what an AF_PACKET port leaves to the NIC (`MODE`): auto (whole super-packets where the NIC segments them, else checksums), offload (as auto; fails without TSO/USO), partial (checksums only) or full (nothing)")
	fs.Var(&cfg.PacketFilter, "packet-filter", "how an AF_PACKET port attaches the ingress program that keeps the -redirect packets from the host (`MODE`): auto (tcx, else clsact), tcx (Linux 6.6) or clsact (a cls_bpf filter on a clsact qdisc, for older kernels)")
	fs.Var(&cfg.XDPMode, "xdp-mode", "XDP attach `MODE`: auto (native, else generic), native or generic")
	fs.Var(&cfg.ZeroCopy, "xdp-zerocopy", "bind the AF_XDP sockets in zero-copy mode (`MODE`): auto (where the driver takes it; else -port xdp binds in copy mode and -port auto takes AF_PACKET), on (fail naming the driver where it does not) or off (copy mode; -port auto takes AF_PACKET)")
	fs.DurationVar(&cfg.BusyPoll, "busy-poll", 0, "busy-poll the AF_XDP sockets for up to `DURATION` per wait (SO_PREFER_BUSY_POLL), 1us to 1ms; 0: off. Wants napi_defer_hard_irqs and gro_flush_timeout set on the NIC")
	fs.Var(&cfg.Detached, "xdp-detached", "what to do when the XDP program is detached from outside (`ACTION`): reattach (log, count and attach it again) or stop (exit 1)")

	fs.Var(&cfg.Budget, "budget", "send budget per TUN queue in truesize `BYTES`, 544K to 543M (suffixes K, M, G are powers of 1024), or auto for the self-sizing limit; a fixed budget also sizes the AF_XDP frames")
	fs.IntVar(&cfg.TxQueueLen, "tx-queue-len", 0, "at most `N` segments queued or in flight per TUN queue, 1 to the TX frames (2048 with -budget auto; needs -queues 1); 0: every TX frame")
	fs.BoolVar(&cfg.Backpressure, "backpressure", true, "stop reading the TUN while the budget is full (false: drop what does not fit, for comparison only)")
	fs.DurationVar(&cfg.DrainTimeout, "drain-timeout", 5*time.Second, "time (`DURATION`) to stop and send what is queued after SIGINT or SIGTERM, 100ms to 10m")

	fs.StringVar(&cfg.Metrics, "metrics", "127.0.0.1:9464", "`ADDR` (host:port) to serve Prometheus /metrics on; empty disables")
	fs.BoolVar(&cfg.Pprof, "pprof", false, "also serve /debug/pprof/ on the -metrics address")
	fs.Var(&cfg.LogLevel, "log-level", "log `LEVEL`: debug, info, warn or error")
	fs.Var(&cfg.LogFormat, "log-format", "log `FORMAT`: text or json")
	fs.BoolVar(&cfg.Verbose, "v", false, "print one stats line per second to stderr")

	fs.BoolVar(&cfg.RouteTakeover, "route-takeover", false, "take over a -route prefix that the host already routes elsewhere, for as long as udpfwd runs: udpfwd's route goes in front of the host's, which stays; without it such a -route is refused")
	fs.StringVar(&cfg.User, "user", "", "`USER` (name or uid) to switch to after set-up; needs CAP_SETUID and CAP_SETGID")
	fs.BoolVar(&cfg.Version, "version", false, "print the version (module, VCS revision and time, Go) and exit")
	explainFlags(fs)
	return fs
}

// flagGroups orders the flags in the help text.
var flagGroups = []struct {
	title string
	names []string
}{
	{"TUN side", []string{"tun", "addr", "mtu", "route", "route-takeover", "redirect", "queues", "gso", "gro"}},
	{"Ingress device (instead of the TUN)", []string{"ingress", "ingress-redirect"}},
	{"NIC side", []string{"nic", "next-hop", "port", "packet-gso", "packet-filter", "xdp-mode", "xdp-zerocopy", "busy-poll", "xdp-detached"}},
	{"Transmit path", []string{"budget", "tx-queue-len", "backpressure", "drain-timeout"}},
	{"Observability", []string{"metrics", "pprof", "log-level", "log-format", "v"}},
	{"Privileges", []string{"user"}},
	{"Information", []string{"version"}},
}

// applyEnv sets every flag that the command line did not from its
// environment variable: the command line wins.
func applyEnv(fs *flag.FlagSet, lookupEnv func(string) (string, bool)) problems {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var p problems
	fs.VisitAll(func(f *flag.Flag) {
		v, ok := lookupEnv(envName(f.Name))
		if !ok || given[f.Name] {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			p.add("%s=%q (for -%s): %v", envName(f.Name), v, f.Name, err)
		}
	})
	return p
}

// printUsage writes the grouped help text.
func printUsage(w io.Writer) {
	fs := newFlagSet(new(config))
	fmt.Fprint(w, `Usage: udpfwd -nic NAME [flags]

udpfwd forwards between a TUN device and a NIC: super-packets from the TUN
are segmented in software and sent through AF_XDP with backpressure;
packets for -redirect prefixes arriving on the NIC are written into the TUN.

Every flag can also be set with an environment variable UDPFWD_<NAME>
(upper case, '-' as '_': UDPFWD_NIC, UDPFWD_TX_QUEUE_LEN); a flag on the
command line wins. Lists take comma-separated values.
`)
	for _, g := range flagGroups {
		fmt.Fprintf(w, "\n%s:\n", g.title)
		for _, name := range g.names {
			printFlag(w, fs.Lookup(name))
		}
	}
	fmt.Fprint(w, "\nExit status: 0 clean stop, 1 failure, 2 bad flags or environment;\n"+
		"128+N when a second signal N stops it at once. See docs/udpfwd.md.\n")
}

// printFlag writes one flag's help entry, like flag.PrintDefaults.
func printFlag(w io.Writer, f *flag.Flag) {
	arg, usage := flag.UnquoteUsage(f)
	fmt.Fprintf(w, "  -%s", f.Name)
	if arg != "" {
		fmt.Fprintf(w, " %s", arg)
	}
	fmt.Fprintf(w, "\n    \t%s", usage)
	if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
		fmt.Fprintf(w, " (default %s)", f.DefValue)
	}
	fmt.Fprintf(w, " [$%s]\n", envName(f.Name))
}

// unknownEnv names each UDPFWD_* variable in environ that sets no flag,
// with the closest one that does: a misspelled variable is otherwise
// ignored without a word.
func unknownEnv(environ []string) []string {
	var known []string
	newFlagSet(new(config)).VisitAll(func(f *flag.Flag) { known = append(known, envName(f.Name)) })
	var msgs []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix) || slices.Contains(known, name) {
			continue
		}
		best := slices.MinFunc(known, func(a, b string) int { return editDistance(name, a) - editDistance(name, b) })
		msgs = append(msgs, fmt.Sprintf("%s sets no option and is ignored (did you mean %s?)", name, best))
	}
	return msgs
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
