package pipeline

import "errors"

// Errors shared by the pipeline and the ports.
var (
	// ErrInvalidConfig is wrapped by errors about a configuration refused
	// before any system call, by the pipeline, the ports and the gateway.
	ErrInvalidConfig = errors.New("invalid config")
	// ErrPacketTruncated is wrapped by a Source's Read error about a
	// packet longer than its buffer: that packet is lost (and counted as
	// invalid), the packets before it are good and reading goes on.
	ErrPacketTruncated = errors.New("packet larger than the read buffer")
	// ErrSourceClosed wraps the error that ended the Forwarder's source.
	ErrSourceClosed = errors.New("source closed")
)
