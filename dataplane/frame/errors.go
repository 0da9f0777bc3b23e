package frame

import (
	"errors"
	"fmt"
)

// Errors shared by the pipeline and the ports.
var (
	// ErrInvalidConfig is wrapped by errors about a configuration refused
	// before any system call, by the pipeline, the ports and the gateway.
	ErrInvalidConfig = errors.New("invalid config")
	// ErrPacketTruncated is wrapped by a Source's Read error about a
	// packet longer than its buffer: that packet is lost (and counted as
	// invalid), the packets before it are good and reading goes on.
	ErrPacketTruncated = errors.New("packet larger than the read buffer")
	// ErrNotSupported is wrapped by every error about something this
	// operating system or kernel does not have (a port on another OS, a
	// kernel without AF_XDP or tcx), by the ports and the gateway alike.
	// It wraps errors.ErrUnsupported, so either matches with errors.Is.
	ErrNotSupported = fmt.Errorf("not supported: %w", errors.ErrUnsupported)
	// ErrNoDevice is wrapped by every error about a network device (a
	// NIC, an ingress device) that does not exist in the caller's
	// network namespace.
	ErrNoDevice = errors.New("no such network device")
)
