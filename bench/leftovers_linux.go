package main

// Namespaces left behind by a bench run that could not clean up (killed,
// or crashed in a goroutine) are swept when the next run starts; a bench
// still running in another process stops this one, since the two would
// share the cores and spoil each other's figures.

import (
	"fmt"
	"io"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// checkLeftovers removes stale namespaces, saying so, and reports whether
// another bench is running.
func checkLeftovers(stderr io.Writer) (busy bool) {
	for _, name := range netlab.SweepStale() {
		fmt.Fprintf(stderr, "bench: removed namespace %s, left behind by a run that did not clean up\n", name)
	}
	for _, pid := range netlab.Owners(labTag) {
		fmt.Fprintf(stderr, "bench: another bench run (pid %d) is running: wait for it to finish.\n", pid)
		busy = true
	}
	return busy
}
