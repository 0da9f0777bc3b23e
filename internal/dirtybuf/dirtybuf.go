// Package dirtybuf tests that code writing packets into buffers it is
// given writes the same bytes whatever the buffers held before: zeroes,
// a fill pattern, or what an earlier, different packet left there. A
// writer whose output depends on stale bytes (a checksum summed to the
// end of the buffer instead of the packet, a header field left unwritten)
// passes with fresh, exact-size buffers and fails here.
//
// The tests of every packet writer of the module run it through Check,
// with buffers longer than it needs (New). The package imports only the
// standard library.
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

// A State is what the buffers hold before a Write.
type State int

// The states Check runs a Write in.
const (
	Zeroed State = iota // every byte zero
	Filled              // every byte Fill
	Stale               // a pattern of varying bytes, then what the previous Write left
)

// States are the states Check runs a Write in, in order.
var States = []State{Zeroed, Filled, Stale}

func (s State) String() string {
	switch s {
	case Zeroed:
		return "zeroed"
	case Filled:
		return "filled"
	case Stale:
		return "stale"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// New allocates n buffers of size+Slack bytes.
func New(n, size int) [][]byte {
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, size+Slack)
	}
	return bufs
}

// Prepare puts bufs in state s. For Stale it writes a pattern no packet
// writer produces and then runs prev, a Write of another packet, on
// them; prev may be nil (the pattern alone).
func Prepare(bufs [][]byte, s State, prev Write) {
	for i, b := range bufs {
		for j := range b {
			switch s {
			case Zeroed:
				b[j] = 0
			case Filled:
				b[j] = Fill
			default:
				b[j] = byte(31*i + 7*j + 1)
			}
		}
	}
	if s == Stale && prev != nil {
		prev(bufs)
	}
}

// Run prepares bufs in state s, runs write and returns a copy of what it
// reports.
func Run(bufs [][]byte, s State, prev, write Write) [][]byte {
	Prepare(bufs, s, prev)
	out := write(bufs)
	copies := make([][]byte, len(out))
	for i, o := range out {
		copies[i] = bytes.Clone(o)
	}
	return copies
}

// Same runs write on bufs in every State and returns what the first run
// reported (a copy), or an error saying where a later run reported other
// bytes.
func Same(bufs [][]byte, prev, write Write) ([][]byte, error) {
	want := Run(bufs, States[0], prev, write)
	for _, s := range States[1:] {
		if err := Diff(Run(bufs, s, prev, write), want); err != nil {
			return nil, fmt.Errorf("buffers %v, not %v: %w", s, States[0], err)
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
// would have: pkts[i%len(pkts)] at bufs[i][offset:], cut to fit. It is a
// prev for Prepare.
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

// Diff returns nil if got and want hold the same bytes, and otherwise an
// error naming the first difference.
func Diff(got, want [][]byte) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d outputs, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if len(g) != len(w) {
			return fmt.Errorf("output %d: %d bytes, want %d", i, len(g), len(w))
		}
		for j := range g {
			if g[j] != w[j] {
				return fmt.Errorf("output %d of %d bytes: byte %d is %#02x, want %#02x", i, len(g), j, g[j], w[j])
			}
		}
	}
	return nil
}
