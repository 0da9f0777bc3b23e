package frame_test

import (
	"errors"
	"testing"

	"github.com/gsoplane/gsoplane/dataplane/frame"
)

// ErrNotSupported is the one not-supported sentinel, and it matches the
// standard library's.
func TestErrNotSupported(t *testing.T) {
	if !errors.Is(frame.ErrNotSupported, errors.ErrUnsupported) {
		t.Fatal("frame.ErrNotSupported does not wrap errors.ErrUnsupported")
	}
}
