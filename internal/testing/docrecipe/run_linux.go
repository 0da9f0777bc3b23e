package docrecipe

import (
	"context"
	"os/exec"
	"syscall"
	"time"
)

// Run runs script, a recipe of shell commands, as written: with bash
// -euo pipefail in dir, for at most timeout. At the deadline the whole
// recipe goes, whatever it started with it (a daemon holding the output
// open included). It returns the combined output.
func Run(script, dir string, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd.CombinedOutput()
}
