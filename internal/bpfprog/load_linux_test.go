package bpfprog

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// loadTestProgram loads a socket filter of insns and closes it.
func loadTestProgram(insns asm.Instructions) error {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SocketFilter, License: "GPL", Instructions: insns})
	if err == nil {
		prog.Close()
	}
	return err
}

// TestLoadError: a program the verifier refuses is named as refused by
// the verifier, with the end of its log and no word of capabilities;
// EPERM before the verifier names the capabilities; anything else is
// passed on.
func TestLoadError(t *testing.T) {
	netlab.RequireRoot(t)
	const caps = "CAP_TEST"
	// R0 is never set: the verifier refuses the exit.
	err := LoadError("the test program", caps, loadTestProgram(asm.Instructions{asm.Return()}))
	t.Log(err)
	var ve *ebpf.VerifierError
	msg := err.Error()
	if !errors.As(err, &ve) || !strings.HasPrefix(msg, "the kernel's verifier refused the test program: ") ||
		!strings.Contains(msg, "\n\tR0 !read_ok") || strings.Contains(msg, caps) {
		t.Errorf("refused by the verifier: %q", msg)
	}

	ok := asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}
	if err := loadTestProgram(ok); err != nil {
		t.Fatalf("a program that returns 0: %v", err)
	}
	// Without CAP_BPF (and kernel.unprivileged_bpf_disabled set, as
	// distributions do) the kernel refuses before its verifier runs.
	err = netlab.WithCaps(0, func() error { return LoadError("the test program", caps, loadTestProgram(ok)) })
	t.Log(err)
	if b, _ := os.ReadFile("/proc/sys/kernel/unprivileged_bpf_disabled"); strings.TrimSpace(string(b)) != "0" &&
		(!errors.Is(err, unix.EPERM) || !strings.HasPrefix(err.Error(), "load the test program: needs "+caps+": ")) {
		t.Errorf("without capabilities: %v", err)
	}

	err = LoadError("the test program", caps, unix.EINVAL)
	if want := "load the test program: invalid argument"; err.Error() != want || !errors.Is(err, unix.EINVAL) {
		t.Errorf("EINVAL: %q, want %q", err, want)
	}
}
