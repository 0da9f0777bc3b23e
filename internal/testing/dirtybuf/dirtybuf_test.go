package dirtybuf

import (
	"bytes"
	"testing"
)

// sumTo is a writer with the bug this package is for: it writes a
// 4-byte packet and a "checksum" over its buffer to the end, not over
// the packet.
func sumTo(end func(b []byte) int) Write {
	return func(bufs [][]byte) [][]byte {
		b := bufs[0]
		copy(b, []byte{1, 2, 3, 4})
		var s byte
		for _, c := range b[:end(b)] {
			s += c
		}
		b[4] = s
		return [][]byte{b[:5]}
	}
}

func TestSame(t *testing.T) {
	prev := Leave(0, []byte{9, 9, 9, 9, 9, 9, 9, 9})
	good := sumTo(func([]byte) int { return 4 })
	out, err := Same(New(1, 5), prev, good)
	if err != nil || len(out) != 1 || !bytes.Equal(out[0], []byte{1, 2, 3, 4, 10}) {
		t.Fatalf("a clean writer: %v, %v", out, err)
	}
	bad := sumTo(func(b []byte) int { return len(b) })
	if _, err := Same(New(1, 5), prev, bad); err == nil {
		t.Fatal("a writer summing stale bytes passed")
	}
}

func TestPrepare(t *testing.T) {
	bufs := New(2, 3)
	for _, s := range states {
		prepare(bufs, s, Leave(1, []byte{0xee}))
		for i, b := range bufs {
			if len(b) != 3+Slack {
				t.Fatalf("%v: buffer %d of %d bytes", s, i, len(b))
			}
			switch {
			case s == zeroed && bytes.Count(b, []byte{0}) != len(b),
				s == filled && bytes.Count(b, []byte{Fill}) != len(b),
				s == stale && (b[1] != 0xee || b[0] == b[2]):
				t.Fatalf("%v: buffer %d is % x", s, i, b)
			}
		}
	}
	if bytes.Equal(bufs[0][2:], bufs[1][2:]) {
		t.Fatal("stale buffers alike")
	}
}
