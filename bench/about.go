package main

// What the numbers were measured with: the build and the machine.

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/gsoplane/gsoplane/internal/buildinfo"
)

// build is the gsoplane build measured, with where its revision came
// from: the build's own VCS stamp, else git in the source directory (a
// go run build, with -buildvcs=false, has no stamp), else nowhere.
type build struct {
	buildinfo.Info
	RevisionFrom string `json:"revision_from"` // "vcs", "git" or "unknown"
}

// Where a build's revision came from.
const (
	fromVCS     = "vcs"
	fromGit     = "git"
	fromUnknown = "unknown"
)

func readBuild() build {
	b := build{Info: buildinfo.Read(), RevisionFrom: fromVCS}
	if b.Revision != "" {
		return b
	}
	b.RevisionFrom = fromUnknown
	if dir := sourceDir(); dir != "" {
		b.Revision, b.RevisionTime, b.Modified, b.RevisionFrom = gitRevision(dir)
	}
	return b
}

// sourceDir is the bench's source directory as the compiler saw it, or ""
// when it is not there (a binary built elsewhere, or with -trimpath).
func sourceDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return ""
	}
	dir := filepath.Dir(file)
	if _, err := os.Stat(dir); err != nil {
		return ""
	}
	return dir
}

// gitRevision asks git for the commit checked out in dir, its time and
// whether the work tree has changes; from is fromUnknown when git cannot
// say (no git, not a repository).
func gitRevision(dir string) (rev, at string, modified bool, from string) {
	out, err := exec.Command("git", "-C", dir, "log", "-1", "--format=%H %cI").Output()
	rev, at, ok := strings.Cut(strings.TrimSpace(string(out)), " ")
	if err != nil || !ok {
		return "", "", false, fromUnknown
	}
	status, err := exec.Command("git", "-C", dir, "status", "--porcelain").Output()
	if err != nil {
		return "", "", false, fromUnknown
	}
	return rev, at, len(bytes.TrimSpace(status)) > 0, fromGit
}

// String is the build in a line, with where its revision came from.
func (b build) String() string {
	switch b.RevisionFrom {
	case fromGit:
		return b.Info.String() + " (from git in the source directory: the build has no VCS stamp)"
	case fromUnknown:
		return b.Info.String() + " (the build has no VCS stamp, and git could not say)"
	}
	return b.Info.String()
}

// machine is where the numbers come from.
type machine struct {
	host, kernel, goVersion, cpuModel string
	cpus                              int
}

func readMachine() machine {
	host, _ := os.Hostname()
	info, _ := os.ReadFile("/proc/cpuinfo")
	return machine{host: host, kernel: kernelRelease(), goVersion: runtime.Version(), cpuModel: cpuModel(info), cpus: runtime.NumCPU()}
}

// cpuModel is the first "model name" of /proc/cpuinfo, or "" without one.
func cpuModel(cpuinfo []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(cpuinfo))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// String is the machine in a line: host, CPUs, kernel, Go.
func (m machine) String() string {
	cpu := "CPUs"
	if m.cpuModel != "" {
		cpu = "× " + m.cpuModel
	}
	return strings.Join([]string{m.host, strconv.Itoa(m.cpus) + " " + cpu, "kernel " + m.kernel, m.goVersion}, ", ")
}
