// Command bench is gsoplane's benchmark: the three classic experiments
// behind the project, side by side with peers, on a topology it builds
// itself (two network namespaces, a veth pair, the gateway in process) and
// removes afterwards.
//
//	sudo go run ./bench                      # every scenario, 3 runs each
//	sudo go run ./bench -scenario gso -runs 5 -duration 5s
//	sudo go run ./bench -json -out results.json
//	sudo go run ./bench -scenario gso -html report.html
//	sudo go run ./bench -scenario ingress -rows packet,floor -cpuprofile cpu.pprof
//
// Scenarios:
//
//	backpressure  UDP_SEGMENT stream through a paced TX path, budget on/off
//	gso           TCP stream: the default gateway (PortAuto's choice: the
//	              product), the floor, kernel only, the AF_PACKET port in
//	              each TX mode (offload, partial, full) and the AF_XDP one
//	              (with TUN offloads, without TX checksums, without TUN
//	              offloads)
//	gro           TCP stream B→A through the return path: the AF_PACKET
//	              port behind the kernel's GRO (the product), the floor,
//	              kernel only, wireguard-go's TUN writer, the AF_XDP port
//	              with GRO on and off, and its forward direction
//	queues        TCP with one or two queues, one or two streams, both ways
//	hook          64-byte packets, many flows: no hook, no-op hook, inspecting hook
//	              (AF_XDP), and no hook on the AF_PACKET port
//	xdphook       the hook rows at Mpps: an AF_XDP generator in a third namespace
//	              feeding the gateway's AF_XDP ingress port (and its AF_PACKET
//	              one), the generator alone, and the TUN fast path
//	ingress       TCP stream from a container's veth (TSO) through the
//	              gateway's ingress port (AF_PACKET, AF_XDP), vs the floor,
//	              vs the kernel forwarding, vs the TUN
//	peers         TCP stream with wireguard-go's TUN reader and Tailscale's
//	              GSOSplit in place of gsoplane's reader and segmenter
//	tunnel        a VPN between two namespaces, a TCP stream each way:
//	              gsoplane's Tunnel vs wireguard-go's TUN and StdNetBind
//	              (plaintext), examples/vpn vs a wireguard-go device
//	              (encrypted), the kernel alone
//	wireguard     the same VPN through real WireGuard: gsoplane's (wgtunnel,
//	              the product) vs a wireguard-go device, and the plaintext
//	              Tunnel
//
// The floor rows (floor_linux.go) bound what a userspace path can do on
// the topology: a minimal program, written for the bench, that copies
// each super-packet twice each way (a read into its buffer, the kernel's
// copy at the send or the write) and does nothing else, where the
// gateway would run. The product's row (the gateway as shipped) comes
// first in its table, marked "(product)".
//
// Every row is measured -runs times (interleaved with the other rows of its
// scenario), each run for -duration after -warmup; tables show the median
// run with the minimum and maximum. Progress goes to stderr, a line per
// second with the count of the rows' runs ("row 7/23") and the estimated
// time left; on a terminal it is one line rewritten in place. It needs
// root (network namespaces, TUN, AF_XDP, BPF) and Linux, and no other
// binary; iperf3, when installed, adds a row.
//
// Output: the text starts with the gsoplane version (module version and
// VCS revision, as the build recorded them, else as git in the source
// directory says), the machine (host, CPU model
// and count, kernel release, Go version) and the flags given; then a table
// per scenario with the ratios that explain it (every row with its CPU
// cost: the gateway's cores per Gbit/s, its CPU time being the process's
// less that of the threads the traffic goroutines are locked to, and the
// machine's busy cores per Gbit/s; and the copies of each super-packet on
// its path); then the targets block:
// each target the project sets (the table targets in targets.go), a ratio
// of a row to its peer in the same run, with both figures, the threshold
// and whether it was met. The bench reports targets and never fails for
// one.
//
// -json prints, and -out saves, the same results as JSON: schema_version
// 1, the version and machine, the flags, scenarios → rows → runs, and the
// targets; docs/bench-json.md documents every field and the compatibility
// rule (fields are only added within a schema version). -html FILE writes
// a self-contained HTML report: the header, per scenario its table and
// bar charts of its main metric and of the gateway's and the machine's
// cores per Gbit/s (median, whiskers from the least to the greatest run;
// the product's bar in its own colour, beside the floor's and the
// kernel's), and the targets coloured by outcome; inline CSS and SVG,
// no script, nothing fetched.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	// The first Ctrl-C (or SIGTERM) stops the bench, which then removes
	// its namespaces; a second one kills it at once (the next run will
	// then refuse to start and say how to remove the leftovers).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() { <-ctx.Done(); stop() }()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes.
const (
	exitOK          = 0
	exitFailed      = 1 // a run failed
	exitUsage       = 2 // bad flags, not root, leftovers
	exitInterrupted = 130
)

// scenarioNames lists the scenarios in the order they run.
var scenarioNames = []string{"backpressure", "gso", "tunnel-gso", "gro", "queues", "hook", "xdphook", "ingress", "peers", "tunnel", "wireguard"}

// options are the parsed flags.
type options struct {
	scenarios  []string
	rows       []string // row names to run (-rows); nil: every row
	measure    measureOpts
	lineRate   int64
	json       bool
	out        string
	html       string
	cpuprofile string
	link       string      // "veth", or "nics": the real NICs netlab.NICsEnv names
	flags      []flagValue // every flag, by name
}

// flagValue is a flag's value as the run used it.
type flagValue struct {
	name, value string
	set         bool // given on the command line, not the default
}

// flagMap is every flag's value by name.
func (o options) flagMap() map[string]string {
	m := make(map[string]string, len(o.flags))
	for _, f := range o.flags {
		m[f.name] = f.value
	}
	return m
}

// setFlags is the flags given on the command line, such as
// "-duration=1s -runs=1", or "(defaults)".
func (o options) setFlags() string {
	var set []string
	for _, f := range o.flags {
		if f.set {
			set = append(set, "-"+f.name+"="+f.value)
		}
	}
	if len(set) == 0 {
		return "(defaults)"
	}
	return strings.Join(set, " ")
}

// run parses args and runs the selected scenarios; it returns the exit
// code. It is main without the process around it, for tests.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	opts, code, err := parseFlags(args, stderr)
	if err != nil {
		if code != exitOK {
			fmt.Fprintf(stderr, "bench: %v\n", err)
		}
		return code
	}
	return execute(ctx, opts, stdout, stderr)
}

func parseFlags(args []string, stderr io.Writer) (options, int, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scen := fs.String("scenario", "all", "scenarios to run, comma-separated: "+strings.Join(scenarioNames, ", ")+", or all")
	duration := fs.Duration("duration", 3*time.Second, "measured time per run, after the warm-up")
	warmup := fs.Duration("warmup", time.Second, "time per run before measuring starts (excluded)")
	runs := fs.Int("runs", 3, "runs per row; the median is reported with min–max")
	rate := bitrate(1e9)
	fs.Var(&rate, "line-rate", "emulated line rate of the backpressure scenario, bit/s (suffixes k, M, G)")
	jsonOut := fs.Bool("json", false, "print the results as JSON on stdout instead of tables")
	out := fs.String("out", "", "also save the results as JSON to this file")
	html := fs.String("html", "", "also write the results as a self-contained HTML report to this file")
	verbose := fs.Bool("v", false, "verbose: every run's numbers and sar-like CPU details")
	rows := fs.String("rows", "", "run only these rows of each scenario, comma-separated names (such as packet,floor); empty: every row")
	cpuprofile := fs.String("cpuprofile", "", "write a Go CPU profile of the whole run to this file")
	link := fs.String("link", "veth", "the wire between the gateway's NIC and the receiver: veth, a veth pair; or nics, two real NICs joined by a wire, named by $GSOPLANE_NICS (e.g. eth0,eth1), which the runs borrow")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: sudo go run ./bench [flags]\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return options{}, exitOK, err
		}
		return options{}, exitUsage, err
	}
	if fs.NArg() > 0 {
		return options{}, exitUsage, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o := options{
		measure:  measureOpts{warmup: *warmup, duration: *duration, runs: *runs, verbose: *verbose},
		lineRate: int64(rate), json: *jsonOut, out: *out, html: *html, cpuprofile: *cpuprofile, link: *link,
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	fs.VisitAll(func(f *flag.Flag) { o.flags = append(o.flags, flagValue{f.Name, f.Value.String(), set[f.Name]}) })
	switch {
	case *duration <= 0:
		return o, exitUsage, fmt.Errorf("-duration must be positive")
	case *warmup < 0:
		return o, exitUsage, fmt.Errorf("-warmup must not be negative")
	case *runs < 1:
		return o, exitUsage, fmt.Errorf("-runs must be at least 1")
	case rate <= 0:
		return o, exitUsage, fmt.Errorf("-line-rate must be positive")
	case *link != "veth" && *link != "nics":
		return o, exitUsage, fmt.Errorf("-link %q: veth or nics", *link)
	}
	for _, s := range strings.Split(*scen, ",") {
		s = strings.TrimSpace(s)
		switch {
		case s == "all":
			o.scenarios = append(o.scenarios, scenarioNames...)
		case contains(scenarioNames, s):
			o.scenarios = append(o.scenarios, s)
		default:
			return o, exitUsage, fmt.Errorf("unknown scenario %q (have %s)", s, strings.Join(scenarioNames, ", "))
		}
	}
	o.scenarios = dedupe(o.scenarios)
	for _, r := range strings.Split(*rows, ",") {
		if r = strings.TrimSpace(r); r != "" {
			o.rows = append(o.rows, r)
		}
	}
	return o, exitOK, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func dedupe(list []string) []string {
	var out []string
	for _, s := range list {
		if !contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// bitrate is a flag value in bit/s with an optional k, M or G suffix.
type bitrate int64

func (b *bitrate) String() string { return formatRate(float64(*b)) }

func (b *bitrate) Set(s string) error {
	mult := 1.0
	switch {
	case strings.HasSuffix(s, "G"), strings.HasSuffix(s, "g"):
		mult, s = 1e9, s[:len(s)-1]
	case strings.HasSuffix(s, "M"), strings.HasSuffix(s, "m"):
		mult, s = 1e6, s[:len(s)-1]
	case strings.HasSuffix(s, "k"), strings.HasSuffix(s, "K"):
		mult, s = 1e3, s[:len(s)-1]
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v <= 0 {
		return fmt.Errorf("bit rate %q: want a positive number with an optional k, M or G", s)
	}
	*b = bitrate(v * mult)
	return nil
}

func formatRate(bps float64) string {
	switch {
	case bps >= 1e9 && int64(bps)%1e9 == 0:
		return fmt.Sprintf("%gG", bps/1e9)
	case bps >= 1e6:
		return fmt.Sprintf("%gM", bps/1e6)
	}
	return strconv.FormatFloat(bps, 'f', -1, 64)
}
