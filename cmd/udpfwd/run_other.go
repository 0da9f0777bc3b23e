//go:build !linux

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
)

// run prints the help (-h) or the version (-version); anything else is
// refused: the dataplane needs Linux.
func run(_ context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := new(config)
	err := newFlagSet(cfg).Parse(args)
	code := exitFailure
	switch {
	case errors.Is(err, flag.ErrHelp):
		printUsage(stdout)
		code = exitOK
	case err == nil && cfg.Version:
		fmt.Fprintln(stdout, "udpfwd", version())
		return exitOK
	}
	fmt.Fprintf(stderr, "udpfwd: needs Linux (TUN, AF_XDP, AF_PACKET); this is %s\n", runtime.GOOS)
	return code
}
