package segment

import (
	"errors"
	"fmt"
)

// ErrInvalid matches every *Error that rejects a packet: Validate, Split
// and ForWire name the rule the packet broke.
var ErrInvalid = errors.New("invalid packet")

// Error is the error of a packet, or of a call, that broke one of the
// package's rules; its message names the rule and the values that broke
// it. An Error that rejects a packet matches ErrInvalid; one that reports
// a caller's mistake (a header size other than HeaderSize or
// HeaderSizeMrg, a buffer shorter than a header, a Layout that is not
// Validate's for the packet, a first segment beyond it, an MTU below
// MinMTU, a batch that does not fit a Coalescer) does not.
type Error struct {
	rule   rule
	packet bool // rejects a packet: matches ErrInvalid
	msg    string
}

func (e *Error) Error() string { return "segment: " + e.rule.String() + ": " + e.msg }

// Is reports whether target is ErrInvalid and e rejects a packet.
func (e *Error) Is(target error) bool { return target == ErrInvalid && e.packet }

// invalid returns the *Error of a packet that broke rule r.
func invalid(r rule, format string, args ...any) error {
	return &Error{rule: r, packet: true, msg: fmt.Sprintf(format, args...)}
}

// misuse returns the *Error of a call that broke rule r.
func misuse(r rule, format string, args ...any) error {
	return &Error{rule: r, msg: fmt.Sprintf(format, args...)}
}

// rule is a rule an Error reports broken.
type rule uint8

const (
	// Rules of a packet and its virtio-net header.
	ruleShortPacket rule = iota + 1
	ruleGSOType
	ruleGSOSize
	ruleHdrLen
	ruleCsumRange
	ruleCsumStart
	ruleCsumOffset
	ruleNeedsCsum
	ruleIPVersion
	ruleIPHeader
	ruleIPLength
	ruleIPChecksum
	ruleExtHeader
	ruleFragmented
	ruleProtocol
	ruleTransport
	ruleTooManySegments
	ruleTunnel
	// Rules of a call.
	ruleHeaderSize
	ruleShortBuffer
	ruleTooFewBuffers
	ruleLayout
	ruleFirstSegment
	ruleSmallMTU
	ruleBatch
)

var ruleNames = [...]string{
	ruleShortPacket:     "packet shorter than its headers",
	ruleGSOType:         "unknown gso_type",
	ruleGSOSize:         "bad gso_size",
	ruleHdrLen:          "hdr_len beyond the packet",
	ruleCsumRange:       "csum_start/csum_offset outside the packet",
	ruleCsumStart:       "csum_start is not the transport header",
	ruleCsumOffset:      "csum_offset does not point at the L4 checksum",
	ruleNeedsCsum:       "segmentation requires NEEDS_CSUM",
	ruleIPVersion:       "IP version does not match gso_type",
	ruleIPHeader:        "bad IP header",
	ruleIPLength:        "IP length disagrees with the packet",
	ruleIPChecksum:      "bad IPv4 header checksum",
	ruleExtHeader:       "bad IPv6 extension header",
	ruleFragmented:      "packet is already an IP fragment",
	ruleProtocol:        "transport protocol does not match gso_type",
	ruleTransport:       "bad transport header",
	ruleTooManySegments: "super-packet would produce too many segments",
	ruleTunnel:          "bad UDP-tunnel headers or offsets",
	ruleHeaderSize:      "bad virtio-net header size",
	ruleShortBuffer:     "output buffer too small",
	ruleTooFewBuffers:   "not enough output buffers",
	ruleLayout:          "layout is not Validate's for this packet",
	ruleFirstSegment:    "first segment beyond the packet's",
	ruleSmallMTU:        "MTU below 68",
	ruleBatch:           "batch does not fit the Coalescer",
}

func (r rule) String() string { return ruleNames[r] }

// BufferError reports that Split was given too few or too small output
// buffers. Nothing was written; retry with at least Need buffers of at
// least Size bytes after the offset.
type BufferError struct {
	Need int // buffers the packet needs
	Have int // buffers given
	Size int // bytes each buffer needs after the offset
	rule rule
}

func (e *BufferError) Error() string {
	return fmt.Sprintf("segment: %v: need %d buffers of %d bytes, have %d", e.rule, e.Need, e.Size, e.Have)
}
