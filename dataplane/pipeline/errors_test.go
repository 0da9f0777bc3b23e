package pipeline_test

import (
	"errors"
	"testing"

	"github.com/gsoplane/gsoplane/dataplane/pipeline"
)

// ErrNotSupported is the one not-supported sentinel, and it matches the
// standard library's.
func TestErrNotSupported(t *testing.T) {
	if !errors.Is(pipeline.ErrNotSupported, errors.ErrUnsupported) {
		t.Fatal("pipeline.ErrNotSupported does not wrap errors.ErrUnsupported")
	}
}
