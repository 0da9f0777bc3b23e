package main

import (
	"os"
	"syscall"
)

// watchSignals acts on SIGINT and SIGTERM from sigs until done is
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
