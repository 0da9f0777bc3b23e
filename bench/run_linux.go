package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"

	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// scenarioDef is one scenario: its rows, how to compare them, and what to
// say under its table.
type scenarioDef struct {
	name   string
	title  func(o options) string
	rows   func(o options) []rowSpec
	ratios func(rows []*rowResult, o options) []ratio
	notes  []string
	// skipped, if set, says which optional row is left out and why.
	skipped func() string
}

var scenarios = map[string]scenarioDef{
	"tunnel-gso": tunnelGSOScenario,
	"wireguard":  wireguardScenario,
	"backpressure": {
		name: "backpressure",
		title: func(o options) string {
			per := fmt.Sprintf("%d × %d B per send (UDP_SEGMENT)", bpSegs, bpSize)
			if segs, why := bpSendSegs(); segs == 1 {
				per = fmt.Sprintf("one %d B datagram per send (%s)", bpSize, why)
			}
			return fmt.Sprintf("backpressure: UDP_STREAM A→B through the gateway, %s, unlimited sender, TX paced at %s bit/s",
				per, formatRate(float64(o.lineRate)))
		},
		rows:   func(o options) []rowSpec { return backpressureRows(o.lineRate) },
		ratios: func(rows []*rowResult, o options) []ratio { return backpressureRatios(rows, o.lineRate) },
		notes: []string{
			fmt.Sprintf("64 × 1400 B cannot be one UDP_SEGMENT send (at most 65507 bytes): %d × %d B = %d B is.", bpSegs, bpSize, bpSegs*bpSize),
			"sent = successful sends (super-packets); send errors = sends refused with ENOBUFS, which the sender waits out and resends:",
			"  the TUN driver orphans packets, so ENOBUFS (noqueue qdisc, full TUN ring) is how backpressure reaches a UDP sender.",
			"received = datagrams at the receiving socket; rx Mbit/s = UDP payload; % line counts IP bytes, as the pacer does;",
			"drops = the gateway's drops in the window; lost = datagrams sent and never received over the whole run, after draining.",
			"Without backpressure the forwarder drops mostly whole super-packets (no free frames), so what arrives is whole sends at",
			"  line rate: with UDP_SEGMENT the cost shows in delivered %, drops, lost and CPU, not in receiver throughput (the seed's",
			"  collapse came from UFO, where one lost IP fragment loses the whole datagram).",
		},
	},
	"gso": {
		name: "gso",
		title: func(o options) string {
			return "gso: one TCP stream A→B — the default gateway (the product: PortAuto) vs the floor (two copies each way) vs kernel only (no userspace) vs the AF_PACKET port in each TX mode vs the AF_XDP port (TUN offloads, or none: the kernel segments)"
		},
		rows:   func(o options) []rowSpec { return gsoRows(o.measure) },
		ratios: func(rows []*rowResult, o options) []ratio { return gsoRatios(rows) },
		notes: []string{
			"Mbit/s = bytes read by the receiving socket; retrans = tcpi_total_retrans of the sender; Mpps = segments the gateway sent;",
			"kernel: A routes B's prefix out of gw-a, super-packets cross the veth unsegmented (its Mpps counts gw-b's skbs).",
			"*-iperf3 (when iperf3 is installed): iperf3 processes in A and B (as a deployment's applications, not the bench's",
			"  threads) through the default gateway, the xdp row's set-up, and the kernel alone; iperf3's own report.",
			"default = the gateway as GatewayConfig's zero value opens it (PortAuto, GRO on): on the veth, which has no AF_XDP",
			"  zero-copy, the AF_PACKET port with the veth segmenting (as packet-offload, with GRO on the return path's ACKs).",
			"floor = the least a userspace path costs here: the gateway's TUN and a packet socket on gw-a with the AF_PACKET port's",
			"  options, one blocking thread each way (TUN read → send of the whole super-packet; receive → TUN write), nothing",
			"  else (floor_linux.go): two copies each way; its Mpps counts super-packets, not the segments they become.",
			"xdp, xdp-no-csum and xdp-no-offload use the AF_XDP port (copy mode on the veth): xdp sends its segments with",
			"  partial checksums the kernel completes (TX metadata, Linux 6.11), xdp-no-csum computes them itself (on older kernels",
			"  both do); packet-* the AF_PACKET port, in each TX mode:",
			"  packet-offload = GSOModeAuto: the veth advertises TSO, so TCP super-packets go to it whole and cross the veth",
			"  unsegmented, as in the kernel row; packet-partial: gsoplane segments, the NIC completes the checksums;",
			"  packet-full: complete segments, as AF_XDP sends. Their Mpps counts every segment, those the NIC would cut included.",
		},
		skipped: iperf3Skipped,
	},
	"gro": {
		name: "gro",
		title: func(o options) string {
			return "gro: one TCP stream B→A (the return path: NIC → TUN) — the AF_PACKET port with the kernel's GRO (the product) vs the floor vs kernel only vs wireguard-go's TUN writer vs the AF_XDP port with GRO on and off, and its forward direction"
		},
		rows:   func(o options) []rowSpec { return groRows() },
		ratios: func(rows []*rowResult, o options) []ratio { return groRatios(rows) },
		notes: []string{
			"Mpps = packets the return path took from the NIC; pkts/write = packets per TUN write (GRO merges), writes/pkt its inverse;",
			"xdp-forward = the same build's A→B stream (GRO on; its Mpps and pkts/write are the ACKs coming back);",
			"floor = the gso scenario's floor with GRO on gw-a, as packet-gro: packet socket receive → TUN write, two copies;",
			"  its Mpps counts the super-packets it wrote.",
			"wireguard-go = its TUN device (CreateTUN with offloads) as the gateway's inside: our return path hands it every",
			"  packet (writes/pkt 1.0 on our side) and its Device.Write coalesces them itself.",
			"packet-gro = the AF_PACKET port with GRO on gw-a: the kernel merges before the port, and the return path writes its",
			"  super-packets into the TUN as they are; its Mpps counts the packets gw-a received (before GRO), pkts/write those per TUN write.",
			"xdp-gro, xdp-no-gro and xdp-forward use the AF_XDP port (which takes frames before the kernel's GRO).",
		},
	},
	"queues": {
		name: "queues",
		title: func(o options) string {
			return "queues: TCP through the gateway with one or two queues (TUN queues = AF_XDP sockets), one or two streams, forward (A→B) and reverse (B→A)"
		},
		rows:   func(o options) []rowSpec { return queuesRows() },
		ratios: func(rows []*rowResult, o options) []ratio { return queuesRatios(rows) },
		notes: []string{
			"Nq = TUN queues (one forwarder each) and AF_XDP sockets (one return path each); Nf = TCP streams.",
			"The streams' flow hashes decide the queues: two streams may share one.",
		},
	},
	"hook": {
		name: "hook",
		title: func(o options) string {
			return fmt.Sprintf("hook: %d-byte UDP payloads, %d flows, sendmmsg ×%d, through the gateway's fast path; B drops them at ingress (tcx eBPF)",
				hookPayload, hookFlows, smallBatch)
		},
		rows:   func(o options) []rowSpec { return hookRows() },
		ratios: func(rows []*rowResult, o options) []ratio { return hookRatios(rows) },
		notes: []string{
			"Mpps = segments the gateway sent per second (Gateway.Stats); Mbit/s = their IP bytes. No pktgen on this kernel:",
			"our own sender, which shares the 2 cores with the gateway, so the rate is the whole system's, not the gateway's alone.",
			"noop = a hook returning true; inspect = parse IPv4/IPv6 and UDP/TCP headers (gVisor views), check a port set.",
			"none, noop, inspect: the AF_XDP port (copy mode on the veth); packet: the AF_PACKET port, no hook.",
			"ns/segment and bound: the hooks timed alone; they bound what a hook can cost when the run-to-run noise hides it.",
			"In the JSON, percentages are fractions (0.0003 = 0.03%).",
		},
	},
	"xdphook": {
		name: "xdphook",
		title: func(o options) string {
			return fmt.Sprintf("xdphook: %d-byte UDP payloads, %d flows, from an AF_XDP generator in C (%d frames per wake-up) through the gateway's AF_XDP ingress port and the hook to gw-a; B drops them at ingress (tcx eBPF)",
				hookPayload, hookFlows, genRing)
		},
		rows:   func(o options) []rowSpec { return xdphookRows() },
		ratios: func(rows []*rowResult, o options) []ratio { return xdphookRatios(rows) },
		notes: []string{
			"Mpps = segments the gateway forwarded per second (Gateway.Stats); sent = frames the kernel took from the generator",
			"  (xsk.Generator: prebuilt frames, a TX ring batch per sendto, no per-packet system call), received = packets at gw-b.",
			"none, noop, inspect: generator on app0 (C) → gw-c (the gateway's AF_XDP ingress port, native XDP) → hook →",
			"  AF_XDP on gw-a → gw-b; noop and inspect are the hook scenario's hooks. packet: both ports AF_PACKET, no hook.",
			"generator = the generator alone, no gateway: an XDP program on gw-c (native) counts its frames and drops them;",
			"  its Mpps is what the generator gets into gw-c on this machine, the ceiling of the other rows.",
			"tun = the hook scenario's no-hook row (sendmmsg from A through the TUN device), measured in this run.",
			"The generator shares the 2 cores with the gateway and the kernel's veth work, so rates are the whole system's.",
			"Where the time goes (perf, none row): two thirds of the bench process is the generator's sendto (copy-mode AF_XDP xmit,",
			"  one skb per frame, and gw-c's veth NAPI and XDP redirect in the same softirq), a sixth the gateway's TX kick on gw-a.",
			"In the JSON, percentages are fractions (0.0003 = 0.03%).",
		},
	},
	"ingress": {
		name: "ingress",
		title: func(o options) string {
			return "ingress: one TCP stream C→B through the gateway's ingress port (C's veth keeps TSO: 64 KiB super-packets), AF_PACKET and AF_XDP, vs the floor vs the kernel forwarding vs the TUN source (A→B)"
		},
		rows:   func(o options) []rowSpec { return ingressRows() },
		ratios: func(rows []*rowResult, o options) []ratio { return ingressRatios(rows) },
		notes: []string{
			"Mbit/s = bytes read by the receiving socket; Mpps = segments the gateway sent (kernel: packets at gw-b);",
			"  segs/read = segments per packet the gateway took from its source (ingress: C's TSO chains cut to gw-a's MTU 1500).",
			"floor = packet socket on gw-c → packet socket on gw-a (and back), whole super-packets, Ethernet addresses rewritten,",
			"  one blocking thread each way, nothing else (floor_linux.go): two copies; its Mpps counts super-packets.",
			"xdp: GatewayConfig.Ingress = gw-c, both AF_XDP ports in generic XDP mode (native XDP on a veth turns the",
			"  peer's TSO off); C's super-packets reach the port whole (multi-buffer) and pipeline.WireSource cuts them.",
			"packet: both ports AF_PACKET; each super-packet leaves gw-a whole with its virtio-net header (gw-a's TSO cuts it);",
			"  packet-cut: the same ports, the gateway cutting every super-packet (afpacket.GSOModePartial): what leaving whole saves.",
			"kernel: no gateway; A forwards (ip_forward), C's super-packets cross to B unsegmented (GRO/GSO forwarding).",
			"tun: the gso scenario's xdp row (TUN offloads, AF_XDP), the stream from A.",
			"Where the time goes (perf, xdp row): ~40% of the bench process is the AF_XDP copy-mode TX kick on gw-a (one skb per",
			"  1500-byte segment, ~44 per super-packet the kernel row sends as one), ~15% the forwarder (WireSource read, cut, copy).",
			"Where the time goes (perf, packet row): half the gateway is sendmmsg on gw-a (the copy into a new skb, and gw-b's receive,",
			"  which the veth runs in the sender's softirq), a quarter recvmmsg on gw-c (the copy out of C's skb, straight into the",
			"  frame sent): two copies per super-packet, as the floor's (TestCopies counts user space's: none), the kernel none.",
		},
	},
	"tunnel": {
		name: "tunnel",
		title: func(o options) string {
			return "tunnel: a VPN's data path between two namespaces over a veth of MTU 1500, one TCP stream each way at once — gsoplane's Tunnel (the product; one peer, and routed among several) vs the floor vs wireguard-go's plumbing (plaintext), examples/vpn vs a wireguard-go device (encrypted), the kernel alone"
		},
		rows:   func(o options) []rowSpec { return tunnelRows() },
		ratios: func(rows []*rowResult, o options) []ratio { return tunnelRatios(rows) },
		notes: []string{
			"Mbit/s = both streams' bytes read by their receivers; A→B and B→A each stream's; retrans = both senders' tcpi_total_retrans;",
			"dgrams/send and dgrams/recv = UDP datagrams per system call, both ends: sendmmsg and recvmmsg for gsoplane's rows,",
			"  Bind.Send and ReceiveFunc calls for wg-plumbing (each one sendmmsg or recvmmsg); a wireguard-go device does not say.",
			"busy cores/Gbit = the whole machine's busy cores (both ends, senders, receivers, the kernel) per Gbit/s moved; gw cores/Gbit",
			"  the two tunnel ends' own (the bench process less its stream threads).",
			"floor = the least a userspace tunnel costs here (floortunnel_linux.go): each end a TUN device as the Tunnel opens it",
			"  (inner MTU 1456) and a connected UDP socket, one blocking thread each way: a super-packet read and sent as its",
			"  segments in one UDP_SEGMENT message (headers beside the payload, by iovecs), a UDP_GRO batch written into the TUN",
			"  as one super-packet; plaintext, no framing, no checksum summed: two copies each way.",
			"tunnel = dataplane/tunnel with every default, configured exactly as docs/embedding.md's recipe (TestTunnelRecipe runs",
			"  the recipe itself as written): recipe/tunnel is 1 by construction. Inner MTU 1456 (16-byte header), wg-plumbing 1472",
			"  (no header), vpn 1440 (header and tag), wg-device 1420 (wg-quick's).",
			"tunnel-peers = the same Tunnel with Config.Peers (the peer and a second one nothing is routed to): one unconnected",
			"  socket, every packet routed by its inner destination, every datagram's source looked up.",
			"wg-plumbing = golang.zx2c4.com/wireguard tun.CreateTUN (offloads: Read splits, Write coalesces) and conn.StdNetBind",
			"  (UDP_SEGMENT, UDP_GRO) wired by a read/send loop and a receive/write loop, no crypto, no header.",
			"wg-device = golang.zx2c4.com/wireguard/device configured with IpcSet (no wg binary): the userspace WireGuard VPN.",
		},
	},
	"peers": {
		name: "peers",
		title: func(o options) string {
			return "peers: the TCP stream of gso with the TUN reader + segmenter swapped, same TX path (AF_XDP, XSKSink, budget, queue)"
		},
		rows:   func(o options) []rowSpec { return peersRows() },
		ratios: func(rows []*rowResult, o options) []ratio { return peersRatios(rows) },
		notes: []string{
			"wireguard-go = golang.zx2c4.com/wireguard/tun CreateTUN with offloads, Device.Read splits; tailscale-split = our TUN",
			"read as is, each super-packet split by github.com/tailscale/wireguard-go tun.GSOSplit. Both hand the forwarder split",
			"packets (segments/read 1.0), which it copies into AF_XDP frames; gsoplane segments straight into the frames.",
		},
	},
}

// execute runs the scenarios of o; it checks privileges and leftovers
// first and removes everything it created on the way out.
func execute(ctx context.Context, o options, stdout, stderr io.Writer) (code int) {
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "bench: needs root: it creates network namespaces, veth and TUN devices, AF_XDP sockets and XDP/BPF programs.")
		fmt.Fprintln(stderr, "Run it as: sudo go run ./bench")
		return exitUsage
	}
	if checkLeftovers(stderr) {
		return exitUsage
	}
	if o.link == "nics" {
		a, b, err := netlab.EnvNICs()
		if err != nil {
			fmt.Fprintf(stderr, "bench: -link nics: %v\n", err)
			return exitUsage
		}
		labNICs = [2]string{a, b}
	}
	defer func() {
		if err := closeAllLabs(); err != nil {
			fmt.Fprintf(stderr, "bench: cleanup: %v\n", err)
			code = max(code, exitFailed)
		}
	}()

	if o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(stderr, "bench: cpu profile: %v\n", err)
			return exitUsage
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	rep := measureAll(ctx, o, stderr)
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "bench: interrupted; the namespaces are being removed, results so far follow")
		code = exitInterrupted
	}
	if err := writeResults(rep, o, stdout); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return max(code, exitFailed)
	}
	if code == exitOK && rep.failed() {
		fmt.Fprintln(stderr, "bench: some runs failed (see above)")
		code = exitFailed
	}
	return code
}

// measureAll runs the scenarios of o, with their progress on stderr, and
// returns their results; it stops early when ctx ends.
func measureAll(ctx context.Context, o options, stderr io.Writer) *report {
	planned := make([][]rowSpec, len(o.scenarios))
	total := 0
	for i, name := range o.scenarios {
		planned[i] = selectRows(scenarios[name].rows(o), o.rows)
		total += len(planned[i]) * o.measure.runs
	}
	p := newProgress(stderr, total, o.measure.warmup+o.measure.duration)
	defer p.close()
	rep := newReport(o)
	for i, name := range o.scenarios {
		def := scenarios[name]
		fmt.Fprintf(p, "== %s\n", def.title(o))
		notes := def.notes
		if def.skipped != nil {
			if why := def.skipped(); why != "" {
				fmt.Fprintf(p, "bench: %s\n", why)
				notes = append(notes[:len(notes):len(notes)], why)
			}
		}
		rows := runRows(ctx, name, planned[i], o.measure, p)
		rep.add(def.name, def.title(o), rows, def.ratios(rows, o), notes)
		if ctx.Err() != nil {
			break
		}
	}
	return rep
}

// writeResults writes the report to stdout, as text or JSON, and to the
// -out and -html files.
func writeResults(rep *report, o options, stdout io.Writer) error {
	if o.json {
		if err := rep.writeJSON(stdout); err != nil {
			return err
		}
	} else {
		rep.writeText(stdout, o.measure.verbose)
	}
	if o.out != "" {
		if err := rep.saveJSON(o.out); err != nil {
			return err
		}
	}
	if o.html != "" {
		return rep.saveHTML(o.html)
	}
	return nil
}

// kernelRelease is the running kernel's release, such as "6.18.44", or ""
// if uname fails.
func kernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// terminalWidth is the width of the terminal w writes to, or 0 when w is
// not a terminal.
func terminalWidth(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}
