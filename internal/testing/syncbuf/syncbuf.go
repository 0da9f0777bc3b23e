// Package syncbuf is a bytes.Buffer a test reads while other goroutines
// write it: the log of a gateway, a tunnel or a WireGuard device under
// test.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is safe for concurrent writers and readers. The zero Buffer is
// empty and ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
