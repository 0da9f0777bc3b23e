//go:build !linux

package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestRunOther: -h prints the help and says udpfwd needs Linux; anything
// else fails with that line alone.
func TestRunOther(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"-h"}, &out, &errOut); code != exitOK ||
		!strings.Contains(out.String(), "Usage: udpfwd") || !strings.Contains(errOut.String(), "needs Linux") {
		t.Errorf("-h: exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
	out.Reset()
	errOut.Reset()
	if code := run(context.Background(), []string{"-nic", "en0"}, &out, &errOut); code != exitFailure || out.Len() != 0 {
		t.Errorf("-nic en0: exit %d, stdout %q", code, out.String())
	}
}
