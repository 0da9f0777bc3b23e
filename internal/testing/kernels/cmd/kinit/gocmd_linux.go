package main

import (
	"fmt"
	"io"
	"os"

	"github.com/gsoplane/gsoplane/internal/testing/kernels"
)

// goCommand answers `go build -o OUT .` and `go test -c -o OUT .` run in a
// package directory by copying the binary the host built for it
// (Plan.Prebuilt); any other command fails and says so.
func goCommand(args []string) int {
	var kind, out string
	switch {
	case len(args) == 4 && args[0] == "build" && args[1] == "-o" && args[3] == ".":
		kind, out = "build", args[2]
	case len(args) == 5 && args[0] == "test" && args[1] == "-c" && args[2] == "-o" && args[4] == ".":
		kind, out = "test", args[3]
	default:
		fmt.Fprintf(os.Stderr, "go: this guest has no Go toolchain; only `go build -o OUT .` and `go test -c -o OUT .` are answered, with binaries built on the host\n")
		return 2
	}
	dir, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "go:", err)
		return 1
	}
	plan, err := kernels.ReadPlan(kernels.PlanPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "go:", err)
		return 1
	}
	src, ok := plan.Prebuilt[kind+" "+dir]
	if !ok {
		fmt.Fprintf(os.Stderr, "go: no binary built on the host for `go %s` in %s\n", kind, dir)
		return 1
	}
	if err := copyFile(out, src); err != nil {
		fmt.Fprintln(os.Stderr, "go:", err)
		return 1
	}
	return 0
}

func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
