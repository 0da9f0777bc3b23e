package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestCommandLine: -version and -h exit 0; a missing or bad INTERFACE,
// an unknown flag or a bad value exit 2, before touching the system.
func TestCommandLine(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"-version"}, exitOK, "wggso "},
		{[]string{"-h"}, exitOK, ""},
		{nil, exitUsage, ""},
		{[]string{"wg0", "wg1"}, exitUsage, ""},
		{[]string{"a/b"}, exitUsage, ""},
		{[]string{"0123456789abcdef"}, exitUsage, ""},
		{[]string{"-queues", "0", "wg0"}, exitUsage, ""},
		{[]string{"-log-level", "loud", "wg0"}, exitUsage, ""},
		{[]string{"-nosuchflag", "wg0"}, exitUsage, ""},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), c.args, &stdout, &stderr); code != c.code || !strings.HasPrefix(stdout.String(), c.out) {
			t.Errorf("wggso %q: exit %d, stdout %q, want %d, %q (stderr %q)", c.args, code, stdout.String(), c.code, c.out, stderr.String())
		}
	}
}
