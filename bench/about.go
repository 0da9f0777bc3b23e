package main

// What the numbers were measured with: the build and the machine.

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"strconv"
	"strings"
)

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
