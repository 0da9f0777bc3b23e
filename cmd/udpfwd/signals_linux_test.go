package main

import (
	"os"
	"syscall"
	"testing"
)

// TestWatchSignals checks that the first signal stops and the second
// exits at once with 128+N.
func TestWatchSignals(t *testing.T) {
	sigs, done := make(chan os.Signal, 2), make(chan struct{})
	var stops []os.Signal
	now := make(chan os.Signal, 1)
	sigs <- syscall.SIGTERM
	sigs <- syscall.SIGINT
	watchSignals(sigs, done, func(s os.Signal) { stops = append(stops, s) }, func(s os.Signal) { now <- s })
	if len(stops) != 1 || stops[0] != syscall.SIGTERM {
		t.Errorf("stop called for %v, want once for SIGTERM", stops)
	}
	if s := <-now; signalExitCode(s) != 130 {
		t.Errorf("second signal %v: exit %d, want 130", s, signalExitCode(s))
	}

	close(done) // a clean stop: no signal, no call
	watchSignals(make(chan os.Signal), done, func(os.Signal) { t.Error("stop called") }, func(os.Signal) { t.Error("now called") })
}
