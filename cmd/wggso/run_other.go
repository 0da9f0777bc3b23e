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
// refused: the data path needs Linux.
func run(_ context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parse(args, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case err == nil && cfg.Version:
		fmt.Fprintln(stdout, "wggso", version())
		return exitOK
	}
	fmt.Fprintf(stderr, "wggso: needs Linux (TUN, UDP_SEGMENT, UDP_GRO); this is %s\n", runtime.GOOS)
	return exitFailure
}
