package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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
// locked, and TestPrivilegesExec checks what they do.
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

const (
	privHelperEnv = "GSOPLANE_TEST_PRIV_HELPER" // the user to drop to ("root": none)
	privProbeEnv  = "GSOPLANE_TEST_PRIV_PROBE"
)

// TestPrivilegesExec checks what dropPrivileges promises beyond /proc:
// a helper process (this package's tests, built without cgo so that it
// can change every thread) drops privileges as udpfwd does, as root and
// as nobody, and then executes itself. The new program gets no
// capability at all (uid 0 included: SECBIT_NOROOT, no_new_privs), keeps
// the bounding set of CAP_NET_ADMIN and no_new_privs, and the securebits
// stay set and locked. Started as nobody with ambient capabilities (as
// systemd's AmbientCapabilities= or file capabilities start it, without
// CAP_SETPCAP), the helper cannot touch the bounding set or the
// securebits, and no_new_privs alone keeps the exec from gaining any.
func TestPrivilegesExec(t *testing.T) {
	switch {
	case os.Getenv(privProbeEnv) != "":
		privProbe() // never returns
	case os.Getenv(privHelperEnv) != "":
		privHelper(os.Getenv(privHelperEnv)) // never returns
	}
	requireRoot(t)
	bin := privHelperBinary(t)
	for _, name := range []string{"root", "nobody", "ambient"} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(bin, "-test.run=^TestPrivilegesExec$")
			cmd.Env = append(os.Environ(), privHelperEnv+"="+name)
			uid, bits, bounding := "0", lockedSecurebits, "probe CapBnd:\t0000000000001000"
			if name != "root" {
				u, err := user.Lookup("nobody")
				if err != nil {
					t.Skipf("no user nobody: %v", err)
				}
				uid = u.Uid
			}
			if name == "ambient" {
				id, _ := strconv.Atoi(uid)
				cmd.SysProcAttr = &syscall.SysProcAttr{
					Credential:  &syscall.Credential{Uid: uint32(id), Gid: uint32(id)},
					AmbientCaps: []uintptr{unix.CAP_NET_ADMIN, unix.CAP_NET_RAW, unix.CAP_BPF},
				}
				bits, bounding = 0, "probe NoNewPrivs:\t1" // the bounding set stays the parent's
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("helper: %v\n%s", err, out)
			}
			want := []string{
				fmt.Sprintf("helper securebits %#x", bits),
				fmt.Sprintf("probe securebits %#x", bits),
				"probe CapInh:\t0000000000000000", "probe CapPrm:\t0000000000000000", "probe CapEff:\t0000000000000000",
				bounding, "probe CapAmb:\t0000000000000000", "probe NoNewPrivs:\t1",
				"probe Uid:\t" + uid + "\t" + uid + "\t" + uid + "\t" + uid,
				"probe ambient raise: operation not permitted",
			}
			for _, w := range want {
				if !strings.Contains(string(out), w+"\n") {
					t.Errorf("want %q in:\n%s", w, out)
				}
			}
		})
	}
}

// privHelperBinary builds this package's tests without cgo into a
// directory every user may enter (the probe may run as nobody).
func privHelperBinary(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "udpfwd-priv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "udpfwd.test")
	cmd := exec.Command("go", "test", "-c", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go test -c: %v\n%s", err, out)
	}
	return bin
}

// privHelper drops privileges as udpfwd does (to user name, unless
// "root" or "ambient": started as nobody already), prints its securebits
// and executes itself as the probe.
func privHelper(name string) {
	fail := func(err error) {
		fmt.Println("helper:", err)
		os.Exit(1)
	}
	var acct *account
	if name != "root" && name != "ambient" {
		var err error
		if acct, err = lookupAccount(name); err != nil {
			fail(err)
		}
	}
	if err := dropPrivileges(acct); err != nil {
		fail(err)
	}
	bits, err := unix.PrctlRetInt(unix.PR_GET_SECUREBITS, 0, 0, 0, 0)
	if err != nil {
		fail(err)
	}
	fmt.Printf("helper securebits %#x\n", bits)
	os.Stdout.Sync()
	env := append(os.Environ(), privProbeEnv+"=1")
	fail(syscall.Exec("/proc/self/exe", []string{os.Args[0], "-test.run=^TestPrivilegesExec$"}, env))
}

// privProbe prints its securebits, its capability lines from
// /proc/self/status and what raising an ambient capability gives.
func privProbe() {
	bits, err := unix.PrctlRetInt(unix.PR_GET_SECUREBITS, 0, 0, 0, 0)
	if err != nil {
		fmt.Println("probe:", err)
		os.Exit(1)
	}
	fmt.Printf("probe securebits %#x\n", bits)
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		fmt.Println("probe:", err)
		os.Exit(1)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "Cap") || strings.HasPrefix(line, "NoNewPrivs:") || strings.HasPrefix(line, "Uid:") {
			fmt.Println("probe", line)
		}
	}
	err = unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, unix.CAP_NET_ADMIN, 0, 0)
	fmt.Printf("probe ambient raise: %v\n", err)
	os.Exit(0)
}
