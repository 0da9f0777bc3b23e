package main

// The measuring loop shared by every scenario: start a trial (topology,
// dataplane, traffic), let it warm up, take a snapshot of its counters and
// of /proc/stat, wait -duration while writing a progress line per second
// (progress.go), take a second snapshot, stop, and turn the differences
// into a runResult. Rows are interleaved across runs (run 1 of every row,
// then run 2, ... in rotating order) so that drift on a shared machine
// hits every row alike.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"
)

// counters is what a running trial reports at any moment; the runner
// takes differences between two snapshots.
type counters struct {
	RxBytes    uint64 // bytes the receiver got (payload; hook: IP bytes forwarded)
	Received   uint64 // datagrams or packets received (see rowSpec.units)
	RxMessages uint64 // UDP: sends whose every datagram was received
	RxMsgBytes uint64 // UDP: their payload bytes
	Sent       uint64 // sends or bytes sent (see rowSpec.units)
	SendErrors uint64 // sends refused by the kernel (ENOBUFS)
	Segments   uint64 // segments the dataplane transmitted
	Reads      uint64 // packets the dataplane read from its source
	Drops      uint64 // packets or segments the dataplane dropped
	Retrans    uint64 // TCP retransmissions of the sender (TCP_INFO)
	RetPackets uint64 // packets the gateway's return path took from the NIC
	RetWrites  uint64 // its writes into the TUN (a GRO super-packet counts once)
	RxBytesRev uint64 // of RxBytes, those of the reverse stream (B→A), in rows that run one each way
	TxDgrams   uint64 // tunnel rows: UDP datagrams sent by both ends
	TxCalls    uint64 // the calls that sent them (sendmmsg, or Bind.Send)
	RxDgrams   uint64 // UDP datagrams received by both ends
	RxCalls    uint64 // the calls that received them (recvmmsg, or a ReceiveFunc)

	BudgetInFlight, BudgetLimit int64 // the send budget, bytes

	GatewayCPU time.Duration // CPU time of the gateway in the bench's process (gatewayCPU); 0: none runs
}

// final holds what a trial knows only once it has stopped.
type final struct {
	Lost    *int64             // datagrams sent and never received, whole run
	Bps     *float64           // throughput measured by an outside tool (iperf3)
	Retrans *uint64            // retransmits measured by an outside tool
	Extra   map[string]float64 // row-specific facts
}

// trial is one running measurement.
type trial interface {
	snapshot() counters
	// finish stops the traffic and the dataplane and removes the
	// topology; it is called exactly once.
	finish() (final, error)
}

// units names what a row's sent and received counters count.
type units struct{ sent, received string }

// rowSpec is one row of a scenario's table.
type rowSpec struct {
	name    string
	units   units
	retrans bool // TCP: report retransmits
	ppsMain bool // the row's main metric is pps, not throughput
	ppsAtB  bool // pps counts packets arriving at gw-b (no dataplane to count)
	// copies is how many times the row's path copies a super-packet's
	// payload (docs/bench-json.md); nil for a row that forwards nothing.
	copies *int
	// product marks the row of the gateway as shipped (GatewayConfig's
	// zero value, or the package's defaults): the scenario's headline.
	product bool
	start   func(ctx context.Context) (trial, error)
}

// asProduct is r marked as the product's row.
func (r rowSpec) asProduct() rowSpec {
	r.product = true
	return r
}

// label is the row's name as tables show it: the product's marked.
func (r rowSpec) label() string {
	if r.product {
		return r.name + " (product)"
	}
	return r.name
}

// The copies of a super-packet's payload on the bench's paths, the
// sender's own copy into its socket and the receiver's out of it not
// counted (docs/bench-json.md). User space's copies are checked by the
// TestCopies tests (dataplane, dataplane/tunnel; internal/copycount),
// the kernel's are those of the system calls the path makes.
const (
	// kernelCopies: the kernel hands its skbs on from socket to socket.
	kernelCopies = 0
	// forwardCopies: the TUN read (or an AF_XDP copy-mode receive), the
	// copy into a TX frame (cut or whole), the kernel's copy of the frame
	// into an skb (AF_PACKET's sendmmsg, AF_XDP copy-mode transmit).
	forwardCopies = 3
	// inPlaceCopies: AF_PACKET handing the NIC whole super-packets reads
	// each from its source straight into the frame it is sent from
	// (pipeline.Stats.InPlace), then the kernel's copy into an skb.
	inPlaceCopies = 2
	// returnCopies: the port's receive (AF_XDP copy mode into the UMEM,
	// AF_PACKET's recvmmsg) and the TUN write into an skb; GRO merges
	// with a vectored write, no copy.
	returnCopies = 2
	// floorCopies: the floor rows (floor_linux.go): a read into the
	// floor's buffer (TUN read, packet socket receive) and the kernel's
	// copy into an skb (packet socket send, TUN write), each way.
	floorCopies = 2
	// tunnelCopies: through a tunnel, end to end: the sender's TUN read,
	// its cut into datagrams, sendmmsg's copy; the receiver's recvmmsg
	// and its TUN write (GRO merges with a vectored write). Seal and
	// Open work in place.
	tunnelCopies = forwardCopies + returnCopies
	// peerCopies: a peer's TUN writer (wireguard-go's coalescing
	// Device.Write) or reader (its Read, Tailscale's GSOSplit) copies the
	// packets once more, into its own buffers.
	peerCopies = 1
	// wireCopies: a packet from an AF_XDP ingress port is copied once
	// more, by pipeline.WireSource, into the buffer it is cut from or
	// sent whole from; an AF_PACKET port receives it there
	// (frame.IntoReceiver: the port's recvmmsg is the source's copy).
	wireCopies = 1
	// chainCopies: an AF_XDP multi-buffer chain is gathered from its
	// UMEM frames into one buffer before that.
	chainCopies = 1
)

// copying is r with the copies of its path.
func (r rowSpec) copying(n int) rowSpec {
	r.copies = &n
	return r
}

// runResult is one measured run of a row.
type runResult struct {
	Seconds       float64 `json:"seconds"`
	ThroughputBps float64 `json:"throughput_bps"`
	PPS           float64 `json:"pps"`
	Sent          uint64  `json:"sent"`
	SendErrors    uint64  `json:"send_errors"`
	Received      uint64  `json:"received"`
	RxMessages    uint64  `json:"received_messages,omitempty"`
	GoodputBps    float64 `json:"goodput_bps,omitempty"`
	Drops         uint64  `json:"drops"`
	Retransmits   uint64  `json:"retransmits"`
	SegsPerRead   float64 `json:"segments_per_read,omitempty"`
	WritesPerPkt  float64 `json:"writes_per_packet,omitempty"`
	ReverseBps    float64 `json:"reverse_bps,omitempty"`
	DgramsPerSend float64 `json:"datagrams_per_send,omitempty"`
	DgramsPerRecv float64 `json:"datagrams_per_receive,omitempty"`
	Lost          *int64  `json:"lost,omitempty"`
	// GatewayCores is the cores the gateway kept busy on average (its
	// CPU time over the window's); GatewayCoresPerGbit that per Gbit/s of
	// throughput; BusyCoresPerGbit the whole machine's busy cores (CPU)
	// per Gbit/s.
	GatewayCores        float64            `json:"gateway_cores,omitempty"`
	GatewayCoresPerGbit float64            `json:"gateway_cores_per_gbit,omitempty"`
	BusyCoresPerGbit    float64            `json:"busy_cores_per_gbit,omitempty"`
	CPU                 []CoreUsage        `json:"cpu"`
	Extra               map[string]float64 `json:"extra,omitempty"`
}

// main returns the metric runs are ranked by.
func (r runResult) main(pps bool) float64 {
	if pps {
		return r.PPS
	}
	return r.ThroughputBps
}

// direction is r's throughput A→B, or B→A (rev), of a row that runs a
// stream each way (rowSpec tunnel rows; ReverseBps is the B→A part).
func (r runResult) direction(rev bool) float64 {
	if rev {
		return r.ReverseBps
	}
	return r.ThroughputBps - r.ReverseBps
}

// rowResult collects the runs of one row.
type rowResult struct {
	scenario string
	spec     rowSpec
	runs     []runResult
	errs     []string
}

// median returns the run with the median main metric (the lower middle
// one for an even count) and the minimum and maximum of that metric.
func (r *rowResult) median() (med runResult, lo, hi float64, ok bool) {
	if len(r.runs) == 0 {
		return runResult{}, 0, 0, false
	}
	runs := append([]runResult(nil), r.runs...)
	sort.SliceStable(runs, func(i, j int) bool { return runs[i].main(r.spec.ppsMain) < runs[j].main(r.spec.ppsMain) })
	return runs[(len(runs)-1)/2], runs[0].main(r.spec.ppsMain), runs[len(runs)-1].main(r.spec.ppsMain), true
}

// directionMedian is the median over r's runs of the throughput one way
// (rev: B→A; the lower middle one for an even count, as median): the
// figure of a direction, which the run with the median throughput both
// ways need not have, since the two streams share the cores differently
// from run to run.
func (r *rowResult) directionMedian(rev bool) float64 {
	if len(r.runs) == 0 {
		return 0
	}
	v := make([]float64, len(r.runs))
	for i, run := range r.runs {
		v[i] = run.direction(rev)
	}
	sort.Float64s(v)
	return v[(len(v)-1)/2]
}

// measureOpts are the timing options of every run.
type measureOpts struct {
	warmup, duration time.Duration
	runs             int
	verbose          bool
}

// runRows measures every row opts.runs times, interleaved in rotating
// order, and writes its progress to p. It stops early when ctx ends.
func runRows(ctx context.Context, scenario string, rows []rowSpec, opts measureOpts, p *progress) []*rowResult {
	results := make([]*rowResult, len(rows))
	for i, r := range rows {
		results[i] = &rowResult{scenario: scenario, spec: r}
	}
	for run := 1; run <= opts.runs; run++ {
		// Rotate the order from run to run, so that no row always comes
		// first (after a scenario's set-up) or last.
		for k := range results {
			res := results[(k+run-1)%len(results)]
			if ctx.Err() != nil {
				return results
			}
			label := fmt.Sprintf("[%s %s %d/%d]", scenario, res.spec.name, run, opts.runs)
			p.begin(time.Now())
			rr, err := measureOnce(ctx, res.spec, opts, label, p)
			p.end()
			if err != nil {
				if ctx.Err() != nil {
					return results
				}
				fmt.Fprintf(p, "%s failed: %v\n", label, err)
				res.errs = append(res.errs, err.Error())
				continue
			}
			res.runs = append(res.runs, rr)
			if opts.verbose {
				fmt.Fprintf(p, "%s done: %s\n", label, describeRun(res.spec, rr))
			}
		}
	}
	return results
}

// measureOnce runs one trial of a row.
func measureOnce(ctx context.Context, spec rowSpec, opts measureOpts, label string, p *progress) (rr runResult, err error) {
	t, err := spec.start(ctx)
	if err != nil {
		return rr, err
	}
	finished := false
	defer func() {
		if !finished {
			_, ferr := t.finish()
			err = errors.Join(err, ferr)
		}
	}()

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	begin := time.Now()
	first := t.snapshot()
	last, lastAt := first, begin
	var c0 counters
	var cpu0 cpuTimes
	var t0 time.Time
	warm := opts.warmup <= 0
	if warm {
		c0, cpu0, t0 = last, readCPU(), begin
	}
	warmTimer := time.NewTimer(max(opts.warmup, 0))
	defer warmTimer.Stop()
	var endTimer <-chan time.Time
	if warm {
		endTimer = time.After(opts.duration)
	}
	for {
		select {
		case <-ctx.Done():
			return rr, ctx.Err()
		case <-warmTimer.C:
			if !warm {
				warm = true
				c0, cpu0, t0 = t.snapshot(), readCPU(), time.Now()
				endTimer = time.After(opts.duration)
			}
			continue
		case now := <-tick.C:
			c := t.snapshot()
			p.status(now, progressLine(label, spec, now.Sub(begin), warm, first, last, c, now.Sub(lastAt), c0, now.Sub(t0)))
			last, lastAt = c, now
			continue
		case <-endTimer:
		}
		break
	}
	c1, cpu1, t1 := t.snapshot(), readCPU(), time.Now()
	finished = true
	fin, err := t.finish()
	if err != nil {
		return rr, err
	}
	secs := t1.Sub(t0).Seconds()
	d := diff(c1, c0)
	rr = runResult{
		Seconds:       secs,
		ThroughputBps: float64(d.RxBytes) * 8 / secs,
		PPS:           float64(d.Segments) / secs,
		Sent:          d.Sent,
		SendErrors:    d.SendErrors,
		Received:      d.Received,
		RxMessages:    d.RxMessages,
		GoodputBps:    float64(d.RxMsgBytes) * 8 / secs,
		Drops:         d.Drops,
		Retransmits:   d.Retrans,
		Lost:          fin.Lost,
		CPU:           cpuUsage(cpu0, cpu1),
		Extra:         fin.Extra,
	}
	if d.Reads > 0 {
		rr.SegsPerRead = float64(d.Segments) / float64(d.Reads)
	}
	if d.RetPackets > 0 {
		rr.WritesPerPkt = float64(d.RetWrites) / float64(d.RetPackets)
	}
	rr.ReverseBps = float64(d.RxBytesRev) * 8 / secs
	if d.TxCalls > 0 {
		rr.DgramsPerSend = float64(d.TxDgrams) / float64(d.TxCalls)
	}
	if d.RxCalls > 0 {
		rr.DgramsPerRecv = float64(d.RxDgrams) / float64(d.RxCalls)
	}
	if spec.ppsAtB {
		rr.PPS = float64(d.Received) / secs // no userspace dataplane: the receiving NIC's count
	}
	if fin.Bps != nil {
		rr.ThroughputBps = *fin.Bps
	}
	if fin.Retrans != nil {
		rr.Retransmits = *fin.Retrans
	}
	rr.costs(d.GatewayCPU)
	return rr, nil
}

// costs fills in the run's CPU costs from the gateway's CPU time over
// the window (0: no gateway) and the cores' utilisation.
func (r *runResult) costs(gw time.Duration) {
	gbit := r.ThroughputBps / 1e9
	r.GatewayCores = gw.Seconds() / r.Seconds
	var busy float64
	for _, c := range r.CPU {
		busy += c.Busy() / 100
	}
	if gbit > 0 {
		r.GatewayCoresPerGbit, r.BusyCoresPerGbit = r.GatewayCores/gbit, busy/gbit
	}
}

// diff returns b - a, field by field (counters only grow).
func diff(b, a counters) counters {
	sub := func(x, y uint64) uint64 {
		if x < y {
			return 0
		}
		return x - y
	}
	return counters{
		RxBytes: sub(b.RxBytes, a.RxBytes), Received: sub(b.Received, a.Received),
		RxMessages: sub(b.RxMessages, a.RxMessages), RxMsgBytes: sub(b.RxMsgBytes, a.RxMsgBytes),
		Sent: sub(b.Sent, a.Sent), SendErrors: sub(b.SendErrors, a.SendErrors),
		Segments: sub(b.Segments, a.Segments), Reads: sub(b.Reads, a.Reads),
		Drops: sub(b.Drops, a.Drops), Retrans: sub(b.Retrans, a.Retrans),
		RetPackets: sub(b.RetPackets, a.RetPackets), RetWrites: sub(b.RetWrites, a.RetWrites),
		RxBytesRev: sub(b.RxBytesRev, a.RxBytesRev), TxDgrams: sub(b.TxDgrams, a.TxDgrams), TxCalls: sub(b.TxCalls, a.TxCalls),
		RxDgrams: sub(b.RxDgrams, a.RxDgrams), RxCalls: sub(b.RxCalls, a.RxCalls),
		GatewayCPU: max(b.GatewayCPU-a.GatewayCPU, 0),
	}
}

// progressLine is the once-a-second line: the last second's rate, the
// average since the measurement window opened, the drops since the trial
// started and the budget in use.
func progressLine(label string, spec rowSpec, elapsed time.Duration, warm bool, first, prev, cur counters, dt time.Duration, c0 counters, window time.Duration) string {
	d := diff(cur, prev)
	s := dt.Seconds()
	mpps, mbps := float64(d.Segments)/s/1e6, float64(d.RxBytes)*8/s/1e6
	phase, avg := "warm-up", ""
	if warm {
		phase = "measure"
		if w, ws := diff(cur, c0), window.Seconds(); ws > 0.2 {
			if spec.ppsMain {
				avg = fmt.Sprintf(" (avg %.3f)", float64(w.Segments)/ws/1e6)
			} else {
				avg = fmt.Sprintf(" (avg %.0f)", float64(w.RxBytes)*8/ws/1e6)
			}
		}
	}
	rate := fmt.Sprintf("%7.0f Mbit/s%s  %.3f Mpps", mbps, avg, mpps)
	if spec.ppsMain {
		rate = fmt.Sprintf("%.3f Mpps%s  %5.0f Mbit/s", mpps, avg, mbps)
	}
	line := fmt.Sprintf("%s %-7s %3.0fs  %s  drops %d", label, phase, elapsed.Seconds(), rate, diff(cur, first).Drops)
	if d.SendErrors > 0 {
		line += fmt.Sprintf("  send errors %d/s", uint64(float64(d.SendErrors)/s))
	}
	if cur.BudgetLimit > 0 {
		line += fmt.Sprintf("  budget %.2f/%.2f MiB", float64(cur.BudgetInFlight)/(1<<20), float64(cur.BudgetLimit)/(1<<20))
	} else if cur.Segments > 0 || cur.Reads > 0 {
		line += "  budget off"
	}
	return line
}

// describeRun is the -v line for a finished run.
func describeRun(spec rowSpec, r runResult) string {
	s := fmt.Sprintf("%.0f Mbit/s, %.3f Mpps, sent %d, send errors %d, received %d, drops %d",
		r.ThroughputBps/1e6, r.PPS/1e6, r.Sent, r.SendErrors, r.Received, r.Drops)
	if spec.retrans {
		s += fmt.Sprintf(", retransmits %d", r.Retransmits)
	}
	if r.Lost != nil {
		s += fmt.Sprintf(", lost %d", *r.Lost)
	}
	if r.SegsPerRead > 0 {
		s += fmt.Sprintf(", %.1f segments/read", r.SegsPerRead)
	}
	if r.WritesPerPkt > 0 {
		s += fmt.Sprintf(", %.3f TUN writes/packet", r.WritesPerPkt)
	}
	for _, k := range sortedKeys(r.Extra) {
		s += fmt.Sprintf(", %s %.0f", k, r.Extra[k])
	}
	if r.GatewayCores > 0 {
		s += fmt.Sprintf(", gateway %.2f cores", r.GatewayCores)
	}
	for _, c := range r.CPU {
		s += fmt.Sprintf(", %s %.0f%% (usr %.0f sys %.0f si %.0f)", c.CPU, c.Busy(), c.User, c.System, c.SoftIRQ)
	}
	return s
}

func sortedKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// selectRows is the rows whose names are in names (-rows), in their
// order; every row when names is empty.
func selectRows(rows []rowSpec, names []string) []rowSpec {
	if len(names) == 0 {
		return rows
	}
	var out []rowSpec
	for _, r := range rows {
		if contains(names, r.name) {
			out = append(out, r)
		}
	}
	return out
}
