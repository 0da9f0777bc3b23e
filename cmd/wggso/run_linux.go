package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/gsoplane/gsoplane/dataplane/wireguard/uapi"
	"github.com/gsoplane/gsoplane/dataplane/wireguard/wgtunnel"
	"github.com/gsoplane/gsoplane/internal/chachapoly"
	"github.com/gsoplane/gsoplane/internal/httpserve"
	"github.com/gsoplane/gsoplane/internal/privs"
)

// readyEnv names the file descriptor on which a background process
// says it is ready ("ok") or why it failed.
const readyEnv = "WGGSO_READY_FD"

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, code, done := start(args, stdout, stderr)
	switch {
	case done:
		return code
	case !cfg.Foreground:
		return background(args, stderr)
	}
	ready := func(err error) {}
	if fd, err := strconv.Atoi(os.Getenv(readyEnv)); err == nil {
		os.Unsetenv(readyEnv)
		f := os.NewFile(uintptr(fd), "ready")
		ready = func(err error) {
			msg := "ok"
			if err != nil {
				msg = err.Error()
			}
			f.WriteString(msg)
			f.Close()
		}
	}
	logOut := stderr
	if cfg.LogFile != "" {
		f, err := os.OpenFile(cfg.LogFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if err != nil {
			fmt.Fprintln(stderr, "wggso:", err)
			ready(err)
			return exitFailure
		}
		defer f.Close()
		logOut = f
	}
	log := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: logLevels[cfg.LogLevel]}))
	if err := serve(ctx, cfg, log, dropPrivileges, ready); err != nil {
		log.Error("wggso: stopped", "err", err)
		return exitFailure
	}
	return exitOK
}

// background starts wggso again with -f, in a session of its own and
// with no terminal, and waits until it is ready or has failed.
func background(args []string, stderr io.Writer) int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "wggso:", err)
		return exitFailure
	}
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Fprintln(stderr, "wggso:", err)
		return exitFailure
	}
	defer r.Close()
	cmd := exec.Command(exe, append([]string{"-f"}, args...)...)
	cmd.Env = append(os.Environ(), readyEnv+"=3")
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		fmt.Fprintln(stderr, "wggso:", err)
		return exitFailure
	}
	msg, _ := io.ReadAll(r)
	if bytes.Equal(msg, []byte("ok")) {
		cmd.Process.Release()
		return exitOK
	}
	werr := cmd.Wait()
	if len(msg) == 0 {
		msg = []byte(fmt.Sprintf("the background process ended (%v); run with -f to see why", werr))
	}
	fmt.Fprintf(stderr, "wggso: %s\n", msg)
	return exitFailure
}

// serve binds the metrics address, creates the interface and its
// configuration socket, calls drop (the binary's dropPrivileges; nil
// from the tests, which serve in their own process), and serves the
// socket and the metrics until a signal (SIGINT, SIGTERM), the socket
// file's removal or the interface's deletion (nil), or a failure. ready
// gets nil once all that is done, before the serving, or why not.
func serve(ctx context.Context, cfg *config, log *slog.Logger, drop func() error, ready func(error)) (err error) {
	// Before the socket appears: whoever sees it may signal at once.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	path, _ := uapi.SocketPath(cfg.Interface) // parse checked it
	ln, err := listenMetrics(cfg, log)
	if err != nil {
		ready(err)
		return err
	}
	if ln != nil {
		defer ln.Close()
	}
	dev, err := wgtunnel.New(wgtunnel.Config{Name: cfg.Interface, Queues: cfg.Queues, Logger: log})
	if err != nil {
		ready(err)
		return err
	}
	defer func() { err = errors.Join(err, dev.Close()) }()
	srv, err := uapi.Listen(path, uapi.NewHandler(dev, uapi.Limits{}))
	if err != nil {
		ready(err)
		return err
	}
	defer srv.Close()
	if drop != nil {
		if err := drop(); err != nil {
			ready(err)
			return err
		}
	}
	metrics, stopMetrics := serveMetrics(ln, dev, cfg, log)
	defer stopMetrics()
	caps, _ := privs.Effective()
	log.Info("wggso: up", "interface", dev.Name(), "socket", path, "metrics", metricsAddr(ln),
		"pid", os.Getpid(), "version", version(), "aead", chachapoly.Implementation(), "capabilities", caps.String())
	ready(nil)

	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	ran := make(chan error, 1)
	go func() { ran <- dev.Run(ctx) }()
	select {
	case <-ctx.Done():
		log.Info("wggso: stopping on a signal")
	case err = <-metrics:
	case err = <-served:
		if errors.Is(err, uapi.ErrSocketRemoved) {
			log.Info("wggso: stopping: the socket file was removed")
			err = nil
		}
	case err = <-ran:
		if errors.Is(err, wgtunnel.ErrDeviceRemoved) {
			log.Info("wggso: stopping: the interface was deleted")
			err = nil
		}
		ran <- nil
	}
	stop()
	srv.Close()
	return errors.Join(err, <-ran)
}

// listenMetrics binds -metrics's address (none: nil). The default
// address taken (another interface's wggso has it) or not there (a
// namespace whose loopback is down) is not fatal: the interface runs
// without metrics, and the log says why.
func listenMetrics(cfg *config, log *slog.Logger) (net.Listener, error) {
	ln, err := httpserve.Listen(cfg.Metrics)
	if err != nil && !cfg.MetricsSet && (errors.Is(err, syscall.EADDRINUSE) || errors.Is(err, syscall.EADDRNOTAVAIL)) {
		log.Warn("wggso: no metrics: the default address is taken or not there; give this interface -metrics ADDR", "error", err)
		return nil, nil
	}
	return ln, err
}

// metricsAddr is what the log says of the metrics: the address served,
// or off.
func metricsAddr(ln net.Listener) string {
	if ln == nil {
		return "off"
	}
	return ln.Addr().String()
}

// serveMetrics serves the device's metrics and health on ln (nil: none)
// until stop; the channel reports a failure.
func serveMetrics(ln net.Listener, dev *wgtunnel.Device, cfg *config, log *slog.Logger) (failed <-chan error, stop func()) {
	errc := make(chan error, 1)
	if ln == nil {
		return errc, func() {}
	}
	srv := httpserve.New(newRegistry(collector{dev}), httpserve.Config{
		Name: "wggso", Version: version(), Health: func() error { return health(dev) }, Pprof: cfg.Pprof, Logger: log,
	})
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("metrics server: %w", err)
		}
	}()
	return errc, func() { srv.Close() }
}
