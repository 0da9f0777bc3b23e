package main

// What the numbers were measured with: the build and the machine.

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

// buildVersion is the gsoplane build that ran, from its build
// information; a field the build did not record is empty (go run builds
// have no module version, and none of the VCS fields with -buildvcs=false).
type buildVersion struct {
	Module       string `json:"module"`
	Version      string `json:"version"`
	Revision     string `json:"revision"`
	RevisionTime string `json:"revision_time"`
	Modified     bool   `json:"modified"`
}

func readBuildVersion() buildVersion {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return buildVersion{}
	}
	v := buildVersion{Module: info.Main.Path, Version: info.Main.Version}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.RevisionTime = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// String is the version as a line shows it, such as
// "(devel), revision 648a899abcde (modified)" or "v1.2.0, no VCS revision".
func (v buildVersion) String() string {
	s := v.Version
	if s == "" {
		s = "unknown version"
	}
	if v.Revision == "" {
		return s + ", no VCS revision"
	}
	s += ", revision " + v.Revision[:min(12, len(v.Revision))]
	if v.Modified {
		s += " (modified)"
	}
	return s
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
