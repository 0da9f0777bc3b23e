//go:build !linux

package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
)

// run answers -h, -version and usage errors; anything else is refused:
// the data path needs Linux.
func run(_ context.Context, args []string, stdout, stderr io.Writer) int {
	if _, code, done := start(args, stdout, stderr); done {
		return code
	}
	fmt.Fprintf(stderr, "wggso: needs Linux (TUN, UDP_SEGMENT, UDP_GRO); this is %s\n", runtime.GOOS)
	return exitFailure
}
