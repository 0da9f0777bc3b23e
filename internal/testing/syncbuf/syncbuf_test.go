package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// TestBuffer: writes from several goroutines while another reads all
// arrive whole (run with -race).
func TestBuffer(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				b.Write([]byte("line\n"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if n := strings.Count(b.String(), "line\n"); n != 400 {
		t.Errorf("%d lines, want 400", n)
	}
}
