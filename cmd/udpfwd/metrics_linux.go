package main

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gsoplane/gsoplane/dataplane"
	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/icmp"
	"github.com/gsoplane/gsoplane/dataplane/pipeline"
)

// Directions; with -ingress, ingress_to_nic and nic_to_ingress.
const (
	toNIC = "tun_to_nic"
	toTUN = "nic_to_tun"
)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("udpfwd_"+name, help, labels, nil)
}

// The metrics; docs/udpfwd.md (METRICS) says what each one counts.
var (
	descSuperPackets = desc("super_packets_total", "Super-packets read from the TUN (tun_to_nic), or written to it by GRO, of two packets or more (nic_to_tun).", "direction", "port")
	descOut          = desc("super_packets_out_total", "Super-packets toward the NIC (with -ingress: either way) larger than one segment, by how they left: whole (the NIC segments them) or cut (into segments here).", "direction", "how")
	descSegments     = desc("segments_total", "Segments cut and queued for the NIC (tun_to_nic), or valid IP packets received from it (nic_to_tun).", "direction", "port")
	descPackets      = desc("packets_total", "Packets handed to the NIC, a super-packet the NIC segments counting once (tun_to_nic), or writes into the TUN, a super-packet counting once (nic_to_tun).", "direction", "port")
	descBytes        = desc("bytes_total", "IP bytes of the segments queued for the NIC (tun_to_nic) or of the packets received from it (nic_to_tun).", "direction", "port")
	descGROPass      = desc("gro_passthrough_total", "Packets from the NIC that GRO passed through unmerged, by reason.", "reason")
	descNICUp        = desc("nic_up", "1 while the NIC is up with a carrier, 0 while it is down (frames wait, the budget holds the senders back).")
	descNICMTU       = desc("nic_mtu_bytes", "The NIC's MTU.")
	descNICDowns     = desc("nic_down_total", "Times the NIC went down.")
	descNICMTUChange = desc("nic_mtu_changes_total", "Times the NIC's MTU changed (the TUN's MTU follows it).")
	descTUNMTU       = desc("tun_mtu_bytes", "The TUN device's MTU, kept within the MTU the gateway sends.")
	descSendMTU      = desc("send_mtu_bytes", "The MTU the gateway sends on the NIC: the NIC's, or the port's limit if lower (AF_XDP: one 4096-byte UMEM frame less the Ethernet header).")
	descNICMACChange = desc("nic_mac_changes_total", "Times the NIC's MAC address changed (the frames' source and the XDP program follow it).")
	descAttached     = desc("program_attached", "1 while the port's program (XDP, or the ingress program, tcx or cls_bpf, for AF_PACKET) is attached to the NIC.")
	descDetached     = desc("program_detached_total", "Times the port's program was found detached from outside.")
	descReattached   = desc("program_reattached_total", "Times it was attached again (-xdp-detached reattach).")
	descICMP         = desc("icmp_errors_total", "ICMP errors for packets the gateway could not forward (host unreachable, fragmentation needed, packet too big), by outcome: sent into the TUN, rate_limited, silent (a router does not answer that packet, or no router address of its IP version) or failed.", "outcome")
	descGRORefused   = desc("gro_refused_total", "GRO super-packets the TUN refused; their kind of merge is then off and their packets went one by one.")
	descBigTCP       = desc("big_tcp_total", "BIG TCP super-packets (over 64 KiB) received whole from the NIC (AF_PACKET) and cut into TSO super-packets of at most 64 KiB for the TUN.")
	descCompleted    = desc("tx_completed_total", "Packets the NIC reported sent (TX completions), a super-packet the NIC segments counting once.", "port")
	descTxErrors     = desc("tx_errors_total", "Transmit calls that failed.", "port")
	descHostControl  = desc("host_control_packets_total", "Packets the host itself sent into the TUN for its link (router and neighbour solicitations, MLD reports, IGMP): not forwarded, as a router does not forward them, and not drops.")
	descDrops        = desc("drops_total", "Packets dropped, by direction and reason (invalid, oversize, no_frames: super-packets; others: segments or packets).", "direction", "reason")
	descXSKEvents    = desc("xsk_events_total", "AF_XDP socket counters: events from the kernel (XDP_STATISTICS), wakeups and their failures, multi-buffer chains, and frames the XDP program passed to the kernel instead of the socket, by device (nic or ingress) and RX queue.", "device", "queue", "event")
	descWire         = desc("wire_packets_total", "With -ingress, packets from a wire (both directions) by what was done: received, cut (handed on as super-packets, cut here or by the NIC), clamped (SYN MSS lowered), too_big (refused, answered with ICMP), bad_checksum, invalid, spoofed (a source on the other side), ttl_exceeded (arrived with TTL or hop limit 1 or less: dropped, answered with ICMP time exceeded), big_tcp (BIG TCP super-packets over 64 KiB: dropped).", "event")
	descPacketEvents = desc("packet_events_total", "AF_PACKET socket counters: frames dropped or refused, the kernel's receive drops, sends retried, system calls, bytes and offloads, by device (nic or ingress) and socket.", "device", "queue", "event")
	descBudgetUsed   = desc("budget_in_use_bytes", "Truesize bytes charged to the send budget and not yet completed (first TUN queue).")
	descBudgetLimit  = desc("budget_limit_bytes", "Current send budget limit (first TUN queue).")
	descBudgetPeak   = desc("budget_peak_bytes", "Highest budget use seen (first TUN queue).")
	descQueueDepth   = desc("queue_depth_segments", "Segments held by the transmit queue: pending or in flight (first TUN queue).", "state")
	descQueueBytes   = desc("queue_depth_bytes", "Truesize bytes held by the transmit queue: pending or in flight (first TUN queue).", "state")
	descQueuePeak    = desc("queue_high_water_segments", "Most segments the transmit queue held at once (first TUN queue).")
	descQueuePeakB   = desc("queue_high_water_bytes", "Most truesize bytes the transmit queue held at once (first TUN queue).")
	descStalls       = desc("producer_stalls_total", "Times a TUN reader waited: for budget, for queue room or for free TX frames.", "cause")
	descStallTime    = desc("producer_stall_seconds_total", "Time TUN readers spent waiting for budget, queue room or free frames.", "cause")
	descSegsPerSP    = desc("segments_per_super_packet", "Segments each super-packet from the TUN was cut into.")
	descTxLatency    = desc("tx_completion_latency_seconds", "Time from handing a segment to the NIC until its TX completion.")
)

// statsCollector exports a gateway's counters, read once per scrape.
type statsCollector struct {
	stats        func() dataplane.GatewayStats
	port         string // the port label: xdp or packet
	ingress      bool   // -ingress: the inside is a network device
	backpressure bool   // there is a budget to report
}

// Describe sends every metric's description.
func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		descSuperPackets, descOut, descSegments, descPackets, descBytes, descCompleted, descTxErrors,
		descDrops, descHostControl, descXSKEvents, descBudgetUsed, descBudgetLimit, descBudgetPeak, descQueueDepth,
		descQueueBytes, descQueuePeak, descQueuePeakB, descStalls, descStallTime, descSegsPerSP, descTxLatency,
		descGROPass, descGRORefused, descBigTCP, descNICUp, descNICMTU, descNICDowns, descAttached, descDetached, descReattached,
		descNICMTUChange, descTUNMTU, descSendMTU, descNICMACChange, descICMP, descPacketEvents, descWire,
	} {
		ch <- d
	}
}

// Collect takes one snapshot of the gateway's counters and sends them.
func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	e := emitter{ch, c.port}
	if c.ingress {
		e.ingress(s)
	} else {
		e.traffic(s)
		e.drops(s)
	}
	e.sockets("nic", s.Port)
	if c.ingress {
		e.sockets("ingress", s.Ingress)
	}
	e.nic(s.NIC)
	e.icmp(s.Replies)
	if c.backpressure {
		e.budget(s)
	}
	e.queue(s)
	e.histograms(s.Forward)
}

// emitter sends const metrics.
type emitter struct {
	ch   chan<- prometheus.Metric
	port string
}

func (e emitter) counter(d *prometheus.Desc, v uint64, labels ...string) {
	e.ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
}

func (e emitter) gauge(d *prometheus.Desc, v int64, labels ...string) {
	e.ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
}

func (e emitter) traffic(s dataplane.GatewayStats) {
	f, r, port := s.Forward, s.Return, e.port
	e.counter(descSuperPackets, f.SuperPackets, toNIC, port)
	e.counter(descSuperPackets, r.SuperPackets, toTUN, port)
	e.out(f, toNIC)
	e.counter(descSegments, f.Segments, toNIC, port)
	e.counter(descSegments, r.Packets, toTUN, port)
	e.counter(descPackets, s.Port.Sent, toNIC, port)
	e.counter(descPackets, r.Writes, toTUN, port)
	e.counter(descBytes, f.Bytes, toNIC, port)
	e.counter(descBytes, r.Bytes, toTUN, port)
	e.counter(descCompleted, s.Port.Completed, port)
	e.counter(descTxErrors, f.TxErrors, port)
	e.counter(descHostControl, f.HostControl)
	e.gro(r)
}

// out exports how a forwarder's super-packets left: whole or cut.
func (e emitter) out(f pipeline.Stats, dir string) {
	e.counter(descOut, f.Offloaded, dir, "whole")
	e.counter(descOut, f.Cut, dir, "cut")
}

// ingress exports the traffic of a gateway with -ingress: forwarders in
// both directions, from packets received on a wire.
func (e emitter) ingress(s dataplane.GatewayStats) {
	for _, d := range []struct {
		dir  string
		f    pipeline.Stats
		sent uint64 // by the port it leaves through
	}{{"ingress_to_nic", s.Forward, s.Port.Sent}, {"nic_to_ingress", s.Reverse, s.Ingress.Sent}} {
		e.counter(descSuperPackets, d.f.SuperPackets, d.dir, e.port)
		e.out(d.f, d.dir)
		e.counter(descSegments, d.f.Segments, d.dir, e.port)
		e.counter(descPackets, d.sent, d.dir, e.port)
		e.counter(descBytes, d.f.Bytes, d.dir, e.port)
		for _, r := range frame.ForwardDropReasons {
			e.counter(descDrops, d.f.Drops[r], d.dir, r.String())
		}
	}
	e.counter(descCompleted, s.Port.Completed, e.port)
	w := s.Wire
	for _, v := range []struct {
		event string
		n     uint64
	}{
		{"received", w.Packets}, {"cut", w.Cut}, {"clamped", w.Clamped},
		{"too_big", w.TooBig}, {"bad_checksum", w.BadChecksum}, {"invalid", w.Invalid}, {"spoofed", w.Spoofed},
		{"ttl_exceeded", w.TTLExceeded}, {"big_tcp", w.BigTCP},
	} {
		e.counter(descWire, v.n, v.event)
	}
}

// gro exports the return path's coalescing: why packets were not merged,
// and super-packets the TUN refused.
func (e emitter) gro(r pipeline.ReturnStats) {
	g := r.GRO
	for _, p := range []struct {
		reason string
		n      uint64
	}{
		{"unmerged", g.Unmerged}, {"not_tcp_udp", g.NotTCPUDP}, {"bad_checksum", g.BadChecksum},
		{"no_checksum", g.NoChecksum}, {"ip_options", g.IPOptions}, {"fragment", g.Fragment},
		{"flags", g.Flags}, {"no_payload", g.NoPayload}, {"disabled", g.Disabled}, {"malformed", g.Malformed},
	} {
		e.counter(descGROPass, p.n, p.reason)
	}
	e.counter(descGRORefused, r.Refused)
	e.counter(descBigTCP, r.BigTCP)
}

// drops exports both directions' drops in the pipeline's one vocabulary,
// each with only the reasons that can happen in it.
func (e emitter) drops(s dataplane.GatewayStats) {
	for _, r := range frame.ForwardDropReasons {
		e.counter(descDrops, s.Forward.Drops[r], toNIC, r.String())
	}
	for _, r := range frame.ReturnDropReasons {
		e.counter(descDrops, s.Return.Drops[r], toTUN, r.String())
	}
}

// sockets exports the named counters of a port's sockets, AF_XDP or
// AF_PACKET, as events; dev is the device the port is on (nic or
// ingress).
func (e emitter) sockets(dev string, p dataplane.PortStats) {
	events := descPacketEvents
	if p.Kind == dataplane.PortXDP {
		events = descXSKEvents
	}
	for i, s := range p.Sockets {
		q := strconv.Itoa(i)
		for _, c := range s.Counters {
			e.counter(events, c.Value, dev, q, c.Name)
		}
	}
}

// icmp exports the ICMP errors the gateway answered with.
func (e emitter) icmp(r icmp.Stats) {
	e.counter(descICMP, r.Sent, "sent")
	e.counter(descICMP, r.Limited, "rate_limited")
	e.counter(descICMP, r.Silent, "silent")
	e.counter(descICMP, r.Failed, "failed")
}

// nic exports the NIC's state as the gateway last saw it.
func (e emitter) nic(n dataplane.NICStats) {
	e.gauge(descNICUp, b2i(n.Up))
	e.gauge(descNICMTU, int64(n.MTU))
	e.counter(descNICDowns, n.Downs)
	e.counter(descNICMTUChange, n.MTUChanges)
	e.gauge(descTUNMTU, int64(n.TUNMTU))
	e.gauge(descSendMTU, int64(n.SendMTU))
	e.counter(descNICMACChange, n.MACChanges)
	e.gauge(descAttached, b2i(n.Attached))
	e.counter(descDetached, n.Detaches)
	e.counter(descReattached, n.Reattaches)
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func (e emitter) budget(s dataplane.GatewayStats) {
	b := s.Budget
	e.gauge(descBudgetUsed, b.InFlight)
	e.gauge(descBudgetLimit, b.Limit)
	e.gauge(descBudgetPeak, b.Peak)
	e.counter(descStalls, b.Stalls, "budget")
	e.ch <- prometheus.MustNewConstMetric(descStallTime, prometheus.CounterValue, b.StallTime.Seconds(), "budget")
}

func (e emitter) queue(s dataplane.GatewayStats) {
	q := s.Queue
	e.gauge(descQueueDepth, int64(q.Pending), "pending")
	e.gauge(descQueueDepth, int64(q.InFlight), "in_flight")
	e.gauge(descQueueBytes, q.PendingBytes, "pending")
	e.gauge(descQueueBytes, q.InFlightBytes, "in_flight")
	e.gauge(descQueuePeak, int64(q.PeakHeld))
	e.gauge(descQueuePeakB, q.PeakHeldBytes)
	e.counter(descStalls, q.Stalls, "queue")
	e.counter(descStalls, s.Forward.FrameStalls, "frames")
	e.ch <- prometheus.MustNewConstMetric(descStallTime, prometheus.CounterValue, q.StallTime.Seconds(), "queue")
	e.ch <- prometheus.MustNewConstMetric(descStallTime, prometheus.CounterValue, s.Forward.FrameStallTime.Seconds(), "frames")
}

// histograms exports the dataplane's bucket counts as Prometheus
// histograms. The segments' sum is exact: every segment cut is either
// queued (Segments) or refused by the hook.
func (e emitter) histograms(f pipeline.Stats) {
	segBounds := make([]float64, len(pipeline.SegmentBounds))
	for i, b := range pipeline.SegmentBounds {
		segBounds[i] = float64(b)
	}
	cut := f.Segments + f.Drops[frame.DropHook]
	e.ch <- histogram(descSegsPerSP, segBounds, f.SegmentsPerRead[:], float64(cut))

	latBounds := make([]float64, len(pipeline.LatencyBounds))
	for i, b := range pipeline.LatencyBounds {
		latBounds[i] = b.Seconds()
	}
	e.ch <- histogram(descTxLatency, latBounds, f.TxLatency[:], f.TxLatencySum.Seconds())
}

// histogram builds a const histogram from per-bucket counts (the last one
// above every bound).
func histogram(d *prometheus.Desc, bounds []float64, counts []uint64, sum float64) prometheus.Metric {
	buckets := make(map[float64]uint64, len(bounds))
	var total uint64
	for i, b := range bounds {
		total += counts[i]
		buckets[b] = total
	}
	total += counts[len(bounds)]
	return prometheus.MustNewConstHistogram(d, total, sum, buckets)
}
