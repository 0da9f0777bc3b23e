package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/gsoplane/gsoplane/dataplane"
	"github.com/gsoplane/gsoplane/internal/httpserve"
	"github.com/gsoplane/gsoplane/internal/privs"
)

// run is udpfwd: it parses and checks the configuration, sets up the
// gateway, serves until SIGINT or SIGTERM and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseConfig(args, os.LookupEnv)
	if errors.Is(err, flag.ErrHelp) {
		printUsage(stdout)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "udpfwd: %v\nRun udpfwd -h for help.\n", err)
		return exitUsage
	}
	if cfg.Version {
		fmt.Fprintln(stdout, "udpfwd", version())
		return exitOK
	}
	log := newLogger(cfg, stderr)
	for _, msg := range append(unknownEnv(os.Environ()), cfg.warnings()...) {
		log.Warn(msg)
	}
	acct, err := preflight(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "udpfwd: %v\n", err)
		return exitUsage
	}
	// Signals are caught from here on: one during set-up stops the
	// gateway as soon as it runs, instead of killing udpfwd with the XDP
	// program still attached. SIGHUP (the terminal or session went away)
	// stops it cleanly too. A closed stderr (udpfwd -v | head) loses the
	// log lines after it, never the gateway: SIGPIPE is ignored.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, stopSignals...)
	defer signal.Stop(sigs)
	signal.Ignore(syscall.SIGPIPE)
	notify, err := newNotifier(os.Getenv, log)
	if err != nil {
		log.Warn("no systemd notifications", "err", err)
		notify = &notifier{}
	}
	defer notify.close()
	d, code := start(cfg, acct, log)
	if d == nil {
		return code
	}
	d.notify = notify
	return d.serve(ctx, sigs)
}

// daemon is a started udpfwd.
type daemon struct {
	cfg    *config
	log    *slog.Logger
	gw     *gateway
	ln     net.Listener      // nil without -metrics
	srv    *httpserve.Server // nil until the metrics server starts
	notify *notifier         // systemd's READY, STOPPING and WATCHDOG
	// stopping is set once a signal asked for the drain (/healthz: 503).
	stopping atomic.Bool
	// forced is the exit status a second signal set (128+N), 0 before:
	// the stop that finishes while the ports close exits with it too.
	forced atomic.Int32
}

// start binds the metrics address, opens the gateway, drops privileges
// and logs the effective configuration. On failure it undoes what it did
// and returns a nil daemon and the exit status.
func start(cfg *config, acct *privs.Account, log *slog.Logger) (*daemon, int) {
	ln, err := httpserve.Listen(cfg.Metrics)
	if err != nil {
		log.Error("cannot start", "err", err)
		return nil, exitFailure
	}
	gw, err := openGateway(cfg, log)
	if err != nil {
		closeListener(ln)
		log.Error("cannot start", "err", err)
		if errors.Is(err, dataplane.ErrInvalidConfig) {
			return nil, exitUsage
		}
		return nil, exitFailure
	}
	d := &daemon{cfg: cfg, log: log, gw: gw, ln: ln}
	if err := privs.Drop(keptCaps, acct); errors.Is(err, privs.ErrNoAllThreads) && acct == nil {
		log.Warn("capabilities not dropped", "err", err)
	} else if err != nil {
		log.Error("cannot drop privileges", "err", err)
		d.closeAll()
		return nil, exitFailure
	}
	d.logStarted()
	return d, exitOK
}

// closeAll closes the gateway and the metrics listener, logging failures.
func (d *daemon) closeAll() error {
	closeListener(d.ln)
	err := d.gw.close()
	if err != nil {
		d.log.Error("close", "err", err)
	}
	return err
}

func closeListener(ln net.Listener) {
	if ln != nil {
		ln.Close()
	}
}

// logStarted logs the one line with the effective configuration.
func (d *daemon) logStarted() {
	c, g, st := d.cfg, d.gw, d.gw.Stats()
	caps, _ := privs.Effective()
	metrics := "off"
	if d.ln != nil {
		metrics = d.ln.Addr().String()
	}
	inside := []any{"ingress", c.Ingress, "ingress_redirect", c.IngressRedirect.String()}
	if t := g.TUN(); t != nil {
		inside = []any{"tun", t.Name(), "offloads", t.Offloads().String(), "queues", len(t.Queues()),
			"mtu", g.mtu, "addr", c.Addrs.String(), "route", c.Routes.String()}
	}
	d.log.Info("udpfwd started", append(inside, "redirect", prefixList(c.redirects()).String(),
		"nic", c.NIC, "next_hop", c.NextHop.String(), "port", g.Port().String(), "port_mode", g.portMode(c),
		"nic_queues", g.Queues(), "gso", c.GSO, "gro", c.GRO,
		"budget", c.Budget.String(), "budget_limit", st.Budget.Limit, "tx_queue_len", c.TxQueueLen,
		"backpressure", c.Backpressure, "drain_timeout", c.DrainTimeout.String(),
		"metrics", metrics, "pprof", c.Pprof, "user", c.User, "uid", os.Geteuid(), "capabilities", caps.String(), "pid", os.Getpid(),
		"version", version())...)
}
