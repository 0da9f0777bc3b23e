package main

// The gateway's CPU time. The gateway runs in the bench's process beside
// the traffic (the TCP and UDP senders and receivers, the AF_XDP
// generator): every traffic goroutine is locked to its own thread
// (trafficThread), whose CPU clock is the traffic's; the process's CPU
// clock less those is the gateway's (and the bench's own sampling, a
// few wake-ups a second). The kernel work the gateway's system calls do
// is the gateway's: a sendto on a veth delivers to B in its softirq.

import (
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// traffic is the set of threads the traffic goroutines run on.
var traffic struct {
	sync.Mutex
	tids map[int]struct{}
}

// trafficThread locks the calling goroutine to its thread and counts the
// thread's CPU time as the traffic's until the goroutine calls the
// function it returns, as it ends: the thread then ends with it (it
// stays locked).
func trafficThread() (done func()) {
	runtime.LockOSThread()
	tid := unix.Gettid()
	traffic.Lock()
	if traffic.tids == nil {
		traffic.tids = map[int]struct{}{}
	}
	traffic.tids[tid] = struct{}{}
	traffic.Unlock()
	return func() {
		traffic.Lock()
		delete(traffic.tids, tid)
		traffic.Unlock()
	}
}

// gatewayCPU is the process's CPU time less the traffic threads'.
func gatewayCPU() time.Duration {
	traffic.Lock()
	defer traffic.Unlock()
	cpu := clockTime(unix.CLOCK_PROCESS_CPUTIME_ID)
	for tid := range traffic.tids {
		cpu -= clockTime(threadClock(tid))
	}
	return cpu
}

// threadClock is the CPU clock of thread tid of this process
// (MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED) in the kernel's
// posix-timers.h).
func threadClock(tid int) int32 { return int32(^uint32(tid)<<3 | 6) }

// clockTime reads a clock; 0 if it cannot (the thread is gone).
func clockTime(id int32) time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(id, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
