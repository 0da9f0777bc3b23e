package kernels

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"
)

// ResultPrefix starts the line on the guest's console that carries one
// Result as JSON; DonePrefix starts the line the guest prints when it has
// run everything, just before it powers off; SmokePrefix starts a line of
// the network smoke check.
const (
	ResultPrefix = "@@kernels result "
	DonePrefix   = "@@kernels done"
	SmokePrefix  = "@@kernels smoke "
)

// Status of a step in the guest.
const (
	StatusOK      = "ok"      // exited 0
	StatusFail    = "fail"    // exited non-zero
	StatusTimeout = "timeout" // killed at its deadline
	StatusError   = "error"   // could not be started
	StatusNotRun  = "not run" // the guest ended before it
)

// Case is one test or subtest that failed or was skipped.
type Case struct {
	Name string `json:"name"`
	// Reason is a skipped test's message, the file:line prefix removed.
	Reason string `json:"reason,omitempty"`
	// Output is the last lines a failed test printed.
	Output []string `json:"output,omitempty"`
}

// Result is what one step (a test binary or the bench) did in one kernel.
// The counts cover tests and subtests alike, as `go test -v` reports them.
type Result struct {
	Kernel   string        `json:"kernel,omitempty"`
	Name     string        `json:"name"`
	Status   string        `json:"status"`
	Exit     int           `json:"exit"`
	Duration time.Duration `json:"duration"`
	// Tests says the step is a test binary: the counts are its tests'.
	Tests   bool   `json:"tests,omitempty"`
	Passed  int    `json:"passed"`
	Failed  []Case `json:"failed,omitempty"`
	Skipped []Case `json:"skipped,omitempty"`
	// Panic is the first lines of a panic: for the test binary's own
	// deadline, "panic: test timed out after D" and the tests running.
	Panic []string `json:"panic,omitempty"`
	// Tail is the last lines of the output when they say more than the
	// cases: a failure outside any test, the bench's summary.
	Tail []string `json:"tail,omitempty"`
	// Error says why the step could not be started.
	Error string `json:"error,omitempty"`
}

// Line is r as one console line: ResultPrefix and r in JSON.
func (r *Result) Line() string {
	b, _ := json.Marshal(r)
	return ResultPrefix + string(b)
}

// ParseResultLine returns the Result a console line carries, if it is one.
// Characters before the prefix (a kernel message that was cut into) are
// ignored.
func ParseResultLine(line string) (Result, bool) {
	i := strings.Index(line, ResultPrefix)
	if i < 0 {
		return Result{}, false
	}
	var r Result
	if err := json.Unmarshal([]byte(strings.TrimSpace(line[i+len(ResultPrefix):])), &r); err != nil {
		return Result{}, false
	}
	return r, true
}

// TimedOut reports whether the test binary panicked at its deadline
// (-test.timeout).
func (r *Result) TimedOut() bool {
	return len(r.Panic) > 0 && strings.HasPrefix(r.Panic[0], "panic: test timed out")
}

// Lines kept of a failed test's output and of a step's tail.
const (
	caseLines  = 8
	tailLines  = 20
	panicLines = 12
)

var (
	// "=== RUN   TestX", "=== CONT  TestX", "=== NAME  TestX", "=== PAUSE TestX"
	eventRE = regexp.MustCompile(`^=== (RUN|CONT|NAME|PAUSE)\s+(\S+)`)
	// "--- PASS: TestX (0.01s)", indented for subtests
	verdictRE = regexp.MustCompile(`^(\s*)--- (PASS|FAIL|SKIP): (\S+)`)
	// "    file_test.go:42: message"
	logRE = regexp.MustCompile(`^\s+[\w.-]+\.go:\d+: ?(.*)$`)
)

// ParseTestOutput reads the output of a test binary run with -test.v and
// fills r's Passed, Failed, Skipped, Panic and Tail. A line belongs to the
// test the last "=== RUN/CONT/NAME" line named, and the indented lines
// right after a "--- " verdict to that verdict's test. A panic's lines run
// from "panic: " to the first empty line.
func ParseTestOutput(out io.Reader, r *Result) error {
	lines := map[string][]string{} // test → its last output lines
	var current string             // the test the output belongs to
	var tail []string
	after := -1 // the case whose verdict the indented lines follow
	var afterSkip bool
	inPanic := false

	keep := func(s []string, line string, n int) []string {
		s = append(s, line)
		if len(s) > n {
			s = s[len(s)-n:]
		}
		return s
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		tail = keep(tail, line, tailLines)
		if strings.HasPrefix(line, "panic: ") && r.Panic == nil {
			inPanic = true
		}
		if inPanic {
			if strings.TrimSpace(line) == "" || len(r.Panic) == panicLines {
				inPanic = false
			} else {
				r.Panic = append(r.Panic, strings.TrimSpace(line))
			}
			continue
		}
		if m := eventRE.FindStringSubmatch(line); m != nil {
			current, after = m[2], -1
			continue
		}
		if m := verdictRE.FindStringSubmatch(line); m != nil {
			name := m[3]
			current, after = "", -1
			switch m[2] {
			case "PASS":
				r.Passed++
			case "FAIL":
				r.Failed = append(r.Failed, Case{Name: name, Output: lines[name]})
				after, afterSkip = len(r.Failed)-1, false
			case "SKIP":
				r.Skipped = append(r.Skipped, Case{Name: name, Reason: reason(lines[name])})
				after, afterSkip = len(r.Skipped)-1, true
			}
			continue
		}
		if after >= 0 && strings.HasPrefix(line, "    ") {
			if afterSkip {
				if m := logRE.FindStringSubmatch(line); m != nil {
					r.Skipped[after].Reason = m[1]
				}
			} else {
				c := &r.Failed[after]
				c.Output = keep(c.Output, strings.TrimSpace(line), caseLines)
			}
			continue
		}
		after = -1
		if current != "" {
			lines[current] = keep(lines[current], strings.TrimSpace(line), caseLines)
		}
	}
	r.Tail = tail
	return sc.Err()
}

// reason is a skip message from a test's output lines: the last log line,
// without its file:line prefix.
func reason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		if m := logRE.FindStringSubmatch("    " + lines[i]); m != nil {
			return m[1]
		}
	}
	return ""
}

// Skip classes.
const (
	SkipTool   = "tool"   // a program the test runs is not installed
	SkipKernel = "kernel" // the kernel lacks a feature
	SkipOther  = "other"
)

var (
	toolRE   = regexp.MustCompile(`(?i)not installed|executable file not found|not found in \$PATH|no such file or directory.*(bin/|exec)`)
	kernelRE = regexp.MustCompile(`(?i)kernel|linux \d|not supported|unsupported|EOPNOTSUPP|ENOTSUP|ENOPROTOOPT|EINVAL|invalid argument|no such device|verifier|needs .*\d\.\d`)
)

// SkipClass says why a test skipped, from its reason: a missing tool, a
// missing kernel feature, or something else (a user, a precondition of the
// machine, a test meant for another configuration).
func SkipClass(reason string) string {
	switch {
	case toolRE.MatchString(reason):
		return SkipTool
	case kernelRE.MatchString(reason):
		return SkipKernel
	}
	return SkipOther
}

// Smoke is what the guest's network smoke check found.
type Smoke struct {
	NICs []NIC `json:"nics"`
	// Frame says whether an Ethernet frame sent on the first virtio-net
	// NIC arrived on the second, through QEMU.
	Frame string `json:"frame,omitempty"`
	// Features are the kernel features the tests probe for
	// (netlab.Probes), found or not.
	Features []Feature `json:"features,omitempty"`
}

// Feature is one probed kernel feature.
type Feature struct {
	Name    string `json:"name"`
	Since   string `json:"since"` // the release the README names ("6.6")
	Present bool   `json:"present"`
	Error   string `json:"error,omitempty"` // why not, or the probe's failure
}

// Expected reports whether a kernel of release ("6.1.0-57-cloud-amd64")
// should have the feature, by its Since.
func (f Feature) Expected(release string) bool {
	return versionAtLeast(release, f.Since)
}

// versionAtLeast compares the major and minor numbers of a release with
// "MAJOR.MINOR".
func versionAtLeast(release, since string) bool {
	var rMaj, rMin, sMaj, sMin int
	fmt.Sscanf(release, "%d.%d", &rMaj, &rMin)
	fmt.Sscanf(since, "%d.%d", &sMaj, &sMin)
	return rMaj > sMaj || rMaj == sMaj && rMin >= sMin
}

// NIC is one network device of the guest with a driver behind it.
type NIC struct {
	Name   string `json:"name"`
	Driver string `json:"driver"`
	// XDP says whether an XDP program attached in native (driver) mode,
	// for virtio-net NICs: "native" or the error.
	XDP string `json:"xdp,omitempty"`
	// Offloads are the NIC's segmentation and receive offloads that are
	// on ("tx-tcp-segmentation rx-gro-hw ..."), before XDP.
	Offloads string `json:"offloads,omitempty"`
}

// Line is s as one console line: SmokePrefix and s in JSON.
func (s *Smoke) Line() string {
	b, _ := json.Marshal(s)
	return SmokePrefix + string(b)
}

// ParseSmokeLine returns the Smoke a console line carries, if it is one.
func ParseSmokeLine(line string) (Smoke, bool) {
	i := strings.Index(line, SmokePrefix)
	if i < 0 {
		return Smoke{}, false
	}
	var s Smoke
	if err := json.Unmarshal([]byte(strings.TrimSpace(line[i+len(SmokePrefix):])), &s); err != nil {
		return Smoke{}, false
	}
	return s, true
}
