package main

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestGatewayCPU: CPU time spent on a traffic thread is not the
// gateway's; CPU time spent anywhere else in the process is.
func TestGatewayCPU(t *testing.T) {
	const burn = 200 * time.Millisecond
	spun, release := make(chan struct{}), make(chan struct{})
	start := gatewayCPU()
	go func() {
		defer trafficThread()()
		spin(burn)
		close(spun)
		<-release // the thread stays, and counted as the traffic's, until the samples are taken
	}()
	<-spun
	whileTraffic := gatewayCPU() - start
	runtime.LockOSThread()
	spin(burn)
	runtime.UnlockOSThread()
	own := gatewayCPU() - start - whileTraffic
	close(release)
	if whileTraffic >= burn/2 || own < burn {
		t.Errorf("the gateway's CPU: %v while a traffic thread burnt %v, %v while this one did", whileTraffic, burn, own)
	}
}

// spin keeps the calling thread busy until it has used d of CPU time.
func spin(d time.Duration) {
	for start := clockTime(unix.CLOCK_THREAD_CPUTIME_ID); clockTime(unix.CLOCK_THREAD_CPUTIME_ID)-start < d; {
	}
}
