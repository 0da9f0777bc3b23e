//go:build !linux

package dataplane

import (
	"context"
	"fmt"
	"runtime"
)

// Gateway forwards between a TUN device and a NIC; there is none on this
// system.
type Gateway struct{}

// OpenGateway returns an error wrapping ErrNotSupported: the gateway
// needs Linux.
func OpenGateway(cfg GatewayConfig) (*Gateway, error) {
	return nil, fmt.Errorf("dataplane: gateway on %s: %w", runtime.GOOS, ErrNotSupported)
}

// OpenTUNHost returns an error wrapping ErrNotSupported: TUN devices with
// virtio-net headers are Linux's.
func OpenTUNHost(o TUNOptions) (*Host, error) {
	return nil, fmt.Errorf("dataplane: TUN device on %s: %w", runtime.GOOS, ErrNotSupported)
}

// Run returns at once.
func (g *Gateway) Run(ctx context.Context) error { return nil }

// Close does nothing.
func (g *Gateway) Close() error { return nil }

// Stats returns zero counters.
func (g *Gateway) Stats() GatewayStats { return GatewayStats{} }
