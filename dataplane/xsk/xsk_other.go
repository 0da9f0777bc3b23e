//go:build !linux

package xsk

import (
	"fmt"
	"runtime"
)

// Port is an XDP program with AF_XDP sockets; there is none on this
// system.
type Port struct{}

// Open returns an error: AF_XDP is Linux's.
func Open(cfg Config) (*Port, error) {
	if _, err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("xsk: %w on %s", ErrUnsupported, runtime.GOOS)
}
