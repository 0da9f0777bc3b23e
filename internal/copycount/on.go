//go:build copycount

package copycount

import "sync/atomic"

// Enabled reports whether this build counts (-tags copycount).
const Enabled = true

var copied atomic.Uint64

// Add counts the bytes of dst, which the caller filled from src, unless
// they are the same memory (a packet left where it was).
func Add(dst, src []byte) {
	if len(dst) == 0 || (len(src) > 0 && &dst[0] == &src[0]) {
		return
	}
	copied.Add(uint64(len(dst)))
}

// Bytes returns the bytes counted so far.
func Bytes() uint64 { return copied.Load() }
