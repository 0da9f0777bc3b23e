//go:build !linux

package udp

import (
	"fmt"
	"net"
	"runtime"

	"github.com/gsoplane/gsoplane/dataplane/pipeline"
)

// Sink sends segments as UDP datagrams; there is none on this system.
type Sink struct{}

// NewSink returns an error: UDP_SEGMENT is Linux's.
func NewSink(conn *net.UDPConn, cfg SinkConfig) (*Sink, error) {
	return nil, fmt.Errorf("udp: sink %w on %s", pipeline.ErrNotSupported, runtime.GOOS)
}

// Receiver receives tunnel datagrams; there is none on this system.
type Receiver struct{}

// NewReceiver returns an error: UDP_GRO is Linux's.
func NewReceiver(conn *net.UDPConn, cfg ReceiverConfig) (*Receiver, error) {
	return nil, fmt.Errorf("udp: receiver %w on %s", pipeline.ErrNotSupported, runtime.GOOS)
}
