package main

// The project's targets: each a ratio of two figures measured in the same
// run (a row and its peer), judged against a threshold. The bench reports
// them in one block after the tables; it never fails for a missed target
// (a shared machine's numbers are not a verdict).

import (
	"fmt"
	"math"
)

// target is a ratio some scenario computes (by its key) that the project
// means to reach.
type target struct {
	scenario, key string
	atMost        bool    // the ratio is meant to stay at or under threshold
	threshold     float64 // in the ratio's own terms (a fraction for percent)
	// lessBy, if set, is the key of a ratio of the same scenario, a noise
	// floor, whose value this run lowers the threshold by.
	lessBy string
	form   form   // how the value and the threshold are shown
	aim    string // what the target asks for
}

// targets is every target of the project, in the order they are shown.
var targets = []target{
	{scenario: "backpressure", key: "on delivered", threshold: 1, form: percent,
		aim: "with backpressure nothing is lost: every datagram sent arrives"},
	{scenario: "gso", key: "default/floor", threshold: 0.97,
		aim: "the default gateway within 3% of the floor's throughput (TUN ⇄ packet socket, two copies each way)"},
	{scenario: "gso", key: "default/floor cores/Gbit", atMost: true, threshold: 1.1,
		aim: "the default gateway's cores per Gbit/s at most 10% over the floor's"},
	{scenario: "gso", key: "default/kernel", threshold: 0.85,
		aim: "the default gateway (PortAuto) within reach of the kernel alone"},
	{scenario: "gso", key: "packet-offload/kernel", threshold: 0.9,
		aim: "AF_PACKET with the NIC segmenting, within reach of the kernel alone"},
	{scenario: "gso", key: "packet-full/xdp", threshold: 1,
		aim: "AF_PACKET cutting every segment itself, at least as fast as AF_XDP"},
	{scenario: "gro", key: "packet-gro/floor", threshold: 0.97,
		aim: "the default gateway's return path (packet-gro) within 3% of the floor's throughput"},
	{scenario: "gro", key: "packet-gro/floor cores/Gbit", atMost: true, threshold: 1.1,
		aim: "its cores per Gbit/s at most 10% over the floor's"},
	{scenario: "gro", key: "packet-gro/xdp-no-gro", threshold: 2,
		aim: "the kernel's GRO before the AF_PACKET port, twice the per-packet return path"},
	{scenario: "gro", key: "packet-gro/kernel", threshold: 1,
		aim: "the AF_PACKET return path with the kernel's GRO as fast as the kernel alone"},
	{scenario: "xdphook", key: "noop/none", threshold: 1, lessBy: "none-spread", form: delta,
		aim: "the no-op hook costs no more than the no-hook row's noise floor"},
	{scenario: "xdphook", key: "inspect/none", threshold: 0.99, form: delta,
		aim: "the inspecting hook costs at most 1% of the rate"},
	{scenario: "xdphook", key: "none-spread", atMost: true, threshold: 0.05, form: percent,
		aim: "the no-hook row's run-to-run spread (the noise floor) at most 5%"},
	{scenario: "xdphook", key: "none/tun", threshold: 5,
		aim: "the AF_XDP ingress port forwards 5× the TUN fast path"},
	{scenario: "ingress", key: "packet/floor", threshold: 0.95,
		aim: "AF_PACKET ingress within 5% of the floor's throughput (packet socket → packet socket, whole super-packets)"},
	{scenario: "ingress", key: "xdp/kernel", threshold: 0.5,
		aim: "the AF_XDP ingress port at least half the kernel's forwarding"},
	{scenario: "ingress", key: "packet/kernel", threshold: 0.7,
		aim: "AF_PACKET ingress, super-packets leaving whole, at least 0.7× the kernel's forwarding"},
	{scenario: "tunnel", key: "tunnel/floor", threshold: 0.95,
		aim: "the plaintext Tunnel within 5% of the floor's throughput (TUN ⇄ UDP_SEGMENT and UDP_GRO sockets)"},
	{scenario: "tunnel", key: "tunnel/wg-plumbing A→B", threshold: 1.3,
		aim: "the plaintext Tunnel 1.3× wireguard-go's own plumbing, A→B"},
	{scenario: "tunnel", key: "tunnel/wg-plumbing B→A", threshold: 1.3,
		aim: "the same, B→A"},
	{scenario: "tunnel", key: "vpn/wg-device A→B", threshold: 1.2,
		aim: "the encrypted example 1.2× a wireguard-go device, A→B"},
	{scenario: "tunnel", key: "vpn/wg-device B→A", threshold: 1.2,
		aim: "the same, B→A"},
	{scenario: "wireguard", key: "wireguard/wg-device A→B", threshold: 1.8,
		aim: "gsoplane's WireGuard 1.8× a wireguard-go device, A→B"},
	{scenario: "wireguard", key: "wireguard/wg-device B→A", threshold: 1.8,
		aim: "the same, B→A"},
	{scenario: "wireguard", key: "wireguard/wg-device cores/Gbit", atMost: true, threshold: 0.6,
		aim: "its cores per Gbit/s at most 0.6× a wireguard-go device's"},
	{scenario: "tunnel-gso", key: "on/off", threshold: 2,
		aim: "TCP over VXLAN with the TUN's tunnel offloads, twice the kernel cutting before the TUN"},
	{scenario: "tunnel-gso", key: "xdp-on/xdp-off", threshold: 2,
		aim: "the same with the AF_XDP port"},
}

// isTarget reports whether the ratio key of scenario is a target.
func isTarget(scenario, key string) bool {
	for _, t := range targets {
		if t.scenario == scenario && t.key == key {
			return true
		}
	}
	return false
}

// status is a target's outcome in one run.
type status string

const (
	met         status = "met"
	metByMedian status = "met_by_median" // the median met it, some run did not
	missed      status = "missed"
	notMeasured status = "not_measured" // a row it needs did not run
)

func (s status) String() string {
	switch s {
	case metByMedian:
		return "met by the median, not by every run"
	case missed:
		return "MISSED"
	case notMeasured:
		return "not measured"
	}
	return string(s)
}

// targetResult is a target judged on one run's ratios.
type targetResult struct {
	target
	threshold float64 // this run's: lowered by the lessBy ratio
	ratio     *ratio  // nil when not measured
	status    status
}

// judge evaluates t against the ratios of its scenario.
func judge(t target, ratios []ratio) targetResult {
	res := targetResult{target: t, threshold: t.threshold, status: notMeasured}
	q, ok := findRatio(ratios, t.key)
	if t.lessBy != "" {
		floor, found := findRatio(ratios, t.lessBy)
		ok = ok && found
		res.threshold -= floor.Value
	}
	if !ok || math.IsNaN(q.Value) {
		return res
	}
	res.ratio = &q
	switch {
	case !res.meets(q.Value):
		res.status = missed
	case q.Hi > 0 && !(res.meets(q.Lo) && res.meets(q.Hi)):
		res.status = metByMedian
	default:
		res.status = met
	}
	return res
}

func (r targetResult) meets(v float64) bool {
	if r.atMost {
		return v <= r.threshold
	}
	return v >= r.threshold
}

// op is the comparison the target asks for.
func (r targetResult) op() string {
	if r.atMost {
		return "≤"
	}
	return "≥"
}

// bound is the threshold as the value is shown, such as "≥ 0.80×".
func (r targetResult) bound() string { return r.op() + " " + r.form.format(r.threshold) }

// value is the measured ratio with its per-run range, or "—".
func (r targetResult) value() string {
	if r.ratio == nil {
		return "—"
	}
	q := *r.ratio
	q.Form, q.Show = r.form, ""
	return q.String()
}

// operands is the row's figure and its peer's, such as "7661 / 10795 Mbit/s".
func (r targetResult) operands() string {
	if r.ratio == nil {
		return "—"
	}
	a, b := r.ratio.A, r.ratio.B
	if a.Unit == b.Unit {
		return a.number() + " / " + b.String()
	}
	return a.String() + " / " + b.String()
}

func findRatio(ratios []ratio, key string) (ratio, bool) {
	for _, q := range ratios {
		if q.Key == key {
			return q, true
		}
	}
	return ratio{}, false
}

// judgeAll judges every target of the scenarios that ran.
func judgeAll(scenarios []scenarioResult) []targetResult {
	var out []targetResult
	for _, t := range targets {
		for _, s := range scenarios {
			if s.name == t.scenario {
				out = append(out, judge(t, s.ratios))
			}
		}
	}
	return out
}

// operand is one of the two figures a ratio divides.
type operand struct {
	Name  string  // the row, and which of its figures
	Value float64 // in Unit
	Unit  string  // "bit/s", "pps", or what a count counts
}

// number is the value as shown, scaled to the unit's display form.
func (o operand) number() string {
	switch o.Unit {
	case "bit/s":
		return fmt.Sprintf("%.0f", o.Value/1e6)
	case "pps":
		return fmt.Sprintf("%.3f", o.Value/1e6)
	case coresPerGbit:
		return fmt.Sprintf("%.3f", o.Value)
	}
	return fmt.Sprintf("%.0f", o.Value)
}

func (o operand) String() string {
	switch o.Unit {
	case "bit/s":
		return o.number() + " Mbit/s"
	case "pps":
		return o.number() + " Mpps"
	}
	return o.number() + " " + o.Unit
}
