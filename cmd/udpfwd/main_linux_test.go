package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
	"github.com/gsoplane/gsoplane/internal/testing/syncbuf"
)

// The udpfwd binary the privileged tests run, built once into binDir.
var (
	binDir   string
	binOnce  sync.Once
	binPath  string
	binError error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "udpfwd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := netlab.Main(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// requireRoot skips the test unless it runs as root.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF: run as root")
	}
}

// udpfwdBinary builds udpfwd once, without cgo (so that it can drop
// capabilities on every thread), and returns its path.
func udpfwdBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binPath = filepath.Join(binDir, "udpfwd")
		cmd := exec.Command("go", "build", "-o", binPath, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			binError = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binError != nil {
		t.Fatal(binError)
	}
	return binPath
}

// cleanEnv is the test's environment without UDPFWD_* variables, plus env.
func cleanEnv(env ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envPrefix) {
			out = append(out, kv)
		}
	}
	return append(out, env...)
}

// proc is a udpfwd started in a network namespace.
type proc struct {
	cmd  *exec.Cmd
	out  syncbuf.Buffer // stdout and stderr
	done chan struct{}
	err  error // of Wait, once done is closed
}

// startUdpfwd runs udpfwd in namespace ns with env added, and kills it
// at the end of the test if it still runs.
func startUdpfwd(t *testing.T, ns *netlab.NS, env []string, args ...string) *proc {
	t.Helper()
	return startCmd(t, ns, exec.Command(udpfwdBinary(t), args...), env)
}

// startCmd starts cmd, a udpfwd binary with its arguments, as
// startUdpfwd does.
func startCmd(t *testing.T, ns *netlab.NS, cmd *exec.Cmd, env []string) *proc {
	t.Helper()
	p := &proc{cmd: cmd, done: make(chan struct{})}
	p.cmd.Env = cleanEnv(env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := ns.Start(p.cmd); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// wait waits up to d for udpfwd to exit and returns its exit status, or
// -1 if it is still running.
func (p *proc) wait(d time.Duration) int {
	select {
	case <-p.done:
	case <-time.After(d):
		return -1
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	return 0
}

// waitOutput waits up to d for udpfwd to print s.
func (p *proc) waitOutput(s string, d time.Duration) bool {
	for deadline := time.Now().Add(d); !strings.Contains(p.out.String(), s); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// runUdpfwd runs udpfwd in namespace ns to completion (at most 20 s)
// with the command prefix before it, and returns its exit status and
// output.
func runUdpfwd(t *testing.T, ns *netlab.NS, prefix []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	argv := append(append(prefix, udpfwdBinary(t)), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = cleanEnv()
	var out []byte
	var err error
	netlab.Must(t, ns.Run(func() error { out, err = cmd.CombinedOutput(); return nil }))
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatalf("%v: %v", argv, err)
	}
	return 0, string(out)
}
