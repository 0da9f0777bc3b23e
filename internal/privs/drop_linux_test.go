package privs

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

	"golang.org/x/sys/unix"
)

// testKeep is what the helper of TestDropExec keeps: two capabilities
// (0x1400), to see the set passed through as a set.
const testKeep Caps = 1<<unix.CAP_NET_ADMIN | 1<<unix.CAP_NET_BIND_SERVICE

const (
	helperEnv = "GSOPLANE_TEST_PRIV_HELPER" // the user to drop to ("root": none)
	probeEnv  = "GSOPLANE_TEST_PRIV_PROBE"
)

// TestDropExec checks what Drop promises, in a helper process (this
// package's tests, built without cgo so that it can change every
// thread) that drops privileges to testKeep, as root, switching to
// nobody, and started as nobody with ambient capabilities, and then
// executes itself as a probe. The helper keeps testKeep (what of it it
// has); the probe gets no capability at all (uid 0 included:
// SECBIT_NOROOT, no_new_privs), keeps the bounding set of testKeep and
// no_new_privs, and the securebits stay set and locked. Started as
// nobody with ambient capabilities (as systemd's AmbientCapabilities= or
// file capabilities start it, without CAP_SETPCAP), the helper keeps
// only the one of testKeep it was given, cannot touch the bounding set
// or the securebits, and no_new_privs alone keeps the exec from gaining
// any.
func TestDropExec(t *testing.T) {
	switch {
	case os.Getenv(probeEnv) != "":
		probe() // never returns
	case os.Getenv(helperEnv) != "":
		helper(os.Getenv(helperEnv)) // never returns
	}
	if os.Geteuid() != 0 {
		t.Skip("drops privileges in a process started as root: run as root")
	}
	bin := helperBinary(t)
	for _, name := range []string{"root", "nobody", "ambient"} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(bin, "-test.run=^TestDropExec$")
			cmd.Env = append(os.Environ(), helperEnv+"="+name)
			uid := "0"
			if name != "root" {
				uid = nobody(t)
			}
			if name == "ambient" {
				id, _ := strconv.Atoi(uid)
				cmd.SysProcAttr = &syscall.SysProcAttr{
					Credential:  &syscall.Credential{Uid: uint32(id), Gid: uint32(id)},
					AmbientCaps: []uintptr{unix.CAP_NET_ADMIN, unix.CAP_NET_RAW, unix.CAP_BPF},
				}
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("helper: %v\n%s", err, out)
			}
			for _, w := range wantAfterDrop(name, uid) {
				if !strings.Contains(string(out), w+"\n") {
					t.Errorf("want %q in:\n%s", w, out)
				}
			}
		})
	}
}

// wantAfterDrop is what the helper and the probe print, started as
// name (root, nobody, ambient), running as uid.
func wantAfterDrop(name, uid string) []string {
	bits, kept, bounding := lockedSecurebits, "0000000000001400", "probe CapBnd:\t0000000000001400"
	if name == "ambient" {
		// Only CAP_NET_ADMIN of testKeep was there; the bounding set
		// stays the parent's.
		bits, kept, bounding = 0, "0000000000001000", "probe NoNewPrivs:\t1"
	}
	return []string{
		fmt.Sprintf("helper securebits %#x", bits), fmt.Sprintf("probe securebits %#x", bits),
		"helper CapPrm:\t" + kept, "helper CapEff:\t" + kept, "helper CapInh:\t0000000000000000",
		"probe CapInh:\t0000000000000000", "probe CapPrm:\t0000000000000000", "probe CapEff:\t0000000000000000",
		bounding, "probe CapAmb:\t0000000000000000", "probe NoNewPrivs:\t1",
		"probe Uid:\t" + uid + "\t" + uid + "\t" + uid + "\t" + uid,
		"probe ambient raise: operation not permitted",
	}
}

// nobody returns the uid of the user nobody; without that user the test
// is skipped.
func nobody(t *testing.T) string {
	t.Helper()
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	return u.Uid
}

// helperBinary builds this package's tests without cgo into a directory
// every user may enter (the probe may run as nobody), with `go test -c
// -o OUT .` (which the kernel matrix's guests answer with a binary the
// host built).
func helperBinary(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "privs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "privs.test")
	cmd := exec.Command("go", "test", "-c", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go test -c: %v\n%s", err, out)
	}
	return bin
}

// helper drops privileges to testKeep (switching to user name, unless
// "root" or "ambient": started as nobody already), prints its securebits
// and capability sets and executes itself as the probe.
func helper(name string) {
	var acct *Account
	if name != "root" && name != "ambient" {
		var err error
		if acct, err = LookupAccount(name); err != nil {
			fail("helper", err)
		}
	}
	if err := Drop(testKeep, acct); err != nil {
		fail("helper", err)
	}
	printStatus("helper")
	os.Stdout.Sync()
	env := append(os.Environ(), probeEnv+"=1")
	fail("helper", syscall.Exec("/proc/self/exe", []string{os.Args[0], "-test.run=^TestDropExec$"}, env))
}

// probe prints its securebits, its capability lines from
// /proc/self/status and what raising an ambient capability gives.
func probe() {
	printStatus("probe")
	err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, unix.CAP_NET_ADMIN, 0, 0)
	fmt.Printf("probe ambient raise: %v\n", err)
	os.Exit(0)
}

// printStatus prints, after who, the securebits and the capability, no
// new privileges and uid lines of /proc/self/status.
func printStatus(who string) {
	bits, err := unix.PrctlRetInt(unix.PR_GET_SECUREBITS, 0, 0, 0, 0)
	if err != nil {
		fail(who, err)
	}
	fmt.Printf("%s securebits %#x\n", who, bits)
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		fail(who, err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "Cap") || strings.HasPrefix(line, "NoNewPrivs:") || strings.HasPrefix(line, "Uid:") {
			fmt.Println(who, line)
		}
	}
}

func fail(who string, err error) {
	fmt.Println(who+":", err)
	os.Exit(1)
}
