package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/gsoplane/gsoplane/dataplane/wireguard/uapi"
	"github.com/gsoplane/gsoplane/internal/buildinfo"
)

// Exit statuses (see the package comment).
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

func main() { os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr)) }

// config is what the command line says.
type config struct {
	Foreground bool
	Version    bool
	LogFile    string
	LogLevel   string
	Queues     int
	Metrics    string
	MetricsSet bool // -metrics was given: its address must be served
	Pprof      bool
	Interface  string
}

// defaultMetrics is -metrics's default: loopback, as udpfwd's, on a port
// of its own. Where another interface's wggso holds it (wg-quick starts
// every interface with the same command line), the next runs without
// metrics and says so; an address given with -metrics must be served.
const defaultMetrics = "127.0.0.1:9465"

func newFlagSet(cfg *config, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("wggso", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.BoolVar(&cfg.Foreground, "f", false, "stay in the foreground (log to stderr)")
	fs.BoolVar(&cfg.Version, "version", false, "print the version and exit")
	fs.StringVar(&cfg.LogFile, "log", "", "append the log to `file` (default: stderr with -f, none in the background)")
	fs.StringVar(&cfg.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.IntVar(&cfg.Queues, "queues", 1, "TUN queues, one forwarder each")
	fs.StringVar(&cfg.Metrics, "metrics", defaultMetrics, "`ADDR` (host:port) to serve Prometheus /metrics and /healthz on; empty disables")
	fs.BoolVar(&cfg.Pprof, "pprof", false, "also serve /debug/pprof/ on the -metrics address")
	fs.Usage = func() {
		fmt.Fprintln(out, "usage: wggso [-f] [flags] INTERFACE")
		fs.PrintDefaults()
	}
	return fs
}

// start reads the command line and answers what needs no system:
// -h, -version and usage errors (done, with the exit status).
func start(args []string, stdout, stderr io.Writer) (cfg *config, code int, done bool) {
	cfg, err := parse(args, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return nil, exitOK, true
	case err != nil:
		fmt.Fprintln(stderr, "wggso:", err)
		return nil, exitUsage, true
	case cfg.Version:
		fmt.Fprintln(stdout, "wggso", version())
		return nil, exitOK, true
	}
	return cfg, 0, false
}

// parse reads the command line; a usage error is printed.
func parse(args []string, stderr io.Writer) (*config, error) {
	cfg := new(config)
	fs := newFlagSet(cfg, stderr)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	fs.Visit(func(f *flag.Flag) { cfg.MetricsSet = cfg.MetricsSet || f.Name == "metrics" })
	if cfg.Version {
		return cfg, nil
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return nil, fmt.Errorf("want one INTERFACE, got %d arguments", fs.NArg())
	}
	cfg.Interface = fs.Arg(0)
	if _, err := uapi.SocketPath(cfg.Interface); err != nil {
		return nil, err
	}
	if cfg.Queues < 1 || cfg.Queues > 256 {
		return nil, fmt.Errorf("-queues %d, want 1 to 256", cfg.Queues)
	}
	if _, ok := logLevels[cfg.LogLevel]; !ok {
		return nil, fmt.Errorf("-log-level %q, want debug, info, warn or error", cfg.LogLevel)
	}
	return cfg, nil
}

var logLevels = map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}

// version is the one-line version: the build and Go's.
func version() string {
	b := buildinfo.Read()
	return b.String() + ", " + b.Go
}
