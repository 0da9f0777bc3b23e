package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/wireguard/uapi"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// droppedStatus is what /proc shows of every thread of a wggso that is
// up: CAP_NET_ADMIN and CAP_NET_BIND_SERVICE (bits 12 and 10) and
// nothing else, in the bounding set too; still uid 0.
var droppedStatus = []string{
	"CapInh:\t0000000000000000", "CapPrm:\t0000000000001400", "CapEff:\t0000000000001400",
	"CapBnd:\t0000000000001400", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1", "Uid:\t0\t0\t0\t0",
}

// TestPrivilegesAfterStart runs the wggso binary (built without cgo) as
// root in a namespace, until it says it is ready: every thread then has
// only CAP_NET_ADMIN and CAP_NET_BIND_SERVICE, in the bounding set too,
// and no_new_privs, and its log says so. With them, wg sets its fwmark
// and a listen port below 1024 live, and wg show reports both. It stops
// cleanly, exit 0, its socket and its interface gone: on SIGTERM, and
// when its socket file is removed.
func TestPrivilegesAfterStart(t *testing.T) {
	ns := netlab.NewT(t, "wggsop")
	wg, err := exec.LookPath("wg")
	if err != nil {
		t.Fatal("wg is not installed: run scripts/test-deps (make test does)")
	}
	bin := netlab.GoBuild(t, ".", filepath.Join(t.TempDir(), "wggso"))
	for i, stop := range []string{"sigterm", "socket-removed"} {
		t.Run(stop, func(t *testing.T) {
			name := fmt.Sprintf("wgp%d-%d", os.Getpid()%1000000, i)
			sock, err := uapi.SocketPath(name)
			netlab.Must(t, err)
			w := startWggso(t, ns, bin, name)
			checkDropped(t, w.cmd.Process.Pid)
			ns.Output(t, exec.Command(wg, "set", name, "fwmark", "0x1234", "listen-port", "999"))
			show := ns.Output(t, exec.Command(wg, "show", name))
			for _, want := range []string{"fwmark: 0x1234", "listening port: 999"} {
				if !strings.Contains(show, want) {
					t.Errorf("wg show has no %q:\n%s", want, show)
				}
			}
			if stop == "sigterm" {
				netlab.Must(t, w.cmd.Process.Signal(syscall.SIGTERM))
			} else {
				netlab.Must(t, os.Remove(sock))
			}
			w.waitStopped(t, ns, name, sock)
		})
	}
}

// wggsoProcess is a wggso -f the test started, and its log.
type wggsoProcess struct {
	cmd *exec.Cmd
	log bytes.Buffer
}

// startWggso starts bin -f name in ns and waits until it says, on the
// file descriptor wggso reports readiness on (readyEnv), that it is up:
// ready and dropped, or why not.
func startWggso(t *testing.T, ns *netlab.NS, bin, name string) *wggsoProcess {
	t.Helper()
	r, w, err := os.Pipe()
	netlab.Must(t, err)
	defer r.Close()
	p := &wggsoProcess{cmd: exec.Command(bin, "-f", name)}
	p.cmd.Stdout, p.cmd.Stderr = &p.log, &p.log
	p.cmd.Env = append(os.Environ(), readyEnv+"=3")
	p.cmd.ExtraFiles = []*os.File{w}
	err = ns.Start(p.cmd)
	w.Close()
	netlab.Must(t, err)
	msg, _ := io.ReadAll(r)
	if string(msg) != "ok" {
		p.cmd.Process.Kill()
		p.cmd.Wait()
		t.Fatalf("wggso not ready: %q\n%s", msg, p.log.String())
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	return p
}

// checkDropped checks the capability lines of every thread of pid in
// /proc (droppedStatus).
func checkDropped(t *testing.T, pid int) {
	t.Helper()
	tasks, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "status"))
	if len(tasks) < 2 {
		t.Fatalf("%d threads", len(tasks))
	}
	for _, f := range tasks {
		status, err := os.ReadFile(f)
		netlab.Must(t, err)
		for _, want := range droppedStatus {
			if !strings.Contains(string(status), want+"\n") {
				t.Errorf("%s: want %q:\n%s", f, want, status)
			}
		}
	}
	t.Logf("%d threads checked", len(tasks))
}

// waitStopped waits for p to exit (a minute at most: it stops within a
// second or two) and checks that it exited 0, that its log said it ran
// with only the capabilities kept, and that its socket and interface
// are gone.
func (p *wggsoProcess) waitStopped(t *testing.T, ns *netlab.NS, name, sock string) {
	t.Helper()
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("wggso exited: %v\n%s", err, p.log.String())
		}
	case <-time.After(time.Minute):
		p.cmd.Process.Kill()
		<-exited
		t.Fatalf("wggso still ran a minute after it was asked to stop:\n%s", p.log.String())
	}
	if !strings.Contains(p.log.String(), "capabilities=CAP_NET_BIND_SERVICE,CAP_NET_ADMIN") {
		t.Errorf("the log does not say what wggso kept:\n%s", p.log.String())
	}
	if _, err := os.Lstat(sock); err == nil {
		t.Errorf("%s is still there", sock)
	}
	if _, err := ns.Link(name); err == nil {
		t.Errorf("the interface outlived wggso")
	}
}
