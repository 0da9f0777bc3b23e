//go:build !linux

package afpacket

import (
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/segment"
)

// errNotSupported is returned by the constructors and the methods below.
var errNotSupported = fmt.Errorf("afpacket: %w on %s", frame.ErrNotSupported, runtime.GOOS)

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
	return nil, errNotSupported
}

// NewSink returns an error: AF_PACKET is Linux's.
func NewSink(s *Socket, ifindex int, gateway netip.Addr, mode GSOMode) (*Sink, error) {
	return nil, errNotSupported
}

// The methods Port, Socket and Sink have on Linux, so that programs using
// them build on any system. None of them opens here: they return zero
// values and errors wrapping frame.ErrNotSupported.
func (*Port) Sockets() []*Socket                   { return nil }
func (*Port) Ifindex() int                         { return 0 }
func (*Port) FanoutID() uint16                     { return 0 }
func (*Port) SetRedirect([]netip.Prefix) error     { return errNotSupported }
func (*Port) StopReceive()                         {}
func (*Port) Attached() (bool, error)              { return false, errNotSupported }
func (*Port) Reattach() error                      { return errNotSupported }
func (*Port) HostFilter() (HostFilter, string)     { return 0, "" }
func (*Port) Leftovers() int                       { return 0 }
func (*Port) GSOPlan(GSOMode) (string, error)      { return "", errNotSupported }
func (*Port) Close() error                         { return errNotSupported }
func (*Socket) Index() int                         { return 0 }
func (*Socket) FrameSize() int                     { return 0 }
func (*Socket) Frames() int                        { return 0 }
func (*Socket) LargeFrames() int                   { return 0 }
func (*Socket) Receiver() frame.HeaderReceiver     { return nil }
func (*Socket) Stats() Stats                       { return Stats{} }
func (*Sink) SetReplier(frame.Replier)             {}
func (*Sink) SetLinkUp(bool)                       {}
func (*Sink) SetMAC(net.HardwareAddr)              {}
func (*Sink) Headroom() int                        { return 0 }
func (*Sink) FrameSize() int                       { return 0 }
func (*Sink) Mode() GSOMode                        { return 0 }
func (*Sink) GSOOff() bool                         { return false }
func (*Sink) Offload(segment.Layout) frame.Offload { return 0 }
func (*Sink) Alloc([]frame.Frame) int              { return 0 }
func (*Sink) AllocLarge(int) (frame.Frame, bool)   { return frame.Frame{}, false }
func (*Sink) Free([]frame.Frame)                   {}
func (*Sink) Transmit([]frame.Frame) (int, error)  { return 0, errNotSupported }
func (*Sink) Drops() frame.Drops                   { return frame.Drops{} }
func (*Sink) HostControl() uint64                  { return 0 }
func (*Sink) Complete() (int, error)               { return 0, errNotSupported }
func (*Sink) Wait(time.Duration) error             { return errNotSupported }
func (*Sink) Close()                               {}
func (*Sink) Backlog() <-chan struct{}             { return nil }
func (*Sink) CompletesOnTransmit() bool            { return true }
