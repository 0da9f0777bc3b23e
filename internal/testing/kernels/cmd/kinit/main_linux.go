package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/internal/testing/kernels"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

func main() {
	switch filepath.Base(os.Args[0]) {
	case "modprobe":
		os.Exit(modprobe(os.Args[1:]))
	case "go":
		os.Exit(goCommand(os.Args[1:]))
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "kinit: the init of a test guest (pid 1), not a program to run")
		os.Exit(2)
	}
	defer powerOff()
	defer func() {
		if v := recover(); v != nil {
			fmt.Printf("kinit: panic: %v\n", v)
		}
	}()
	if err := run(); err != nil {
		fmt.Println("kinit:", err)
	}
}

// powerOff ends the guest: QEMU exits.
func powerOff() {
	unix.Sync()
	unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	select {}
}

var mounts = []struct{ source, target, fstype string }{
	{"proc", "/proc", "proc"},
	{"sysfs", "/sys", "sysfs"},
	{"devtmpfs", "/dev", "devtmpfs"},
	{"tmpfs", "/tmp", "tmpfs"},
	{"tmpfs", "/run", "tmpfs"},
	{"tmpfs", "/dev/shm", "tmpfs"},
	{"bpf", "/sys/fs/bpf", "bpf"},
	{"cgroup2", "/sys/fs/cgroup", "cgroup2"},
}

func run() error {
	for _, m := range mounts {
		if err := os.MkdirAll(m.target, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.source, m.target, m.fstype, 0, ""); err != nil {
			return fmt.Errorf("mount %s on %s: %w", m.fstype, m.target, err)
		}
		if m.target == "/dev" {
			console()
		}
	}
	plan, err := kernels.ReadPlan(kernels.PlanPath)
	if err != nil {
		return err
	}
	var uts unix.Utsname
	unix.Uname(&uts)
	fmt.Printf("kinit: %s: Linux %s, %d CPUs\n", plan.Kernel, unix.ByteSliceToString(uts.Release[:]), numCPU())

	// A kernel without modules (everything built in) has no index.
	if mods, err := kernels.ReadModules(filepath.Join("/lib/modules", plan.Release)); err != nil {
		fmt.Println("kinit: no modules:", err)
	} else {
		for _, name := range plan.Modules {
			if err := load(mods, name); err != nil {
				fmt.Println("kinit:", err)
			}
		}
		coldplug(mods)
	}
	// devtmpfs makes /dev/net/tun (there once tun is loaded) 0600; udev
	// makes it 0666, as the unprivileged deployment needs.
	if err := os.Chmod("/dev/net/tun", 0o666); err != nil {
		fmt.Println("kinit:", err)
	}
	if err := linkUp("lo"); err != nil {
		return fmt.Errorf("lo: %w", err)
	}
	env := []string{"PATH=/bin:/sbin:/usr/bin:/usr/sbin", "HOME=/root", "TMPDIR=/tmp", "USER=root"}
	if plan.Smoke {
		if nics := smoke(); nics != "" {
			env = append(env, netlab.NICsEnv+"="+nics)
		}
	}
	for _, s := range plan.Steps {
		r := runStep(plan, s, env)
		fmt.Println(r.Line())
	}
	fmt.Println(kernels.DonePrefix)
	return nil
}

// console makes /dev/console the init's standard input, output and error:
// the kernel opens it before it starts /init only if the archive has it.
func console() {
	f, err := os.OpenFile("/dev/console", os.O_RDWR, 0)
	if err != nil {
		return
	}
	for fd := 0; fd < 3; fd++ {
		unix.Dup2(int(f.Fd()), fd)
	}
	f.Close()
}

func numCPU() int {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil {
		return 0
	}
	return set.Count()
}

// runStep runs one binary of the plan, its output on the console as it
// comes, and returns what it did.
func runStep(plan *kernels.Plan, s kernels.Step, env []string) kernels.Result {
	r := kernels.Result{Kernel: plan.Kernel, Name: s.Name, Tests: s.GoTest}
	fmt.Printf("kinit: === %s: %s %s\n", s.Name, s.Binary, strings.Join(s.Args, " "))
	cmd := exec.Command(s.Binary, s.Args...)
	cmd.Dir = s.Dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw, err := os.Pipe()
	if err != nil {
		r.Status, r.Error = kernels.StatusError, err.Error()
		return r
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	start := time.Now()
	if err := cmd.Start(); err != nil {
		pw.Close()
		pr.Close()
		r.Status, r.Error = kernels.StatusError, err.Error()
		return r
	}
	pw.Close()
	var timedOut atomic.Bool
	timer := time.AfterFunc(s.Timeout, func() {
		timedOut.Store(true)
		unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
	})
	var out bytes.Buffer
	copied := make(chan struct{})
	go func() {
		io.Copy(io.MultiWriter(&out, os.Stdout), pr)
		close(copied)
	}()
	werr := cmd.Wait()
	timer.Stop()
	// Whatever the binary left running in its group must not hold the
	// pipe open.
	unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
	select {
	case <-copied:
	case <-time.After(5 * time.Second):
	}
	pr.Close()
	reapOrphans()
	r.Duration = time.Since(start).Round(time.Millisecond)
	r.Exit = cmd.ProcessState.ExitCode()
	switch {
	case timedOut.Load():
		r.Status = kernels.StatusTimeout
	case werr != nil:
		r.Status = kernels.StatusFail
	default:
		r.Status = kernels.StatusOK
	}
	if s.GoTest {
		kernels.ParseTestOutput(bytes.NewReader(out.Bytes()), &r)
		if r.TimedOut() {
			r.Status = kernels.StatusTimeout
		}
		if r.Status == kernels.StatusOK || len(r.Failed) > 0 || len(r.Panic) > 0 {
			r.Tail = nil
		}
	} else {
		r.Tail = lastLines(out.Bytes(), 20)
	}
	return r
}

// reapOrphans collects the exit status of the processes the binary left
// behind, which became the init's children.
func reapOrphans() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}

func lastLines(b []byte, n int) []string {
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return lines
}

// linkUp sets the device name up.
func linkUp(name string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// waitFor polls cond every 50 ms for up to d.
func waitFor(ctx context.Context, d time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
	return true
}
