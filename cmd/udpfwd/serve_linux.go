package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"time"

	"github.com/gsoplane/gsoplane/dataplane"
)

// serve runs the gateway, the metrics server and -v until SIGINT or
// SIGTERM arrives on sigs (or ctx ends), then stops within -drain-timeout
// and cleans up.
func (d *daemon) serve(ctx context.Context, sigs <-chan os.Signal) int {
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan struct{})
	defer close(done)
	go watchSignals(sigs, done, func(s os.Signal) {
		d.log.Info("stopping", "signal", s.String(), "drain_timeout", d.cfg.DrainTimeout.String())
		d.stopping.Store(true)
		d.notify.send("STOPPING=1")
		stop()
	}, d.exitNow)

	httpErr := d.startHTTP()
	if d.cfg.Verbose {
		go logStats(runCtx, d.log, d.gw.Stats, time.Second)
	}
	runDone := make(chan error, 1)
	go func() { runDone <- d.gw.Run(runCtx) }()
	d.notify.send("READY=1\nSTATUS=forwarding")
	go d.notify.pet(runCtx.Done(), moving(d.gw.Pulses))

	var failure error
	select {
	case err := <-runDone:
		if runCtx.Err() == nil {
			err = errors.Join(errors.New("the dataplane stopped by itself"), err)
		}
		return d.exit(d.finish(err))
	case err := <-httpErr:
		failure = err
		stop()
	case <-runCtx.Done():
	}
	return d.exit(d.drain(runDone, failure))
}

// exit is the exit status of a stop that ended with code: a second
// signal's (see exitNow) if one came.
func (d *daemon) exit(code int) int {
	if f := d.forced.Load(); f != 0 {
		return int(f)
	}
	return code
}

// drain waits up to -drain-timeout for the dataplane to stop reading and
// send what is queued (for 4/5 of it: sendTime; what is still queued then
// is discarded, counted and logged), then cleans up. Past the deadline it
// gives up (exit 1); the XDP program goes with the process.
func (d *daemon) drain(runDone <-chan error, failure error) int {
	t := time.NewTimer(d.cfg.DrainTimeout)
	defer t.Stop()
	select {
	case err := <-runDone:
		return d.finish(errors.Join(failure, err))
	case <-t.C:
		d.log.Error("drain deadline passed: exiting without waiting for the dataplane", "drain_timeout", d.cfg.DrainTimeout.String())
		return exitFailure
	}
}

// exitNow exits at once on a second signal, once the ports are closed:
// the kernel detaches a program that hangs on a BPF link the process
// holds (XDP, tcx) and removes a TUN device udpfwd created with the
// process, but keeps a cls_bpf filter (the AF_PACKET port before Linux
// 6.6), which would go on taking the redirected prefixes' packets from
// the host.
func (d *daemon) exitNow(s os.Signal) {
	code := signalExitCode(s)
	d.forced.Store(int32(code))
	d.log.Warn("second signal: exiting now", "signal", s.String())
	if err := d.gw.ClosePorts(); err != nil {
		d.log.Error("second signal: closing the ports", "err", err)
	}
	os.Exit(code)
}

// startHTTP serves the metrics listener, if any. The channel reports a
// server failure.
func (d *daemon) startHTTP() <-chan error {
	errc := make(chan error, 1)
	if d.ln == nil {
		return errc
	}
	reg := newRegistry(&statsCollector{stats: d.gw.Stats, port: d.gw.Port().String(), ingress: d.cfg.Ingress != "", backpressure: d.cfg.Backpressure})
	d.srv = newHTTPServer(reg, d.health, d.cfg.Pprof, d.log)
	go func() {
		if err := d.srv.Serve(d.ln); !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	return errc
}

// health says why the gateway does not forward now, or nil while it does:
// /healthz answers 503 with it.
func (d *daemon) health() error {
	if d.stopping.Load() {
		return errors.New("stopping: draining what is queued")
	}
	n := d.gw.Stats().NIC
	switch {
	case !n.Up:
		return errors.New("the NIC is down")
	case !n.Attached:
		return errors.New("the port's program is not attached to the NIC")
	}
	return nil
}

// finish stops the metrics server, reports what was left unsent, closes
// the gateway and returns the exit status.
func (d *daemon) finish(failure error) int {
	if d.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		d.srv.Shutdown(ctx)
		cancel()
	}
	st := d.gw.Stats()
	if left := st.Queue.Pending + st.Queue.InFlight; left > 0 {
		d.log.Warn("segments left unsent at stop", "segments", left)
	}
	closeErr := d.closeAll()
	d.log.Info("udpfwd stopped", "super_packets", st.Forward.SuperPackets, "segments", st.Forward.Segments,
		"returned", st.Return.Packets, "drops", totalDrops(st))
	switch {
	case errors.Is(failure, dataplane.ErrTUNGone):
		d.log.Error("the TUN device was deleted from outside: udpfwd stops (start it again to create the device)", "tun", d.cfg.TUN)
	case failure != nil:
		d.log.Error("udpfwd failed", "err", failure)
	}
	if failure != nil || closeErr != nil {
		return exitFailure
	}
	return exitOK
}
