package pipeline

import "errors"

// ErrSourceClosed wraps the error that ended the Forwarder's source.
var ErrSourceClosed = errors.New("source closed")
