//go:build !linux

package tun

import (
	"fmt"
	"runtime"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/frame"
)

// errNotSupported is returned by Open and the methods below.
var errNotSupported = fmt.Errorf("tun: TUN device on %s: %w", runtime.GOOS, frame.ErrNotSupported)

// Device is an open TUN device; there is none on this system.
type Device struct{}

// Queue is one queue of a TUN device; there is none on this system.
type Queue struct{}

// Open returns an error: TUN devices with virtio-net headers are Linux's.
func Open(cfg Config) (*Device, error) {
	if _, err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	return nil, errNotSupported
}

// The methods Device and Queue have on Linux, so that programs using them
// build on any system. No Device opens here: they return zero values and
// errors wrapping frame.ErrNotSupported.
func (*Device) Name() string                          { return "" }
func (*Device) Index() int                            { return 0 }
func (*Device) Offloads() Offloads                    { return 0 }
func (*Device) HeaderSize() int                       { return 0 }
func (*Device) Queues() []*Queue                      { return nil }
func (*Device) Close() error                          { return errNotSupported }
func (*Queue) Read([][]byte, []int, int) (int, error) { return 0, errNotSupported }
func (*Queue) Write([][]byte, int) (int, error)       { return 0, errNotSupported }
func (*Queue) WriteVectors([][][]byte) (int, error)   { return 0, errNotSupported }
func (*Queue) SetReadDeadline(time.Time) error        { return errNotSupported }
