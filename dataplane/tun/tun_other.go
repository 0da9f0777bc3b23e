//go:build !linux

package tun

import (
	"fmt"
	"runtime"

	"github.com/gsoplane/gsoplane/dataplane/pipeline"
)

// Device is an open TUN device; there is none on this system.
type Device struct{}

// Open returns an error: TUN devices with virtio-net headers are Linux's.
func Open(cfg Config) (*Device, error) {
	if _, err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("tun: TUN device on %s: %w", runtime.GOOS, pipeline.ErrNotSupported)
}
