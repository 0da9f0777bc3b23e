package kernels

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Kernel is one kernel of the matrix, as the report shows it.
type Kernel struct {
	Name    string `json:"name"`              // "debian12", "host"
	Release string `json:"release,omitempty"` // uname -r
	// Skipped says why the kernel did not run (no image, no QEMU).
	Skipped string `json:"skipped,omitempty"`
	// Guest says how the guest ended when it did not end as planned
	// (its deadline, a crash before the last step).
	Guest    string        `json:"guest,omitempty"`
	Accel    string        `json:"accel,omitempty"` // "kvm" or "tcg"
	Wire     string        `json:"wire,omitempty"`  // what joins the guest's NICs
	Duration time.Duration `json:"duration,omitempty"`
	Smoke    *Smoke        `json:"smoke,omitempty"`
	Results  []Result      `json:"results,omitempty"`
	Log      string        `json:"log,omitempty"` // the guest's console log on the host
}

// Report is the matrix: every kernel and what ran in it.
type Report struct {
	Kernels []Kernel `json:"kernels"`
}

// Write writes the report as text: the summary table (kernel × step:
// status, passed, failed, skipped, time), then for each kernel its network
// smoke check, its failed tests with their last lines and its skipped
// tests with their reasons and classes.
func (rep *Report) Write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "kernel\trelease\tpackage\tstatus\tpass\tfail\tskip\ttime")
	for _, k := range rep.Kernels {
		if k.Skipped != "" {
			fmt.Fprintf(tw, "%s\t%s\t—\tskipped\t\t\t\t\n", k.Name, dash(k.Release))
			continue
		}
		for _, r := range k.Results {
			counts := "—\t—\t—"
			if r.Tests {
				counts = fmt.Sprintf("%d\t%d\t%d", r.Passed, len(r.Failed), len(r.Skipped))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.Name, k.Release, r.Name, r.Status,
				counts, r.Duration.Round(time.Second))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, k := range rep.Kernels {
		fmt.Fprintf(w, "\n== %s", k.Name)
		if k.Release != "" {
			fmt.Fprintf(w, " (Linux %s)", k.Release)
		}
		if k.Skipped != "" {
			fmt.Fprintf(w, ": skipped: %s\n", k.Skipped)
			continue
		}
		fmt.Fprintf(w, ": %s, guest ran %s", accelName(k.Accel), k.Duration.Round(time.Second))
		if k.Log != "" {
			fmt.Fprintf(w, ", console log %s", k.Log)
		}
		fmt.Fprintln(w)
		if k.Guest != "" {
			fmt.Fprintf(w, "guest: %s\n", k.Guest)
		}
		if s := k.Smoke; s != nil {
			fmt.Fprintf(w, "network smoke check (NICs joined by %s):\n", dash(k.Wire))
			for _, n := range s.NICs {
				fmt.Fprintf(w, "  %s: driver %s", n.Name, n.Driver)
				if n.Offloads != "" {
					fmt.Fprintf(w, ", offloads %s", n.Offloads)
				}
				if n.XDP != "" {
					fmt.Fprintf(w, ", XDP %s", n.XDP)
				}
				fmt.Fprintln(w)
			}
			if s.Frame != "" {
				fmt.Fprintf(w, "  frame %s\n", s.Frame)
			}
			writeFeatures(w, k.Release, s.Features)
		}
		for _, r := range k.Results {
			writeDetails(w, &r)
		}
	}
	return nil
}

// writeFeatures lists the probed features and whether each agrees with
// the release the README's requirements table gives it.
func writeFeatures(w io.Writer, release string, fs []Feature) {
	if len(fs) > 0 {
		fmt.Fprintln(w, "kernel features (README: needs Linux N):")
	}
	for _, f := range fs {
		state := "present"
		if !f.Present {
			state = "absent"
		}
		agree := "as the README says"
		if f.Present != f.Expected(release) {
			agree = "DISAGREES with the README's requirements table"
		}
		fmt.Fprintf(w, "  %s (Linux %s): %s, %s\n", f.Name, f.Since, state, agree)
		if f.Error != "" && f.Present == f.Expected(release) && f.Expected(release) {
			fmt.Fprintf(w, "    %s\n", f.Error)
		}
	}
}

// Disagreements counts the probed features of the report's kernels
// whose presence disagrees with the README's requirements table.
func (rep *Report) Disagreements() int {
	n := 0
	for _, k := range rep.Kernels {
		if k.Smoke == nil {
			continue
		}
		for _, f := range k.Smoke.Features {
			if f.Present != f.Expected(k.Release) {
				n++
			}
		}
	}
	return n
}

func writeDetails(w io.Writer, r *Result) {
	if r.Status == StatusOK && len(r.Skipped) == 0 && len(r.Tail) == 0 {
		return
	}
	fmt.Fprintf(w, "%s: %s", r.Name, r.Status)
	if r.Error != "" {
		fmt.Fprintf(w, ": %s", r.Error)
	}
	fmt.Fprintln(w)
	for _, c := range r.Failed {
		fmt.Fprintf(w, "  FAIL %s\n", c.Name)
		for _, l := range c.Output {
			fmt.Fprintf(w, "       %s\n", l)
		}
	}
	for _, l := range r.Panic {
		fmt.Fprintf(w, "  %s\n", l)
	}
	for _, c := range r.Skipped {
		why := c.Reason
		if why == "" {
			why = "(no reason given)"
		}
		fmt.Fprintf(w, "  SKIP %s [%s] %s\n", c.Name, SkipClass(c.Reason), why)
	}
	if len(r.Tail) > 0 {
		fmt.Fprintf(w, "  last lines:\n")
		for _, l := range r.Tail {
			fmt.Fprintf(w, "    | %s\n", l)
		}
	}
}

func accelName(accel string) string {
	switch accel {
	case "kvm":
		return "QEMU with KVM"
	case "tcg":
		return "QEMU under emulation (TCG)"
	}
	return "QEMU"
}

func dash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "—"
	}
	return s
}
