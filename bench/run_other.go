//go:build !linux

package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
)

// execute refuses: the bench needs Linux network namespaces, TUN and AF_XDP.
func execute(ctx context.Context, o options, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "bench: needs Linux (network namespaces, TUN with virtio-net headers, AF_XDP)")
	return exitUsage
}

// kernelRelease names the system.
func kernelRelease() string { return runtime.GOOS }
