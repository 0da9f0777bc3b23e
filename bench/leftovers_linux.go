package main

// Namespaces left behind by a run that could not clean up (killed, or
// crashed in a goroutine) make the next run refuse to start.

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// netnsPrefix names every namespace the bench creates, so that leftovers
// of a crashed run are recognisable.
const netnsPrefix = "gsobench-"

// netnsDir is where `ip netns` keeps named namespaces.
const netnsDir = "/run/netns"

// leftovers lists the bench's namespaces that exist now, and which of them
// belong to a bench process that is still running.
func leftovers() (dead []string, live map[int]bool) {
	live = make(map[int]bool)
	entries, err := os.ReadDir(netnsDir)
	if err != nil {
		return nil, live
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, netnsPrefix) {
			continue
		}
		pid, _ := strconv.Atoi(strings.SplitN(strings.TrimPrefix(name, netnsPrefix), "-", 2)[0])
		if pid > 0 && pid != os.Getpid() && processAlive(pid) {
			live[pid] = true
			continue
		}
		dead = append(dead, filepath.Join(netnsDir, name))
	}
	return dead, live
}

// processAlive reports whether a process with this pid exists.
func processAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// cleanupCommand removes every namespace the bench may have left behind
// (run it as root).
const cleanupCommand = `ip netns list | awk '/^` + netnsPrefix + `/{print $1}' | xargs -r -n1 ip netns del`
