//go:build !linux

package main

import (
	"context"
	"fmt"
	"io"
)

// run refuses to start: the dataplane needs Linux.
func run(_ context.Context, _ []string, _, stderr io.Writer) int {
	fmt.Fprintln(stderr, "udpfwd: needs Linux (TUN, AF_XDP)")
	return exitFailure
}
