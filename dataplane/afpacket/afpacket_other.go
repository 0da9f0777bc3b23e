//go:build !linux

package afpacket

import (
	"fmt"
	"net/netip"
	"runtime"

	"github.com/gsoplane/gsoplane/dataplane/pipeline"
)

// Port is a set of AF_PACKET sockets; there is none on this system.
type Port struct{}

// Socket is an AF_PACKET socket; there is none on this system.
type Socket struct{}

// Sink transmits on an AF_PACKET socket; there is none on this system.
type Sink struct{}

// Open returns an error: AF_PACKET is Linux's.
func Open(cfg Config) (*Port, error) {
	if _, err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("afpacket: %w on %s", pipeline.ErrNotSupported, runtime.GOOS)
}

// NewSink returns an error: AF_PACKET is Linux's.
func NewSink(s *Socket, ifindex int, gateway netip.Addr, mode GSOMode) (*Sink, error) {
	return nil, fmt.Errorf("afpacket: sink %w on %s", pipeline.ErrNotSupported, runtime.GOOS)
}
