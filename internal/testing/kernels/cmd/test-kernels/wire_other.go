//go:build !linux

package main

import (
	"os/exec"
	"runtime"
)

// startWired cannot make taps but on Linux: the NICs go on a hub.
func startWired(*exec.Cmd) (why string, err error) {
	return "taps need Linux, not " + runtime.GOOS, nil
}
