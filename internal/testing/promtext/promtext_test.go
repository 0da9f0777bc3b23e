package promtext

import (
	"strings"
	"testing"
)

// TestParse: samples by name and labels, comments skipped, a bad value
// refused.
func TestParse(t *testing.T) {
	m, err := Parse(strings.NewReader("# HELP x y\n# TYPE x counter\nx_total{a=\"b c\"} 3\n\ny 1.5e3\n"))
	if err != nil || len(m) != 2 || m[`x_total{a="b c"}`] != 3 || m["y"] != 1500 {
		t.Errorf("%v %v", m, err)
	}
	if _, err := Parse(strings.NewReader("x one\n")); err == nil {
		t.Error("a bad value accepted")
	}
}
