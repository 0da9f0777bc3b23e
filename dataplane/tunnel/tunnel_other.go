//go:build !linux

package tunnel

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/tun"
	"github.com/gsoplane/gsoplane/dataplane/udp"
)

// Tunnel is a VPN tunnel's data path; there is none on this system.
type Tunnel struct{}

var errNotSupported = fmt.Errorf("tunnel: %w on %s", frame.ErrNotSupported, runtime.GOOS)

// Open returns an error: the tunnel needs Linux's TUN, UDP_SEGMENT and
// UDP_GRO.
func Open(cfg Config) (*Tunnel, error) { return nil, errNotSupported }

// The methods Tunnel has on Linux, so that programs using it build on any
// system.
func (*Tunnel) Run(context.Context) error             { return errNotSupported }
func (*Tunnel) Close() error                          { return errNotSupported }
func (*Tunnel) MTU() int                              { return 0 }
func (*Tunnel) Device() *tun.Device                   { return nil }
func (*Tunnel) LocalAddr() netip.AddrPort             { return netip.AddrPort{} }
func (*Tunnel) Stats() Stats                          { return Stats{} }
func (*Tunnel) PeerStats() []udp.PeerStats            { return nil }
func (*Tunnel) Send(netip.AddrPort, []byte) error     { return errNotSupported }
func (*Tunnel) SetPeers([]udp.Peer) error             { return errNotSupported }
func (*Tunnel) SetEndpoint(int, netip.AddrPort) error { return errNotSupported }
func (*Tunnel) Peer(int) udp.Peer                     { return udp.Peer{} }
