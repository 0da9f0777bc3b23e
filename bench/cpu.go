package main

// CPU utilisation per core from /proc/stat, the way sar computes it: the
// difference of the jiffy counters of each core between two samples, as a
// percentage of their sum.

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// cpuFields are the /proc/stat columns we keep, in file order.
var cpuFields = [...]string{"user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"}

// cpuTimes holds the counters of every core ("cpu0", "cpu1", ...), in
// /proc/stat order.
type cpuTimes struct {
	names []string
	ticks [][len(cpuFields)]uint64
}

// readCPU samples /proc/stat; on error it returns an empty sample, and the
// utilisation computed from it is empty too.
func readCPU() cpuTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	return parseCPU(b)
}

func parseCPU(b []byte) cpuTimes {
	var t cpuTimes
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 1+len(cpuFields) || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		var v [len(cpuFields)]uint64
		for i := range cpuFields {
			v[i], _ = strconv.ParseUint(f[1+i], 10, 64)
		}
		t.names = append(t.names, f[0])
		t.ticks = append(t.ticks, v)
	}
	return t
}

// CoreUsage is one core's utilisation over an interval, in percent, with
// sar's columns.
type CoreUsage struct {
	CPU     string  `json:"cpu"`
	User    float64 `json:"user"`
	Nice    float64 `json:"nice"`
	System  float64 `json:"system"`
	IOWait  float64 `json:"iowait"`
	IRQ     float64 `json:"irq"`
	SoftIRQ float64 `json:"softirq"`
	Steal   float64 `json:"steal"`
	Idle    float64 `json:"idle"`
}

// Busy is everything but idle and iowait.
func (c CoreUsage) Busy() float64 { return 100 - c.Idle - c.IOWait }

// cpuUsage returns the per-core utilisation between two samples.
func cpuUsage(a, b cpuTimes) []CoreUsage {
	var out []CoreUsage
	for i, name := range b.names {
		if i >= len(a.names) || a.names[i] != name {
			return nil // a core went on or offline: no answer
		}
		var d [len(cpuFields)]float64
		var total float64
		for j := range cpuFields {
			if b.ticks[i][j] >= a.ticks[i][j] {
				d[j] = float64(b.ticks[i][j] - a.ticks[i][j])
			}
			total += d[j]
		}
		if total == 0 {
			total = 1
		}
		pct := func(j int) float64 { return 100 * d[j] / total }
		out = append(out, CoreUsage{
			CPU: name, User: pct(0), Nice: pct(1), System: pct(2), Idle: pct(3),
			IOWait: pct(4), IRQ: pct(5), SoftIRQ: pct(6), Steal: pct(7),
		})
	}
	return out
}

// meanUsage averages per-core utilisation over runs (sar's "Average:").
func meanUsage(runs [][]CoreUsage) []CoreUsage {
	var out []CoreUsage
	n := 0
	for _, r := range runs {
		if len(r) == 0 {
			continue
		}
		if out == nil {
			out = make([]CoreUsage, len(r))
			for i := range r {
				out[i].CPU = r[i].CPU
			}
		}
		if len(r) != len(out) {
			continue
		}
		n++
		for i, c := range r {
			o := &out[i]
			o.User += c.User
			o.Nice += c.Nice
			o.System += c.System
			o.IOWait += c.IOWait
			o.IRQ += c.IRQ
			o.SoftIRQ += c.SoftIRQ
			o.Steal += c.Steal
			o.Idle += c.Idle
		}
	}
	for i := range out {
		o := &out[i]
		f := 1 / float64(max(n, 1))
		o.User, o.Nice, o.System, o.IOWait = o.User*f, o.Nice*f, o.System*f, o.IOWait*f
		o.IRQ, o.SoftIRQ, o.Steal, o.Idle = o.IRQ*f, o.SoftIRQ*f, o.Steal*f, o.Idle*f
	}
	return out
}
