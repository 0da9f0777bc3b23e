//go:build !linux

package udp

import (
	"fmt"
	"net"
	"runtime"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/frame"
)

// errNotSupported is returned by the methods below.
var errNotSupported = fmt.Errorf("udp: %w on %s", frame.ErrNotSupported, runtime.GOOS)

// Sink sends segments as UDP datagrams; there is none on this system.
type Sink struct{}

// NewSink returns an error: UDP_SEGMENT is Linux's.
func NewSink(conn *net.UDPConn, cfg SinkConfig) (*Sink, error) {
	return nil, fmt.Errorf("udp: sink %w on %s", frame.ErrNotSupported, runtime.GOOS)
}

// Receiver receives tunnel datagrams; there is none on this system.
type Receiver struct{}

// NewReceiver returns an error: UDP_GRO is Linux's.
func NewReceiver(conn *net.UDPConn, cfg ReceiverConfig) (*Receiver, error) {
	return nil, fmt.Errorf("udp: receiver %w on %s", frame.ErrNotSupported, runtime.GOOS)
}

// The methods Sink and Receiver have on Linux, so that programs using
// them build on any system. None of them is made here: they return zero
// values and errors wrapping frame.ErrNotSupported.
func (*Sink) Headroom() int                       { return 0 }
func (*Sink) FrameSize() int                      { return 0 }
func (*Sink) Frames() int                         { return 0 }
func (*Sink) Alloc([]frame.Frame) int             { return 0 }
func (*Sink) Free([]frame.Frame)                  {}
func (*Sink) Transmit([]frame.Frame) (int, error) { return 0, errNotSupported }
func (*Sink) Complete() (int, error)              { return 0, errNotSupported }
func (*Sink) Wait(time.Duration) error            { return errNotSupported }
func (*Sink) Stats() SinkStats                    { return SinkStats{} }
func (*Receiver) Headroom() int                   { return 0 }
func (*Receiver) Receive([][]byte) (int, error)   { return 0, errNotSupported }
func (*Receiver) Stats() ReceiverStats            { return ReceiverStats{} }
func (*Receiver) SetReadDeadline(time.Time) error { return errNotSupported }
