package main

import (
	"os"
	"syscall"
)

// stopSignals drain and stop the gateway: SIGINT, SIGTERM, and SIGHUP.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}

// watchSignals acts on the stopSignals from sigs until done is
// closed: the first one calls stop (drain and exit cleanly), a second
// one calls now (exit at once).
func watchSignals(sigs <-chan os.Signal, done <-chan struct{}, stop, now func(os.Signal)) {
	stopping := false
	for {
		select {
		case s := <-sigs:
			if stopping {
				now(s)
				return
			}
			stopping = true
			stop(s)
		case <-done:
			return
		}
	}
}

// signalExitCode is the shell's status for a process ended by sig: 128+N
// (130 for SIGINT, 143 for SIGTERM).
func signalExitCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return exitFailure
}
