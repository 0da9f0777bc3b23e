package pipeline_test

import (
	"testing"

	"github.com/gsoplane/gsoplane/dataplane/frame"
)

// TestDropReasonsCovered: every reason is counted by one direction or
// both, so an exporter that walks the two lists misses none.
func TestDropReasonsCovered(t *testing.T) {
	seen := map[frame.DropReason]bool{}
	for _, r := range frame.ForwardDropReasons {
		seen[r] = true
	}
	for _, r := range frame.ReturnDropReasons {
		seen[r] = true
	}
	for r := range frame.NumDropReasons {
		if !seen[r] {
			t.Errorf("%v is in neither ForwardDropReasons nor ReturnDropReasons", r)
		}
	}
}
