//go:build !linux

package main

import (
	"context"
	"fmt"
	"io"
)

// execute refuses: the bench needs Linux network namespaces, TUN and AF_XDP.
func execute(ctx context.Context, o options, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "bench: needs Linux (network namespaces, TUN with virtio-net headers, AF_XDP)")
	return exitUsage
}

// kernelRelease is "": only Linux is measured.
func kernelRelease() string { return "" }

// terminalWidth is 0: progress is only written on Linux.
func terminalWidth(w io.Writer) int { return 0 }
