//go:build !linux

package uapi

import (
	"fmt"
	"runtime"

	"github.com/gsoplane/gsoplane/dataplane/frame"
)

// A Server serves a Handler on a unix stream socket; there is none on
// this system.
type Server struct{}

// Listen returns an error: the server is Linux's.
func Listen(path string, h *Handler) (*Server, error) {
	return nil, fmt.Errorf("uapi: server %w on %s", frame.ErrNotSupported, runtime.GOOS)
}

// Serve and Close, which Server has on Linux, so that programs using it
// build on any system.
func (*Server) Serve() error {
	return fmt.Errorf("uapi: server %w on %s", frame.ErrNotSupported, runtime.GOOS)
}
func (*Server) Close() error { return nil }
