package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gsoplane/gsoplane/internal/testing/kernels"
)

// qemuArgs is the command line that boots img with initrd: the serial
// console on stdio, no reboot (a panic or the init's power-off ends QEMU),
// and two virtio-net NICs joined by a wire (netdevArgs: on taps or a hub),
// so that what one sends the other receives (without option ROMs: the
// kernel boots directly).
func qemuArgs(o *options, accel string, img *image, initrd string, tap bool) []string {
	args := []string{
		"-accel", accel,
		"-m", o.memory, "-smp", fmt.Sprint(o.cpus),
		"-nographic", "-no-reboot", "-nodefaults", "-serial", "stdio",
		"-kernel", img.vmlinuz, "-initrd", initrd,
		"-append", "console=ttyS0 panic=-1 loglevel=4 rdinit=/init",
	}
	args = append(args, netdevArgs(tap, o.nicProps)...)
	if accel == "kvm" {
		args = append(args, "-cpu", "host")
	} else {
		// Every feature TCG emulates (AVX2 for segment's copy+checksum).
		args = append(args, "-cpu", "max")
	}
	return args
}

// startQEMU starts QEMU with its NICs on taps (see startWired), else on a
// hub, its output to w; it returns it and what joins the NICs.
func startQEMU(o *options, qemu, accel string, img *image, initrd string, w io.Writer) (*exec.Cmd, string, error) {
	command := func(tap bool) *exec.Cmd {
		args := qemuArgs(o, accel, img, initrd, tap)
		fmt.Fprintf(os.Stderr, "test-kernels: %s: %s %s\n", img.name, qemu, strings.Join(args, " "))
		cmd := exec.Command(qemu, args...)
		cmd.Stdout, cmd.Stderr = w, w
		return cmd
	}
	cmd := command(true)
	why, err := startWired(cmd)
	if why == "" {
		return cmd, "taps with virtio-net headers on a bridge (offloads on)", err
	}
	fmt.Fprintf(os.Stderr, "test-kernels: %s: the NICs are on a QEMU hub, without offloads: %s\n", img.name, why)
	cmd = command(false)
	return cmd, "a QEMU hub (no offloads: " + why + ")", cmd.Start()
}

// boot runs the guest of img to its end or to o.total and collects what
// it printed: the smoke check, a result per step, the done line.
func boot(o *options, qemu, accel string, img *image, initrd string, plan *kernels.Plan) kernels.Kernel {
	k := kernels.Kernel{Name: img.name, Release: img.release, Accel: accel,
		Log: filepath.Join(o.cache, img.name+".log")}
	logf, err := os.Create(k.Log)
	if err != nil {
		k.Guest = err.Error()
		return k
	}
	defer logf.Close()

	pr, pw := io.Pipe()
	cmd, wire, err := startQEMU(o, qemu, accel, img, initrd, pw)
	if err != nil {
		k.Guest = "qemu: " + err.Error()
		return k
	}
	k.Wire = wire
	start := time.Now()
	var timedOut atomic.Bool
	timer := time.AfterFunc(o.total, func() {
		timedOut.Store(true)
		cmd.Process.Kill()
	})
	waited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		pw.Close()
		waited <- err
	}()

	results := map[string]kernels.Result{}
	done := false
	sc := bufio.NewScanner(pr)
	sc.Buffer(make([]byte, 64*1024), 4<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		fmt.Fprintln(logf, line)
		if o.verbose {
			fmt.Fprintln(os.Stderr, line)
		}
		switch {
		case strings.Contains(line, kernels.ResultPrefix):
			if r, ok := kernels.ParseResultLine(line); ok {
				results[r.Name] = r
				counts := ""
				if r.Tests {
					counts = fmt.Sprintf(", %d passed, %d failed, %d skipped", r.Passed, len(r.Failed), len(r.Skipped))
				}
				fmt.Fprintf(os.Stderr, "test-kernels: %s: %s: %s%s (%s, at %s)\n", img.name, r.Name, r.Status, counts,
					r.Duration.Round(time.Second), time.Since(start).Round(time.Second))
			}
		case strings.Contains(line, kernels.SmokePrefix):
			if s, ok := kernels.ParseSmokeLine(line); ok {
				k.Smoke = &s
			}
		case strings.Contains(line, kernels.DonePrefix):
			done = true
		case strings.Contains(line, "kinit: ==="):
			fmt.Fprintf(os.Stderr, "test-kernels: %s: %s\n", img.name, strings.TrimPrefix(line[strings.Index(line, "kinit: ==="):], "kinit: === "))
		case strings.HasPrefix(line, "kinit:") || strings.Contains(line, "Kernel panic"):
			fmt.Fprintf(os.Stderr, "test-kernels: %s: %s\n", img.name, line)
		}
	}
	werr := <-waited
	timer.Stop()
	k.Duration = time.Since(start).Round(time.Second)

	for _, s := range plan.Steps {
		r, ok := results[s.Name]
		if !ok {
			r = kernels.Result{Kernel: img.name, Name: s.Name, Status: kernels.StatusNotRun}
		}
		k.Results = append(k.Results, r)
	}
	switch {
	case timedOut.Load():
		k.Guest = fmt.Sprintf("killed at its deadline (-total %s)", o.total)
	case !done && werr != nil:
		k.Guest = "QEMU ended before the guest finished: " + werr.Error()
	case !done:
		k.Guest = "the guest ended before it finished (see its console log)"
	}
	return k
}
