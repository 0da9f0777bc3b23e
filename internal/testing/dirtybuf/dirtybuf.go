// Package dirtybuf tests that code writing packets into buffers it is
// given writes the same bytes whatever the buffers held before: zeroes,
// a fill pattern, or what an earlier, different packet left there. A
// writer whose output depends on stale bytes (a checksum summed to the
// end of the buffer instead of the packet, a header field left unwritten)
// passes with fresh, exact-size buffers and fails here.
//
// The tests of every packet writer of the module run it through Check
// (Same in a fuzz target's own checks), with buffers longer than it needs
// (New) and, as the stale bytes, another packet (Leave). The package
// imports only the standard library.
package dirtybuf

import (
	"bytes"
	"fmt"
	"testing"
)

// Fill is the byte every buffer holds in the Filled state.
const Fill = 0xA5

// Slack is how many bytes longer than asked New makes each buffer: odd,
// so that a sum running past the end of a packet also shifts what it
// adds by a byte.
const Slack = 37

// A Write writes into bufs and returns the bytes it reports as written:
// slices of bufs, or of anything else. It must give the same output for
// the same input each time it is called (fresh state inside it).
type Write func(bufs [][]byte) [][]byte

// A state is what the buffers hold before a Write.
type state int

// The states Same runs a Write in.
const (
	zeroed state = iota // every byte zero
	filled              // every byte Fill
	stale               // a pattern of varying bytes, then what the previous Write left
)

// states are the states Same runs a Write in, in order.
var states = []state{zeroed, filled, stale}

func (s state) String() string {
	return [...]string{"zeroed", "filled", "stale"}[s]
}

// New allocates n buffers of size+Slack bytes.
func New(n, size int) [][]byte {
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, size+Slack)
	}
	return bufs
}

// prepare puts bufs in state s. For stale it writes a pattern no packet
// writer produces and then runs prev, a Write of another packet, on
// them; prev may be nil (the pattern alone).
func prepare(bufs [][]byte, s state, prev Write) {
	for i, b := range bufs {
		switch s {
		case zeroed:
			clear(b)
		case filled:
			repeat(b, []byte{Fill})
		default:
			var pattern [256]byte // 7 is odd: 256 different bytes
			for j := range pattern {
				pattern[j] = byte(31*i + 7*j + 1)
			}
			repeat(b, pattern[:])
		}
	}
	if s == stale && prev != nil {
		prev(bufs)
	}
}

// repeat fills b with copies of p.
func repeat(b, p []byte) {
	for n := copy(b, p); n < len(b); n *= 2 {
		copy(b[n:], b[:n])
	}
}

// run prepares bufs in state s, runs write and returns a copy of what it
// reports.
func run(bufs [][]byte, s state, prev, write Write) [][]byte {
	prepare(bufs, s, prev)
	out := write(bufs)
	copies := make([][]byte, len(out))
	for i, o := range out {
		copies[i] = bytes.Clone(o)
	}
	return copies
}

// Same runs write on bufs in every state (zeroed, filled with Fill,
// stale: a pattern of varying bytes, then what prev, a Write of another
// packet, left; prev may be nil) and returns what the first run
// reported (a copy), or an error saying where a later run reported other
// bytes.
func Same(bufs [][]byte, prev, write Write) ([][]byte, error) {
	want := run(bufs, states[0], prev, write)
	for _, s := range states[1:] {
		if err := diff(run(bufs, s, prev, write), want); err != nil {
			return nil, fmt.Errorf("buffers %v, not %v: %w", s, states[0], err)
		}
	}
	return want, nil
}

// Check is Same in a test: it fails t on a difference.
func Check(t testing.TB, bufs [][]byte, prev, write Write) [][]byte {
	t.Helper()
	out, err := Same(bufs, prev, write)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Leave returns a Write that leaves pkts in buffers as an earlier writer
// would have: pkts[i%len(pkts)] at bufs[i][offset:], cut to fit: a prev
// for Same.
func Leave(offset int, pkts ...[]byte) Write {
	return func(bufs [][]byte) [][]byte {
		out := make([][]byte, 0, len(bufs))
		for i, b := range bufs {
			if offset < len(b) && len(pkts) > 0 {
				n := copy(b[offset:], pkts[i%len(pkts)])
				out = append(out, b[offset:offset+n])
			}
		}
		return out
	}
}

// diff returns nil if got and want hold the same bytes, and otherwise an
// error naming the first difference.
func diff(got, want [][]byte) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d outputs, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if len(g) != len(w) {
			return fmt.Errorf("output %d: %d bytes, want %d", i, len(g), len(w))
		}
		if bytes.Equal(g, w) {
			continue
		}
		for j := range g {
			if g[j] != w[j] {
				return fmt.Errorf("output %d of %d bytes: byte %d is %#02x, want %#02x", i, len(g), j, g[j], w[j])
			}
		}
	}
	return nil
}
