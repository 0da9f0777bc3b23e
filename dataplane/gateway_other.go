//go:build !linux

package dataplane

import (
	"context"
	"fmt"
	"runtime"

	"github.com/gsoplane/gsoplane/dataplane/afpacket"
	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/dataplane/tun"
	"github.com/gsoplane/gsoplane/dataplane/xsk"
)

// errGateway is returned by OpenGateway and the methods of Gateway.
var errGateway = fmt.Errorf("dataplane: gateway on %s: %w", runtime.GOOS, ErrNotSupported)

// Gateway forwards between a TUN device and a NIC; there is none on this
// system.
type Gateway struct{}

// OpenGateway returns an error wrapping ErrNotSupported: the gateway
// needs Linux.
func OpenGateway(cfg GatewayConfig) (*Gateway, error) { return nil, errGateway }

// OpenTUNHost returns an error wrapping ErrNotSupported: TUN devices with
// virtio-net headers are Linux's.
func OpenTUNHost(o TUNOptions) (*Host, error) {
	return nil, fmt.Errorf("dataplane: TUN device on %s: %w", runtime.GOOS, ErrNotSupported)
}

// The methods Gateway has on Linux, so that programs using them build on
// any system. No Gateway opens here: they return zero values and errors
// wrapping ErrNotSupported.
func (*Gateway) Run(context.Context) error { return errGateway }
func (*Gateway) Close() error              { return errGateway }
func (*Gateway) ClosePorts() error         { return errGateway }
func (*Gateway) TUN() *tun.Device          { return nil }
func (*Gateway) Port() PortKind            { return 0 }
func (*Gateway) XDP() *xsk.Port            { return nil }
func (*Gateway) Packet() *afpacket.Port    { return nil }
func (*Gateway) Ifindex() int              { return 0 }
func (*Gateway) Queues() int               { return 0 }
func (*Gateway) Stats() GatewayStats       { return GatewayStats{} }
func (*Gateway) Pulses() []pipeline.Pulse  { return nil }
