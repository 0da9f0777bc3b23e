package pipeline_test

import (
	"testing"

	"github.com/gsoplane/gsoplane/dataplane/pipeline"
)

// TestDropReasonsCovered: every reason is counted by one direction or
// both, so an exporter that walks the two lists misses none.
func TestDropReasonsCovered(t *testing.T) {
	seen := map[pipeline.DropReason]bool{}
	for _, r := range pipeline.ForwardDropReasons {
		seen[r] = true
	}
	for _, r := range pipeline.ReturnDropReasons {
		seen[r] = true
	}
	for r := range pipeline.NumDropReasons {
		if !seen[r] {
			t.Errorf("%v is in neither ForwardDropReasons nor ReturnDropReasons", r)
		}
	}
}
