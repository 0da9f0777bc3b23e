package segment

import (
	"errors"
	"fmt"
)

// Errors returned by DecodeHeader, Validate and Split. Every rejection wraps
// ErrInvalid together with the sentinel of the rule that failed, so callers
// can test for either with errors.Is.
var (
	ErrInvalid = errors.New("invalid packet")

	ErrHeaderSize      = errors.New("bad virtio-net header size")
	ErrShortPacket     = errors.New("packet shorter than its headers")
	ErrGSOType         = errors.New("unknown gso_type")
	ErrGSOSize         = errors.New("bad gso_size")
	ErrHdrLen          = errors.New("hdr_len beyond the packet")
	ErrCsumRange       = errors.New("csum_start/csum_offset outside the packet")
	ErrCsumStart       = errors.New("csum_start is not the transport header")
	ErrCsumOffset      = errors.New("csum_offset does not point at the L4 checksum")
	ErrNeedsCsum       = errors.New("segmentation requires NEEDS_CSUM")
	ErrIPVersion       = errors.New("IP version does not match gso_type")
	ErrIPHeader        = errors.New("bad IP header")
	ErrIPLength        = errors.New("IP length disagrees with the packet")
	ErrIPChecksum      = errors.New("bad IPv4 header checksum")
	ErrExtHeader       = errors.New("bad IPv6 extension header")
	ErrFragmented      = errors.New("packet is already an IP fragment")
	ErrProtocol        = errors.New("transport protocol does not match gso_type")
	ErrTransport       = errors.New("bad transport header")
	ErrTooManySegments = errors.New("super-packet would produce too many segments")
	ErrPacketTooLarge  = errors.New("packet larger than 64 KiB of IP payload")
	ErrShortBuffer     = errors.New("output buffer too small")
	ErrTooFewBuffers   = errors.New("not enough output buffers")
)

// invalid returns an error that matches both ErrInvalid and rule.
func invalid(rule error, format string, args ...any) error {
	return &ruleError{rule: rule, msg: fmt.Sprintf(format, args...)}
}

type ruleError struct {
	rule error
	msg  string
}

func (e *ruleError) Error() string   { return "segment: " + e.rule.Error() + ": " + e.msg }
func (e *ruleError) Unwrap() []error { return []error{ErrInvalid, e.rule} }

// BufferError reports that Split was given too few or too small output
// buffers. Nothing was written; retry with at least Need buffers of at least
// Size bytes after the offset. It matches ErrTooFewBuffers or ErrShortBuffer.
type BufferError struct {
	Need int // buffers the packet needs
	Have int // buffers given
	Size int // bytes each buffer needs after the offset
	rule error
}

func (e *BufferError) Error() string {
	return fmt.Sprintf("segment: %v: need %d buffers of %d bytes, have %d", e.rule, e.Need, e.Size, e.Have)
}

func (e *BufferError) Unwrap() error { return e.rule }
