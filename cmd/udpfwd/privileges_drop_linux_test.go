package main

import (
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// The capability sets every thread of a started udpfwd has: CAP_NET_ADMIN
// (bit 12) and nothing else, in the bounding set too.
var droppedStatus = []string{
	"CapInh:\t0000000000000000", "CapPrm:\t0000000000001000", "CapEff:\t0000000000001000",
	"CapBnd:\t0000000000001000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1",
}

// TestPrivilegesAfterStart starts the built binary as root, without and
// with -user nobody, and checks in /proc/PID/task/*/status that every
// thread keeps only CAP_NET_ADMIN, has a bounding set of CAP_NET_ADMIN
// alone and no_new_privs set, and runs as the right user; then that
// udpfwd still stops cleanly (it removes its routes and addresses with
// what it kept). The securebits do not show in /proc: udpfwd reads them
// back on every thread itself and refuses to start if they are not
// locked, and internal/privs's TestDropExec checks what they do.
func TestPrivilegesAfterStart(t *testing.T) {
	requireRoot(t)
	for _, name := range []string{"root", "nobody"} {
		t.Run(name, func(t *testing.T) {
			uid := "0"
			args := labArgs
			if name != "root" {
				u, err := user.Lookup(name)
				if err != nil {
					t.Skipf("no user %s: %v", name, err)
				}
				uid, args = u.Uid, append(append([]string{}, labArgs...), "-user", name)
			}
			a, _ := newLab(t)
			p := startUdpfwd(t, a, labEnv, args...)
			waitReady(t, p, a)
			tasks, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(p.cmd.Process.Pid), "task", "*", "status"))
			if len(tasks) < 2 {
				t.Fatalf("%d threads", len(tasks))
			}
			for _, f := range tasks {
				status, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				for _, want := range append(droppedStatus, "Uid:\t"+uid+"\t"+uid+"\t"+uid+"\t"+uid) {
					if !strings.Contains(string(status), want+"\n") {
						t.Errorf("%s: want %q:\n%s", f, want, status)
					}
				}
			}
			t.Logf("%d threads checked", len(tasks))
			p.cmd.Process.Signal(syscall.SIGTERM)
			if code := p.wait(5 * time.Second); code != 0 {
				t.Fatalf("after SIGTERM: exit %d:\n%s", code, p.out.String())
			}
			if left := leftovers(t, a); left != "" {
				t.Errorf("left behind: %s", left)
			}
		})
	}
}

// TestReattachAfterDrop: the started binary, its privileges dropped,
// attaches its XDP program again once it is detached from outside
// (-xdp-detached reattach, the default), and then stops with exit 0.
// The re-attach runs in the NIC's namespace, which every thread of
// udpfwd is in already: internal/nsrun enters it without setns, which
// would need the CAP_SYS_ADMIN udpfwd no longer has.
func TestReattachAfterDrop(t *testing.T) {
	requireRoot(t)
	a, _ := newLab(t)
	p := startUdpfwd(t, a, labEnv, append([]string{"-port", "xdp"}, labArgs...)...)
	waitReady(t, p, a)
	netlab.Must(t, a.DetachXDP(labNIC))
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		m, err := scrape(a, "127.0.0.1:9464")
		if err == nil && m["udpfwd_program_reattached_total"] == 1 {
			break
		}
		select {
		case <-p.done:
			t.Fatalf("udpfwd stopped (exit %d) instead of attaching its program again:\n%s", p.wait(time.Second), p.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("not attached again a minute after the detach (%v):\n%s", err, p.out.String())
		}
	}
	if x := a.LinkT(t, labNIC).Attrs().Xdp; x == nil || !x.Attached {
		t.Errorf("no XDP program on %s after the re-attach", labNIC)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(time.Minute); code != 0 {
		t.Fatalf("after SIGTERM: exit %d:\n%s", code, p.out.String())
	}
}
