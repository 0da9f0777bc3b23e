package main

// Progress on stderr: a status line a second for the running trial (one
// run of one row), with how many trials are done and an estimate of the
// time left, and whole lines (titles, failures) in between. On a terminal
// the status line is rewritten in place; elsewhere each is a line.

import (
	"fmt"
	"io"
	"time"
)

// progress counts the trials of the whole bench and writes its lines.
type progress struct {
	w       io.Writer
	width   int           // the terminal's columns; 0: not a terminal
	total   int           // trials planned: every selected row × runs
	done    int           // trials ended, measured or failed
	planned time.Duration // warm-up + duration: one trial without overheads
	start   time.Time     // when the first trial began
	trialAt time.Time     // when the running trial began
	shown   bool          // a status line is on the terminal, not ended
}

func newProgress(w io.Writer, total int, planned time.Duration) *progress {
	return &progress{w: w, width: terminalWidth(w), total: total, planned: planned}
}

// begin marks the start of a trial at now.
func (p *progress) begin(now time.Time) {
	if p.start.IsZero() {
		p.start = now
	}
	p.trialAt = now
}

// end counts the running trial as done.
func (p *progress) end() { p.done++ }

// eta estimates the time left at now: each trial left takes as long as
// the finished ones took on average, set-up, tear-down and the gaps
// between them included (before the first ends, warm-up + duration).
func (p *progress) eta(now time.Time) time.Duration {
	per := p.planned
	if p.done > 0 {
		per = p.trialAt.Sub(p.start) / time.Duration(p.done)
	}
	left := time.Duration(max(p.total-p.done-1, 0))*per + max(per-now.Sub(p.trialAt), 0)
	return left.Round(time.Second)
}

// status writes the running trial's line at now, after the count of
// trials and the estimate.
func (p *progress) status(now time.Time, line string) {
	line = fmt.Sprintf("row %d/%d, ETA %v  %s", p.done+1, p.total, p.eta(now), line)
	if p.width == 0 {
		fmt.Fprintln(p.w, line)
		return
	}
	if r := []rune(line); len(r) >= p.width {
		line = string(r[:p.width-1]) // a wrapped line cannot be rewritten
	}
	fmt.Fprint(p.w, "\r"+line+"\x1b[K")
	p.shown = true
}

// Write writes whole lines, below the status line's last state.
func (p *progress) Write(b []byte) (int, error) {
	p.close()
	return p.w.Write(b)
}

// close ends the status line on the terminal, if one is shown.
func (p *progress) close() {
	if p.shown {
		fmt.Fprintln(p.w)
		p.shown = false
	}
}
