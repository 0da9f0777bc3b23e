//go:build !linux

package xsk

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
var errNotSupported = fmt.Errorf("xsk: %w on %s", ErrUnsupported, runtime.GOOS)

// Port is an XDP program with AF_XDP sockets; there is none on this
// system.
type Port struct{}

// Socket is an AF_XDP socket; there is none on this system.
type Socket struct{}

// Sink transmits on an AF_XDP socket; there is none on this system.
type Sink struct{}

// Generator sends prebuilt frames from an AF_XDP socket; there is none on
// this system.
type Generator struct{}

// Open returns an error: AF_XDP is Linux's.
func Open(cfg Config) (*Port, error) {
	if _, err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	return nil, errNotSupported
}

// NewSink returns an error: AF_XDP is Linux's.
func NewSink(x *Socket, ifindex int, gateway netip.Addr) (*Sink, error) { return nil, errNotSupported }

// OpenGenerator returns an error: AF_XDP is Linux's.
func OpenGenerator(cfg GeneratorConfig) (*Generator, error) { return nil, errNotSupported }

// The methods Port, Socket, Sink and Generator have on Linux, so that
// programs using them build on any system. None of them opens here: they
// return zero values and errors wrapping ErrUnsupported.
func (*Port) Sockets() []*Socket                   { return nil }
func (*Port) Mode() Mode                           { return 0 }
func (*Port) ZeroCopy() bool                       { return false }
func (*Port) MultiBuffer() bool                    { return false }
func (*Port) Ifindex() int                         { return 0 }
func (*Port) SetRedirect([]netip.Prefix) error     { return errNotSupported }
func (*Port) StopReceive()                         {}
func (*Port) Attached() (bool, error)              { return false, errNotSupported }
func (*Port) Reattach() error                      { return errNotSupported }
func (*Port) FollowMAC(net.HardwareAddr) error     { return errNotSupported }
func (*Port) ProgramStats(int) (Stats, error)      { return Stats{}, errNotSupported }
func (*Port) Stats() []Stats                       { return nil }
func (*Port) Close() error                         { return errNotSupported }
func (*Socket) FrameSize() int                     { return 0 }
func (*Socket) MaxTXFrame() int                    { return 0 }
func (*Socket) MaxRXFrame() int                    { return 0 }
func (*Socket) TXChecksum() bool                   { return false }
func (*Socket) NumFrames() int                     { return 0 }
func (*Socket) TxBudget() int                      { return 0 }
func (*Socket) BusyPoll() time.Duration            { return 0 }
func (*Socket) NAPIID() (uint32, error)            { return 0, errNotSupported }
func (*Socket) Receiver() frame.Receiver           { return nil }
func (*Socket) Stats() Stats                       { return Stats{} }
func (*Sink) SetReplier(frame.Replier)             {}
func (*Sink) SetLinkUp(bool)                       {}
func (*Sink) SetMAC(net.HardwareAddr)              {}
func (*Sink) Headroom() int                        { return 0 }
func (*Sink) Alloc([]frame.Frame) int              { return 0 }
func (*Sink) Offload(segment.Layout) frame.Offload { return frame.OffloadNone }
func (*Sink) AllocLarge(int) (frame.Frame, bool)   { return frame.Frame{}, false }
func (*Sink) Free([]frame.Frame)                   {}
func (*Sink) Transmit([]frame.Frame) (int, error)  { return 0, errNotSupported }
func (*Sink) Drops() frame.Drops                   { return frame.Drops{} }
func (*Sink) HostControl() uint64                  { return 0 }
func (*Sink) Complete() (int, error)               { return 0, errNotSupported }
func (*Sink) Wait(time.Duration) error             { return errNotSupported }
func (*Sink) Close()                               {}
func (*Sink) Backlog() <-chan struct{}             { return nil }
func (*Generator) Send() (int, error)              { return 0, errNotSupported }
func (*Generator) Wait(time.Duration) error        { return errNotSupported }
func (*Generator) Stats() Stats                    { return Stats{} }
func (*Generator) Close() error                    { return errNotSupported }
