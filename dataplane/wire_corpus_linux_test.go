package dataplane

// The wire-input corpus: hand-built malformed and foreign Ethernet frames
// sent one at a time from a raw socket in netns B on gw-b to the gateway's
// NIC, through each NIC port, with GRO on the return path and without.
// Each frame has exactly one fate:
//
//   - refused: the sender's kernel does not put it on the wire;
//   - taken, into the TUN: the port takes it and the return path writes
//     it into the TUN device, where the kernel in A delivers it, or drops
//     it and counts why (with GRO, a packet whose IP header is sound but
//     whose rest the coalescer cannot parse is passed through to the
//     kernel, counted as GRO.Malformed);
//   - taken, dropped: the port takes it and the return path drops it,
//     counted (Return.Drops[DropInvalid], or DropSpoofed for a source
//     address behind the TUN);
//   - passed to the kernel: the port leaves it to the kernel in A, which
//     handles it (delivers it locally, answers it) or drops it; the XDP
//     program counts why when the frame was for a redirect prefix.
//
// The test watches everything that could move: the gateway's counters
// (return path, GRO, the port's sockets and program), what the TUN device
// receives (a packet socket on it), what A's kernel sees on gw-a (a
// packet socket on gw-a: after XDP, before tcx), the datagrams UDP
// listeners in A get, A's IP/UDP/TCP/ICMP error counters and neighbour
// entries. After each frame every one of them must have moved exactly as
// its fate says and nothing else, so that every frame is accounted for
// in one fate; the totals are checked again at the end.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/tun"
	"github.com/gsoplane/gsoplane/dataplane/xsk"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

const (
	wirePort    = 7777                  // the UDP listeners' port in A
	wireTCPPort = 7778                  // a TCP port nothing listens on in A
	wireSport   = 40000                 // the source port of every frame
	wireWait    = 2 * time.Second       // for a frame's fate to show
	wireSettle  = 15 * time.Millisecond // then for anything else it does
)

var (
	// wireOther is another host's unicast MAC address on gw-a's link.
	wireOther = net.HardwareAddr{0x02, 0x00, 0x5e, 0x00, 0x53, 0x99}
	wireBcast = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	// wireBehind4 is in the redirect prefix but not an address of A's:
	// A's kernel would route it into the TUN if it forwarded.
	wireBehind4 = netip.MustParseAddr("198.18.0.7")
	// wireNowhere4 is in the lab's range, outside every prefix and route.
	wireNowhere4 = netip.MustParseAddr("198.18.200.9")
)

// wireKernelCounters are the counters of A's kernel the test holds to
// account: errors, deliveries and reassembly, which nothing but the
// corpus moves ("Ip.X" from snmp, "IpExt.X" from netstat, snmp6 names).
var wireKernelCounters = []string{
	"Ip.InHdrErrors", "Ip.InAddrErrors", "Ip.InUnknownProtos", "Ip.InDiscards",
	"Ip.ReasmReqds", "Ip.ReasmOKs", "Ip.ReasmFails",
	"IpExt.InNoRoutes", "IpExt.InTruncatedPkts", "IpExt.InCsumErrors",
	"Icmp.InEchos",
	"Udp.InDatagrams", "Udp.NoPorts", "Udp.InErrors", "Udp.InCsumErrors",
	"Tcp.InErrs", "Tcp.InCsumErrors",
	"Ip6InHdrErrors", "Ip6InAddrErrors", "Ip6InUnknownProtos", "Ip6InTruncatedPkts",
	"Ip6InDiscards", "Ip6InNoRoutes", "Ip6ReasmReqds", "Ip6ReasmOKs", "Ip6ReasmFails",
	"Icmp6InEchos",
	"Udp6InDatagrams", "Udp6NoPorts", "Udp6InErrors", "Udp6InCsumErrors",
}

// TestWireCorpus sends the corpus through each NIC port, with GRO on the
// return path and without; and frames longer than one UMEM frame, through
// a 9000-byte link, to each port (AF_XDP with its program in generic
// mode).
func TestWireCorpus(t *testing.T) {
	netlab.RequireRoot(t)
	var setups []wireSetup
	for _, port := range []PortKind{PortXDP, PortPacket} {
		for _, gro := range []bool{false, true} {
			setups = append(setups, wireSetup{
				name: fmt.Sprintf("%v/gro=%v", port, gro), cases: wireCases,
				cfg: GatewayConfig{Port: port, DisableGRO: !gro},
			})
		}
	}
	setups = append(setups,
		wireSetup{name: "xdp-generic/jumbo", cases: wireJumboCases, mtu: 9000,
			cfg: GatewayConfig{Port: PortXDP, XDP: XDPOptions{Mode: xsk.ModeGeneric}}},
		wireSetup{name: "packet/jumbo", cases: wireJumboCases, mtu: 9000,
			cfg: GatewayConfig{Port: PortPacket}})
	for _, s := range setups {
		t.Run(s.name, func(t *testing.T) { wireCorpus(t, s) })
	}
}

// wireSetup is a gateway and the frames sent to it.
type wireSetup struct {
	name  string
	cfg   GatewayConfig // its port and GRO
	mtu   int           // of gw-a and gw-b, if not 0
	cases []wireCase
}

func wireCorpus(t *testing.T, s wireSetup) {
	w := newWireRun(t, s.cfg, s.mtu)
	port, gro := s.cfg.Port, !s.cfg.DisableGRO
	tally := map[string]int{}
	var rows []string
	start := w.counters()
	for _, c := range s.cases {
		got, want := w.run(c)
		bad := w.compare(got, want)
		rows = append(rows, fmt.Sprintf("%-50s %s", c.name, got.label()))
		if bad != "" {
			t.Errorf("%s:\n\twant %s\n\tgot  %s\n\t%s", c.name, want.label(), got.label(), bad)
		}
		tally[got.fate()]++
	}
	t.Logf("%v, GRO %v (TUN takes USO: %v): frame → fate\n%s", port, gro, w.uso, strings.Join(rows, "\n"))

	// The totals: every frame in one fate, and the gateway's own
	// counters, taken over the whole run, say the same.
	end := w.counters()
	d := func(k string) int { return int(end[k] - start[k]) }
	total := 0
	for _, n := range tally {
		total += n
	}
	t.Logf("fates: %v", tally)
	if total != len(s.cases) {
		t.Errorf("%d frames in fates, %d sent", total, len(s.cases))
	}
	taken := tally[fateTUN] + tally[fateDropped]
	if got := d("return.packets") + d("return.drop.invalid") + d("return.drop.spoofed"); got != taken {
		t.Errorf("the return path counted %d packets, %d invalid and %d spoofed, %d frames were taken", d("return.packets"), d("return.drop.invalid"), d("return.drop.spoofed"), taken)
	}
	if got := d("port.rx"); got != taken {
		t.Errorf("the port received %d frames, %d were taken", got, taken)
	}
	if got := d("return.writes"); got != tally[fateTUN] || w.tunTotal != tally[fateTUN] {
		t.Errorf("%d TUN writes, the TUN got %d packets, %d frames went into it", got, w.tunTotal, tally[fateTUN])
	}
	if port == PortXDP && w.nicTotal != tally[fateKernel] {
		t.Errorf("A's kernel saw %d frames on %s, %d were passed to it", w.nicTotal, netlab.NICA, tally[fateKernel])
	}
	select {
	case err := <-w.lab.done:
		t.Fatalf("the gateway stopped: %v", err)
	default:
	}
}

// The fates.
const (
	fateRefused = "refused by the sender's kernel"
	fateTUN     = "taken, into the TUN"
	fateDropped = "taken, dropped"
	fateKernel  = "passed to the kernel"
)

// wireCase is one frame of the corpus and its fate.
type wireCase struct {
	name  string
	build func(w *wireRun) wireFrame
	want  func(w *wireRun, f wireFrame) *wireFate
	setup func(w *wireRun) // before the frame is sent
}

// wireFrame is a frame and the IP packet in it.
type wireFrame struct {
	frame, ip []byte
}

// wireFate is what a frame does, or did: the counters that move (any
// other stays), the packets the TUN gets, the datagrams the listeners
// get.
type wireFate struct {
	err   error
	ctr   map[string]uint64
	tun   [][]byte
	recv  map[string][][]byte
	conds map[string]func() bool // conditions that hold after the frame (neighbour entries)
}

func newFate() *wireFate {
	return &wireFate{ctr: map[string]uint64{}, recv: map[string][][]byte{}, conds: map[string]func() bool{}}
}

// fate names the fate.
func (f *wireFate) fate() string {
	switch {
	case f.err != nil:
		return fateRefused
	case f.ctr["return.drop.invalid"] > 0, f.ctr["return.drop.spoofed"] > 0:
		return fateDropped
	case len(f.tun) > 0:
		return fateTUN
	}
	return fateKernel
}

// label sums the fate up: its name, the counters that move and what the
// listeners get.
func (f *wireFate) label() string {
	if f.err != nil {
		return fateRefused + " (" + f.err.Error() + ")"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(f.ctr)) {
		switch {
		case f.ctr[k] == 0, k == "port.rx", k == "packet.KernelPackets", k == "return.writes",
			k == "gro.Packets", k == "tun", k == "nic.tap", strings.HasPrefix(k, "recv."):
			continue // implied by the fate and by what follows
		case f.ctr[k] == 1:
			parts = append(parts, k)
		default:
			parts = append(parts, fmt.Sprintf("%s=%d", k, f.ctr[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(f.recv)) {
		for _, d := range f.recv[k] {
			parts = append(parts, fmt.Sprintf("%s got %dB", k, len(d)))
		}
	}
	s := f.fate()
	if len(f.tun) > 0 {
		s += fmt.Sprintf(" (%dB)", len(f.tun[0]))
	}
	if f.fate() != fateTUN && f.ctr["nic.tap"] == 0 {
		s += " [not seen on " + netlab.NICA + "]"
	}
	if len(parts) > 0 {
		s += ": " + strings.Join(parts, ", ")
	}
	return s
}

// k adds kernel counters that move by one.
func (f *wireFate) k(names ...string) *wireFate {
	for _, n := range names {
		f.ctr[n]++
	}
	return f
}

// to adds a datagram a listener gets.
func (f *wireFate) to(listener string, payload []byte) *wireFate {
	f.recv[listener] = append(f.recv[listener], payload)
	f.ctr["recv."+listener]++
	return f
}

// cond adds a condition that holds after the frame (the case's setup
// makes it false before).
func (f *wireFate) cond(name string, fn func() bool) *wireFate {
	f.conds[name] = fn
	f.ctr["cond."+name] = 1
	return f
}

// wireRun is one gateway and what watches it.
type wireRun struct {
	t          *testing.T
	lab        *gwLab
	port       PortKind
	gro, uso   bool // uso: the TUN device takes USO, so GRO merges UDP
	macA, macB net.HardwareAddr
	ifA, ifB   int // gw-a's index in A, gw-b's in B
	tx         int // the raw socket in B
	tunCap     *wireCapture
	nicCap     *wireCapture
	lns        map[string]*wireListener
	id         uint16 // IPv4 ID and fragment ID of the next packet
	frag4      [2]wireFrame
	frag6      [2]wireFrame
	tunTotal   int // packets the TUN got over the run
	nicTotal   int // corpus frames A's kernel saw on gw-a over the run
}

func newWireRun(t *testing.T, cfg GatewayConfig, mtu int) *wireRun {
	lab := newGwLab(t, cfg)
	if lab.g.Port() != cfg.Port {
		t.Fatalf("the gateway opened port %v, want %v", lab.g.Port(), cfg.Port)
	}
	w := &wireRun{t: t, lab: lab, port: cfg.Port, gro: !cfg.DisableGRO, id: 0x5100, lns: map[string]*wireListener{}}
	w.uso = lab.g.TUN().Offloads().Has(tun.OffloadUSO4 | tun.OffloadUSO6)
	a, b := lab.A.LinkT(t, netlab.NICA), lab.B.LinkT(t, netlab.NICB)
	w.macA, w.macB, w.ifA, w.ifB = a.Attrs().HardwareAddr, b.Attrs().HardwareAddr, a.Attrs().Index, b.Attrs().Index
	if mtu != 0 {
		netlab.Must(t, lab.A.Netlink().LinkSetMTU(a, mtu))
		netlab.Must(t, lab.B.Netlink().LinkSetMTU(b, mtu))
		for deadline := time.Now().Add(wireWait); lab.g.Stats().NIC.MTU != mtu; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the gateway did not follow %s to MTU %d", netlab.NICA, mtu)
			}
		}
	}
	// No reverse-path filter in A (the host's default is inherited; the
	// frames come from B's server addresses, which A routes into the
	// TUN), and B accepts the ARP reply to the corpus's request as a
	// neighbour entry.
	for _, k := range []string{"all", "default", netlab.NICA, labTUN} {
		netlab.Must(t, lab.A.Sysctl("net/ipv4/conf/"+k+"/rp_filter", "0"))
	}
	netlab.Must(t, lab.B.Sysctl("net/ipv4/conf/"+netlab.NICB+"/arp_accept", "1"))

	w.tx = lab.B.SocketT(t, unix.AF_PACKET, unix.SOCK_RAW)
	w.tunCap = openWireCapture(t, lab.A, labTUN)
	w.nicCap = openWireCapture(t, lab.A, netlab.NICA)
	for name, addr := range map[string]netip.Addr{"app4": netlab.App4, "app6": netlab.App6, "nic4": netlab.NICA4, "nic6": netlab.NICA6} {
		w.lns[name] = openWireListener(t, lab.A, netip.AddrPortFrom(addr, wirePort))
	}
	return w
}

// run sends one frame and returns what it did and what it should have.
func (w *wireRun) run(c wireCase) (got, want *wireFate) {
	f := c.build(w)
	want = c.want(w, f)
	if c.setup != nil {
		c.setup(w)
	}
	w.tunCap.drain()
	w.nicCap.drain()
	for _, l := range w.lns {
		l.take()
	}
	before := w.counters()
	got = newFate()
	got.err = w.send(f.frame)
	nicForm := wireNICForm(f.frame)
	collect := func() {
		got.tun = append(got.tun, w.tunCap.drain()...)
		for _, p := range w.nicCap.drain() {
			if bytes.Equal(p, nicForm) {
				got.ctr["nic.tap"]++
			}
		}
		for name, l := range w.lns {
			if d := l.take(); len(d) > 0 {
				got.recv[name] = append(got.recv[name], d...)
				got.ctr["recv."+name] += uint64(len(d))
			}
		}
	}
	delta := func() {
		now := w.counters()
		for k, v := range now {
			if d := v - before[k]; d != 0 {
				got.ctr[k] = d
			} else {
				delete(got.ctr, k)
			}
		}
		got.ctr["tun"] = uint64(len(got.tun))
		if got.ctr["tun"] == 0 {
			delete(got.ctr, "tun")
		}
		for name, fn := range want.conds { // they hold or not, after
			if fn() {
				got.ctr["cond."+name] = 1
			}
		}
	}
	for deadline := time.Now().Add(wireWait); ; time.Sleep(time.Millisecond) {
		collect()
		delta()
		if want.reachedBy(got) || time.Now().After(deadline) {
			break
		}
	}
	time.Sleep(wireSettle)
	collect()
	delta()
	w.tunTotal += len(got.tun)
	w.nicTotal += int(got.ctr["nic.tap"])
	return got, want
}

// reachedBy reports whether got shows everything f expects (it may show
// more: compare says).
func (f *wireFate) reachedBy(got *wireFate) bool {
	if f.err != nil || got.err != nil {
		return true
	}
	for k, v := range f.ctr {
		if got.ctr[k] < v {
			return false
		}
	}
	return true
}

// compare returns what differs between got and want, or "".
func (w *wireRun) compare(got, want *wireFate) string {
	var diffs []string
	if !errors.Is(got.err, want.err) && (got.err != nil || want.err != nil) {
		diffs = append(diffs, fmt.Sprintf("sendto: %v, want %v", got.err, want.err))
	}
	keys := maps.Clone(got.ctr)
	maps.Copy(keys, want.ctr)
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if got.ctr[k] != want.ctr[k] {
			diffs = append(diffs, fmt.Sprintf("%s moved by %d, want %d", k, got.ctr[k], want.ctr[k]))
		}
	}
	if len(got.tun) == len(want.tun) {
		for i := range got.tun {
			if !bytes.Equal(got.tun[i], want.tun[i]) {
				diffs = append(diffs, fmt.Sprintf("the TUN got\n\t\t%x\n\t\twant\n\t\t%x", got.tun[i], want.tun[i]))
			}
		}
	}
	for name, want := range want.recv {
		got := got.recv[name]
		for i := range min(len(got), len(want)) {
			if !bytes.Equal(got[i], want[i]) {
				diffs = append(diffs, fmt.Sprintf("listener %s got %q, want %q", name, got[i], want[i]))
			}
		}
	}
	return strings.Join(diffs, "\n\t")
}

// send sends a frame from gw-b.
func (w *wireRun) send(frame []byte) error {
	sa := &unix.SockaddrLinklayer{Ifindex: w.ifB, Halen: 6}
	copy(sa.Addr[:], frame[:min(len(frame), 6)])
	return unix.Sendto(w.tx, frame, 0, sa)
}

// counters returns the gateway's counters and A's kernel counters.
func (w *wireRun) counters() map[string]uint64 {
	st := w.lab.g.Stats()
	r := st.Return
	m := map[string]uint64{
		"return.packets": r.Packets, "return.writes": r.Writes,
		"return.supers": r.SuperPackets, "return.refused": r.Refused,
	}
	for i := range frame.NumDropReasons {
		m["return.drop."+i.String()] = r.Drops[i]
	}
	g := r.GRO
	for name, v := range map[string]uint64{
		"Packets": g.Packets, "SuperPackets": g.SuperPackets, "Merged": g.Merged, "Unmerged": g.Unmerged,
		"Flushes": g.Flushes, "NotTCPUDP": g.NotTCPUDP, "BadChecksum": g.BadChecksum, "NoChecksum": g.NoChecksum,
		"IPOptions": g.IPOptions, "Fragment": g.Fragment, "Flags": g.Flags, "NoPayload": g.NoPayload,
		"Disabled": g.Disabled, "Malformed": g.Malformed,
	} {
		m["gro."+name] = v
	}
	for _, x := range st.Port.Sockets {
		m["port.rx"] += x.RX
		if st.Port.Kind == PortPacket {
			m["packet.KernelPackets"] += x.Counter("kernel_packets")
			m["packet.Invalid"] += x.Counter("rx_invalid")
			m["packet.Truncated"] += x.Counter("rx_truncated")
			m["packet.Header"] += x.Counter("rx_header")
			m["packet.Kernel"] += x.Counter("rx_kernel_drop")
			continue
		}
		m["xsk.RXDropped"] += x.Counter("rx_dropped")
		m["xsk.RXInvalid"] += x.Counter("rx_invalid")
		m["xdp.Oversize"] += x.Counter("pass_oversize")
		m["xdp.OtherHost"] += x.Counter("pass_other_host")
		m["xdp.NotUnicast"] += x.Counter("pass_not_unicast")
		m["xdp.VersionMismatch"] += x.Counter("pass_version_mismatch")
	}
	kc, err := wireKernel(w.lab.A)
	netlab.Must(w.t, err)
	for _, k := range wireKernelCounters {
		m[k] = kc[k]
	}
	return m
}

// The fates, as a function of the port and GRO.

// intoTUN: the port takes the frame and the return path writes ip into
// the TUN; with GRO the coalescer passes it through for the reason why
// ("Unmerged": it could merge, but had no partner).
func (w *wireRun) intoTUN(ip []byte, why string) *wireFate {
	f := w.taken()
	f.ctr["return.packets"], f.ctr["return.writes"], f.ctr["tun"] = 1, 1, 1
	f.tun = [][]byte{ip}
	if w.gro {
		f.ctr["gro.Packets"], f.ctr["gro."+why] = 1, 1
	}
	return f
}

// dropped: the port takes the frame and the return path drops it as
// invalid.
func (w *wireRun) dropped() *wireFate {
	f := w.taken()
	f.ctr["return.drop.invalid"] = 1
	return f
}

// spoofed: the port takes the frame and the return path drops it, its
// source being behind the TUN.
func (w *wireRun) spoofed() *wireFate {
	f := w.taken()
	f.ctr["return.drop.spoofed"] = 1
	return f
}

// taken: what every frame the port takes moves.
func (w *wireRun) taken() *wireFate {
	f := newFate()
	f.ctr["port.rx"] = 1
	if w.port == PortPacket {
		f.ctr["packet.KernelPackets"] = 1
		f.ctr["nic.tap"] = 1 // packet taps run before tcx ingress, which drops it
	}
	return f
}

// kernel: the port leaves the frame to A's kernel; the XDP program counts
// reason, if any.
func (w *wireRun) kernel(reason string) *wireFate {
	f := newFate()
	f.ctr["nic.tap"] = 1
	if w.port == PortXDP && reason != "" {
		f.ctr["xdp."+reason] = 1
	}
	return f
}

// udpWhy is why GRO passes a UDP packet through: why, unless UDP merging
// is off (the TUN device took no USO), which the coalescer checks first.
func (w *wireRun) udpWhy(why string) string {
	if !w.uso {
		return "Disabled"
	}
	return why
}

// byGRO picks the fate by GRO.
func (w *wireRun) byGRO(off, on func() *wireFate) *wireFate {
	if w.gro {
		return on()
	}
	return off()
}

// byPort picks the fate by port.
func (w *wireRun) byPort(xdp, packet func() *wireFate) *wireFate {
	if w.port == PortXDP {
		return xdp()
	}
	return packet()
}

// The corpus. Source: the server (Srv4/Srv6, on gw-b); destination the
// application (App4/App6, A's addresses on the TUN) unless said.
var wireCases = []wireCase{
	{
		name:  "IPv4 UDP for the app",
		build: func(w *wireRun) wireFrame { return w.eth4(w.udp4(netlab.App4, wirePayload("udp4", 32))) },
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.intoTUN(f.ip, w.udpWhy("Unmerged")).k("Udp.InDatagrams").to("app4", wirePayload("udp4", 32))
		},
	},
	{
		name:  "IPv6 UDP for the app",
		build: func(w *wireRun) wireFrame { return w.eth6(w.udp6(netlab.App6, wirePayload("udp6", 32))) },
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.intoTUN(f.ip, w.udpWhy("Unmerged")).k("Udp6InDatagrams").to("app6", wirePayload("udp6", 32))
		},
	},
	{
		name: "IPv4 TCP ACK with data (no socket: RST)",
		build: func(w *wireRun) wireFrame {
			return w.eth4(w.tcp4(netlab.App4, header.TCPFlagAck, wirePayload("tcp4", 100)))
		},
		want: func(w *wireRun, f wireFrame) *wireFate { return w.intoTUN(f.ip, "Unmerged") },
	},
	{
		name: "IPv6 TCP ACK with data (no socket: RST)",
		build: func(w *wireRun) wireFrame {
			return w.eth6(w.tcp6(netlab.App6, header.TCPFlagAck, wirePayload("tcp6", 100)))
		},
		want: func(w *wireRun, f wireFrame) *wireFate { return w.intoTUN(f.ip, "Unmerged") },
	},
	{
		name:  "IPv4 UDP, zero-length payload",
		build: func(w *wireRun) wireFrame { return w.eth4(w.udp4(netlab.App4, nil)) },
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.intoTUN(f.ip, w.udpWhy("NoPayload")).k("Udp.InDatagrams").to("app4", []byte{})
		},
	},
	{
		name:  "IPv6 TCP pure ACK, zero-length payload",
		build: func(w *wireRun) wireFrame { return w.eth6(w.tcp6(netlab.App6, header.TCPFlagAck, nil)) },
		want:  func(w *wireRun, f wireFrame) *wireFate { return w.intoTUN(f.ip, "NoPayload") },
	},
	{
		name: "IPv4 TCP SYN",
		build: func(w *wireRun) wireFrame {
			return w.eth4(w.tcp4(netlab.App4, header.TCPFlagSyn, nil))
		},
		want: func(w *wireRun, f wireFrame) *wireFate { return w.intoTUN(f.ip, "Flags") },
	},
	{
		name: "truncated Ethernet header (10 bytes)",
		build: func(w *wireRun) wireFrame {
			return wireFrame{frame: w.eth4(w.udp4(netlab.App4, nil)).frame[:10]}
		},
		want: func(w *wireRun, f wireFrame) *wireFate { f2 := newFate(); f2.err = unix.EINVAL; return f2 },
	},
	{
		name:  "Ethernet header only, IPv4 EtherType",
		build: func(w *wireRun) wireFrame { return w.eth(w.macA, header.IPv4ProtocolNumber, nil) },
		want:  func(w *wireRun, f wireFrame) *wireFate { return w.kernel("").k("Ip.InHdrErrors") },
	},
	{
		name: "IPv4 header cut short by the frame (10 of 20 bytes)",
		build: func(w *wireRun) wireFrame {
			return w.eth(w.macA, header.IPv4ProtocolNumber, w.udp4(netlab.App4, wirePayload("cut", 8))[:10])
		},
		want: func(w *wireRun, f wireFrame) *wireFate { return w.kernel("").k("Ip.InHdrErrors") },
	},
	{
		name: "IPv4 EtherType, IP version 6",
		build: func(w *wireRun) wireFrame {
			ip := w.udp4(netlab.App4, wirePayload("v4v6", 32))
			ip[0] = 0x65
			return w.eth(w.macA, header.IPv4ProtocolNumber, ip)
		},
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.byPort(
				func() *wireFate { return w.kernel("VersionMismatch").k("Ip.InHdrErrors") },
				func() *wireFate { return w.dropped().k("packet.Invalid") })
		},
	},
	{
		name: "IPv6 EtherType, IP version 4",
		build: func(w *wireRun) wireFrame {
			ip := w.udp6(netlab.App6, wirePayload("v6v4", 32))
			ip[0] = 0x40 | ip[0]&0x0f
			return w.eth(w.macA, header.IPv6ProtocolNumber, ip)
		},
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.byPort(
				func() *wireFate { return w.kernel("VersionMismatch").k("Ip6InHdrErrors") },
				func() *wireFate { return w.dropped().k("packet.Invalid") })
		},
	},
	{
		name: "IPv4 IHL 4 (< 5)",
		build: func(w *wireRun) wireFrame {
			ip := w.udp4(netlab.App4, wirePayload("ihl", 32))
			ip[0] = 0x44
			wireRefresh4(ip)
			return w.eth4(ip)
		},
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.dropped()
		},
	},
	{
		name: "IPv4 total length beyond the frame",
		build: func(w *wireRun) wireFrame {
			ip := w.udp4(netlab.App4, wirePayload("long", 32))
			header.IPv4(ip).SetTotalLength(uint16(len(ip) + 64))
			wireRefresh4(ip)
			return w.eth4(ip)
		},
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.dropped()
		},
	},
	{
		name: "IPv4 total length 12, shorter than the header",
		build: func(w *wireRun) wireFrame {
			ip := w.udp4(netlab.App4, wirePayload("short", 32))
			header.IPv4(ip).SetTotalLength(12)
			wireRefresh4(ip)
			return w.eth4(ip)
		},
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.dropped()
		},
	},
	{
		name: "IPv4 total length 20: UDP without its header",
		build: func(w *wireRun) wireFrame {
			ip := w.udp4(netlab.App4, wirePayload("hdronly", 32))
			header.IPv4(ip).SetTotalLength(20)
			wireRefresh4(ip)
			return w.eth4(ip)
		},
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.intoTUN(f.ip[:20], w.udpWhy("Malformed")).k("Udp.InErrors")
		},
	},
	{
		name: "IPv4 UDP padded to 60 bytes with garbage",
		build: func(w *wireRun) wireFrame {
			f := w.eth4(w.udp4(netlab.App4, []byte("pad!")))
			f.frame = append(f.frame, bytes.Repeat([]byte{0xee}, 60-len(f.frame))...)
			return f
		},
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.intoTUN(f.ip, w.udpWhy("Unmerged")).k("Udp.InDatagrams").to("app4", []byte("pad!"))
		},
	},
	{
		name: "IPv6 UDP with 16 bytes of garbage after it",
		build: func(w *wireRun) wireFrame {
			f := w.eth6(w.udp6(netlab.App6, []byte("trailing")))
			f.frame = append(f.frame, bytes.Repeat([]byte{0xee}, 16)...)
			return f
		},
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.intoTUN(f.ip, w.udpWhy("Unmerged")).k("Udp6InDatagrams").to("app6", []byte("trailing"))
		},
	},
	{
		name:  "IPv4 first fragment (MF, offset 0)",
		build: func(w *wireRun) wireFrame { return w.fragments4()[0] },
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.intoTUN(f.ip, "Fragment").k("Ip.ReasmReqds")
		},
	},
	{
		name:  "IPv4 last fragment (offset 32): reassembled",
		build: func(w *wireRun) wireFrame { return w.fragments4()[1] },
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.intoTUN(f.ip, "Fragment").k("Ip.ReasmReqds", "Ip.ReasmOKs", "Udp.InDatagrams").to("app4", wirePayload("frag4", 48))
		},
	},
	{
		name:  "IPv6 first fragment (M, offset 0)",
		build: func(w *wireRun) wireFrame { return w.fragments6()[0] },
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.intoTUN(f.ip, "Fragment").k("Ip6ReasmReqds")
		},
	},
	{
		name:  "IPv6 last fragment (offset 32): reassembled",
		build: func(w *wireRun) wireFrame { return w.fragments6()[1] },
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.intoTUN(f.ip, "Fragment").k("Ip6ReasmReqds", "Ip6ReasmOKs", "Udp6InDatagrams").to("app6", wirePayload("frag6", 48))
		},
	},
	{
		name: "IPv6 Destination Options, then UDP",
		build: func(w *wireRun) wireFrame {
			return w.eth6(w.ip6(netlab.App6, wireDestOpts, wireOptions, w.udpSeg(wireSrc6, netlab.App6, wirePayload("dopt", 32))))
		},
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.intoTUN(f.ip, w.udpWhy("Unmerged")).k("Udp6InDatagrams").to("app6", wirePayload("dopt", 32))
		},
	},
	{
		name: "IPv6 Hop-by-Hop Options, then UDP",
		build: func(w *wireRun) wireFrame {
			return w.eth6(w.ip6(netlab.App6, wireHopByHop, wireOptions, w.udpSeg(wireSrc6, netlab.App6, wirePayload("hbh", 32))))
		},
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.intoTUN(f.ip, w.udpWhy("Unmerged")).k("Udp6InDatagrams").to("app6", wirePayload("hbh", 32))
		},
	},
	{
		name: "IPv6 Hop-by-Hop after Destination Options",
		build: func(w *wireRun) wireFrame {
			ext := slices.Concat(wireOptions, wireOptions)
			ext[0] = wireHopByHop // Destination Options, then Hop-by-Hop
			return w.eth6(w.ip6(netlab.App6, wireDestOpts, ext, w.udpSeg(wireSrc6, netlab.App6, wirePayload("hbh2", 32))))
		},
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.byGRO(w.dropped, func() *wireFate { return w.intoTUN(f.ip, "IPOptions").k("Ip6InUnknownProtos") })
		},
	},
	{
		name: "IPv6 extension header running past the packet",
		build: func(w *wireRun) wireFrame {
			ext := slices.Clone(wireOptions)
			ext[1] = 4 // 40 bytes; 8 are there
			return w.eth6(w.ip6(netlab.App6, wireDestOpts, ext, nil))
		},
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.byGRO(w.dropped, func() *wireFate { return w.intoTUN(f.ip, "Malformed").k("Ip6InHdrErrors") })
		},
	},
	{
		name: "IPv4 TCP data offset 4 (< 5)",
		build: func(w *wireRun) wireFrame {
			ip := w.tcp4(netlab.App4, header.TCPFlagAck, wirePayload("doff4", 16))
			ip[header.IPv4MinimumSize+12] = 4 << 4
			return w.eth4(ip)
		},
		want: func(w *wireRun, f wireFrame) *wireFate { return w.intoTUN(f.ip, "Malformed").k("Tcp.InErrs") },
	},
	{
		name: "IPv6 TCP data offset 15, beyond the packet",
		build: func(w *wireRun) wireFrame {
			ip := w.tcp6(netlab.App6, header.TCPFlagAck, wirePayload("doff15", 4))
			ip[header.IPv6MinimumSize+12] = 15 << 4
			return w.eth6(ip)
		},
		// tcp_v6_rcv drops it (pskb_may_pull of doff*4) without a counter.
		want: func(w *wireRun, f wireFrame) *wireFate { return w.intoTUN(f.ip, "Malformed") },
	},
	{
		name: "IPv4 UDP length beyond the IP payload",
		build: func(w *wireRun) wireFrame {
			ip := w.udp4(netlab.App4, wirePayload("ulong", 32))
			header.UDP(ip[header.IPv4MinimumSize:]).SetLength(8 + 32 + 10)
			return w.eth4(ip)
		},
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.intoTUN(f.ip, w.udpWhy("Malformed")).k("Udp.InErrors")
		},
	},
	{
		name: "IPv4 UDP length short of the IP payload (checksum over it)",
		build: func(w *wireRun) wireFrame {
			pl := wirePayload("ushort", 32)
			seg := w.udpSeg(wireSrc4, netlab.App4, pl[:16]) // its checksum covers 8+16 bytes
			return w.eth4(w.ip4(netlab.App4, header.UDPProtocolNumber, slices.Concat(seg, pl[16:])))
		},
		// The kernel trims the packet to the UDP length (udp_rcv,
		// pskb_trim_rcsum) and delivers that.
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.intoTUN(f.ip, w.udpWhy("Malformed")).k("Udp.InDatagrams").to("app4", wirePayload("ushort", 32)[:16])
		},
	},
	{
		name: "IPv6 UDP length 4 (< 8)",
		build: func(w *wireRun) wireFrame {
			ip := w.udp6(netlab.App6, wirePayload("utiny", 32))
			header.UDP(ip[header.IPv6MinimumSize:]).SetLength(4)
			return w.eth6(ip)
		},
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.intoTUN(f.ip, w.udpWhy("Malformed")).k("Udp6InErrors")
		},
	},
	{
		name: "IPv4 UDP, zero checksum",
		build: func(w *wireRun) wireFrame {
			ip := w.udp4(netlab.App4, wirePayload("nocsum4", 32))
			header.UDP(ip[header.IPv4MinimumSize:]).SetChecksum(0)
			return w.eth4(ip)
		},
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.intoTUN(f.ip, w.udpWhy("NoChecksum")).k("Udp.InDatagrams").to("app4", wirePayload("nocsum4", 32))
		},
	},
	{
		name: "IPv6 UDP, zero checksum (not allowed)",
		build: func(w *wireRun) wireFrame {
			ip := w.udp6(netlab.App6, wirePayload("nocsum6", 32))
			header.UDP(ip[header.IPv6MinimumSize:]).SetChecksum(0)
			return w.eth6(ip)
		},
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.intoTUN(f.ip, w.udpWhy("NoChecksum")).k("Udp6InErrors", "Udp6InCsumErrors")
		},
	},
	{
		name: "IPv4 bad header checksum",
		build: func(w *wireRun) wireFrame {
			ip := w.udp4(netlab.App4, wirePayload("ipcsum", 32))
			ip[10] ^= 0x5a
			return w.eth4(ip)
		},
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.dropped()
		},
	},
	{
		name: "IPv4 UDP bad checksum",
		build: func(w *wireRun) wireFrame {
			ip := w.udp4(netlab.App4, wirePayload("udpcsum", 32))
			ip[header.IPv4MinimumSize+7] ^= 0x5a
			return w.eth4(ip)
		},
		// GRO verifies a transport checksum only to merge.
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.intoTUN(f.ip, w.udpWhy("Unmerged")).k("Udp.InErrors", "Udp.InCsumErrors")
		},
	},
	{
		name: "IPv4 with options (IHL 6), UDP",
		build: func(w *wireRun) wireFrame {
			ip := w.udp4(netlab.App4, wirePayload("opts", 32))
			ip = slices.Concat(ip[:20], []byte{1, 1, 1, 0}, ip[20:]) // NOP NOP NOP EOL
			ip[0] = 0x46
			header.IPv4(ip).SetTotalLength(uint16(len(ip)))
			wireRefresh4(ip)
			return w.eth4(ip)
		},
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.intoTUN(f.ip, "IPOptions").k("Udp.InDatagrams").to("app4", wirePayload("opts", 32))
		},
	},
	{
		name: "IPv4 unknown protocol 253",
		build: func(w *wireRun) wireFrame {
			return w.eth4(w.ip4(netlab.App4, 253, wirePayload("proto253", 24)))
		},
		want: func(w *wireRun, f wireFrame) *wireFate { return w.intoTUN(f.ip, "NotTCPUDP").k("Ip.InUnknownProtos") },
	},
	{
		name: "IPv4 ICMP echo request",
		build: func(w *wireRun) wireFrame {
			icmp := header.ICMPv4(slices.Concat(make([]byte, header.ICMPv4MinimumSize), wirePayload("ping", 24)))
			icmp.SetType(header.ICMPv4Echo)
			icmp.SetIdent(7)
			icmp.SetSequence(1)
			icmp.SetChecksum(^checksum.Checksum(icmp, 0))
			return w.eth4(w.ip4(netlab.App4, header.ICMPv4ProtocolNumber, icmp))
		},
		want: func(w *wireRun, f wireFrame) *wireFate { return w.intoTUN(f.ip, "NotTCPUDP").k("Icmp.InEchos") },
	},
	{
		name: "1514-byte frame, IPv4 UDP",
		build: func(w *wireRun) wireFrame {
			return w.eth4(w.udp4(netlab.App4, wirePayload("max4", 1500-28)))
		},
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.intoTUN(f.ip, w.udpWhy("Unmerged")).k("Udp.InDatagrams").to("app4", wirePayload("max4", 1500-28))
		},
	},
	{
		name: "1514-byte frame, IPv6 UDP",
		build: func(w *wireRun) wireFrame {
			return w.eth6(w.udp6(netlab.App6, wirePayload("max6", 1500-48)))
		},
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.intoTUN(f.ip, w.udpWhy("Unmerged")).k("Udp6InDatagrams").to("app6", wirePayload("max6", 1500-48))
		},
	},
	{
		name: "802.1Q VLAN 5, IPv4 UDP for the app",
		build: func(w *wireRun) wireFrame {
			return w.vlan(5, w.eth4(w.udp4(netlab.App4, wirePayload("vlan5", 32))))
		},
		// No VLAN 5 device: the kernel marks it PACKET_OTHERHOST and
		// ip_rcv drops it (rx_otherhost_dropped).
		want: func(w *wireRun, f wireFrame) *wireFate { return w.kernel("") },
	},
	{
		name: "802.1Q VLAN 0 (priority tag), IPv4 UDP for the app",
		build: func(w *wireRun) wireFrame {
			return w.vlan(0, w.eth4(w.udp4(netlab.App4, wirePayload("vlan0", 32))))
		},
		// Neither port takes tagged frames; the kernel strips a
		// priority tag and handles the packet as untagged: here it is
		// for A itself, so A delivers it from gw-a, not through the TUN.
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.kernel("").k("Udp.InDatagrams").to("app4", wirePayload("vlan0", 32))
		},
	},
	{
		name: "ARP request for gw-a's address",
		setup: func(w *wireRun) {
			w.delNeigh(w.lab.B, w.ifB, netlab.NICA4)
			w.delNeigh(w.lab.A, w.ifA, netlab.NICB4)
		},
		build: func(w *wireRun) wireFrame {
			arp := header.ARP(make([]byte, header.ARPSize))
			arp.SetIPv4OverEthernet()
			arp.SetOp(header.ARPRequest)
			copy(arp.HardwareAddressSender(), w.macB)
			copy(arp.ProtocolAddressSender(), netlab.NICB4.AsSlice())
			copy(arp.ProtocolAddressTarget(), netlab.NICA4.AsSlice())
			return w.eth(wireBcast, header.ARPProtocolNumber, arp)
		},
		// A answers (and learns gw-b from the request); B, with
		// arp_accept, learns gw-a from the answer.
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.kernel("").
				cond("B has gw-a's MAC", func() bool { return w.hasNeigh(w.lab.B, w.ifB, netlab.NICA4, w.macA) }).
				cond("A has gw-b's MAC", func() bool { return w.hasNeigh(w.lab.A, w.ifA, netlab.NICB4, w.macB) })
		},
	},
	{
		name:  "IPv6 neighbour solicitation for gw-a's address",
		setup: func(w *wireRun) { w.delNeigh(w.lab.A, w.ifA, netlab.NICB6) },
		build: func(w *wireRun) wireFrame { return w.solicit(netlab.NICA6, true) },
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.kernel("").
				cond("A has gw-b's MAC (v6)", func() bool { return w.hasNeigh(w.lab.A, w.ifA, netlab.NICB6, w.macB) })
		},
	},
	{
		name:  "IPv6 neighbour solicitation for the app's address, unicast",
		setup: func(w *wireRun) { w.delNeigh(w.lab.A, w.ifA, netlab.NICB6) },
		build: func(w *wireRun) wireFrame { return w.solicit(netlab.App6, false) },
		// Neighbour discovery is left to the kernel even for the
		// redirect prefixes (no XDP counter either). The kernel answers
		// only for addresses of the receiving device (ndisc_recv_ns,
		// strict lookup), so it drops this one without learning gw-b.
		want: func(w *wireRun, f wireFrame) *wireFate { return w.kernel("") },
	},
	{
		name: "another host's MAC, IPv4 UDP for the app",
		build: func(w *wireRun) wireFrame {
			f := w.eth4(w.udp4(netlab.App4, wirePayload("other4", 32)))
			copy(f.frame, wireOther)
			return f
		},
		// ip_rcv drops PACKET_OTHERHOST (rx_otherhost_dropped).
		want: func(w *wireRun, f wireFrame) *wireFate { return w.kernel("OtherHost") },
	},
	{
		name: "another host's MAC, IPv6 UDP for the app",
		build: func(w *wireRun) wireFrame {
			f := w.eth6(w.udp6(netlab.App6, wirePayload("other6", 32)))
			copy(f.frame, wireOther)
			return f
		},
		want: func(w *wireRun, f wireFrame) *wireFate { return w.kernel("OtherHost") },
	},
	{
		name: "broadcast MAC, IPv4 UDP for the app",
		build: func(w *wireRun) wireFrame {
			f := w.eth4(w.udp4(netlab.App4, wirePayload("bcast4", 32)))
			copy(f.frame, wireBcast)
			return f
		},
		// A's own address: delivered from gw-a
		// (drop_unicast_in_l2_multicast is off), not through the TUN.
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.kernel("NotUnicast").k("Udp.InDatagrams").to("app4", wirePayload("bcast4", 32))
		},
	},
	{
		name: "multicast MAC, IPv6 UDP for the app",
		build: func(w *wireRun) wireFrame {
			f := w.eth6(w.udp6(netlab.App6, wirePayload("mcast6", 32)))
			copy(f.frame, net.HardwareAddr{0x33, 0x33, 0, 0, 0, 9})
			return f
		},
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.kernel("NotUnicast").k("Udp6InDatagrams").to("app6", wirePayload("mcast6", 32))
		},
	},
	{
		name: "multicast MAC, IPv4 UDP for a host behind the TUN",
		build: func(w *wireRun) wireFrame {
			f := w.eth4(w.udp4(wireBehind4, wirePayload("mcast4", 32)))
			copy(f.frame, net.HardwareAddr{0x01, 0x00, 0x5e, 0, 0, 7})
			return f
		},
		// Not A's: A does not forward (ip_forward off in the lab), and
		// never forwards what came to a group address.
		want: func(w *wireRun, f wireFrame) *wireFate { return w.kernel("NotUnicast").k("Ip.InAddrErrors") },
	},
	{
		name: "not in the prefixes: IPv4 UDP to gw-a's address",
		build: func(w *wireRun) wireFrame {
			return w.eth4(w.udp4(netlab.NICA4, wirePayload("nic4", 32)))
		},
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.kernel("").k("Udp.InDatagrams").to("nic4", wirePayload("nic4", 32))
		},
	},
	{
		name: "not in the prefixes: IPv6 UDP to gw-a's address",
		build: func(w *wireRun) wireFrame {
			return w.eth6(w.udp6(netlab.NICA6, wirePayload("nic6", 32)))
		},
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.kernel("").k("Udp6InDatagrams").to("nic6", wirePayload("nic6", 32))
		},
	},
	{
		name: "not in the prefixes: IPv4 UDP to an address nowhere",
		build: func(w *wireRun) wireFrame {
			return w.eth4(w.udp4(wireNowhere4, wirePayload("nowhere", 32)))
		},
		want: func(w *wireRun, f wireFrame) *wireFate { return w.kernel("").k("Ip.InAddrErrors") },
	},
	{
		name: "spoofed: IPv4 UDP for the app from an address behind the TUN",
		build: func(w *wireRun) wireFrame {
			src := netlab.App4.Next()
			ip := w.ip4(netlab.App4, header.UDPProtocolNumber, w.udpSeg(src, netlab.App4, wirePayload("spoof4", 32)))
			copy(ip[12:16], src.AsSlice())
			wireRefresh4(ip)
			return w.eth4(ip)
		},
		want: func(w *wireRun, f wireFrame) *wireFate { return w.spoofed() },
	},
	{
		name: "spoofed: IPv6 UDP for the app from an address behind the TUN",
		build: func(w *wireRun) wireFrame {
			src := netlab.App6.Next()
			ip := w.ip6(netlab.App6, wireUDP, nil, w.udpSeg(src, netlab.App6, wirePayload("spoof6", 32)))
			copy(ip[8:24], src.AsSlice())
			return w.eth6(ip)
		},
		want: func(w *wireRun, f wireFrame) *wireFate { return w.spoofed() },
	},
	{
		name:  "after the corpus: IPv4 UDP for the app",
		build: func(w *wireRun) wireFrame { return w.eth4(w.udp4(netlab.App4, wirePayload("after", 32))) },
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.intoTUN(f.ip, w.udpWhy("Unmerged")).k("Udp.InDatagrams").to("app4", wirePayload("after", 32))
		},
	},
}

// wireUMEMFit is the longest IP packet an AF_XDP socket takes: a UMEM
// frame less XDP_PACKET_HEADROOM and the Ethernet header.
const wireUMEMFit = xsk.DefaultFrameSize - 256 - header.EthernetMinimumSize

// wireJumboCases are frames longer than one UMEM frame, through a
// 9000-byte link. An AF_XDP port with multi-buffer receive takes them as
// chains of frames, as the AF_PACKET port takes them; without it, the XDP
// program passes them to the kernel (counted as Oversize) instead of
// letting the socket drop them.
var wireJumboCases = []wireCase{
	{
		name: "IPv4 UDP, as long as a UMEM frame takes",
		build: func(w *wireRun) wireFrame {
			return w.eth4(w.udp4(netlab.App4, wirePayload("fit", wireUMEMFit-28)))
		},
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.intoTUN(f.ip, w.udpWhy("Unmerged")).k("Udp.InDatagrams").to("app4", wirePayload("fit", wireUMEMFit-28))
		},
	},
	{
		name: "IPv4 UDP, one byte longer",
		build: func(w *wireRun) wireFrame {
			return w.eth4(w.udp4(netlab.App4, wirePayload("over", wireUMEMFit+1-28)))
		},
		// With forwarding off, A delivers what is for its own address
		// from gw-a (with it on, it would route the rest into the TUN).
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.long(f.ip).k("Udp.InDatagrams").to("app4", wirePayload("over", wireUMEMFit+1-28))
		},
	},
	{
		name: "9014-byte frame, IPv6 UDP",
		build: func(w *wireRun) wireFrame {
			return w.eth6(w.udp6(netlab.App6, wirePayload("jumbo6", 9000-48)))
		},
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.long(f.ip).k("Udp6InDatagrams").to("app6", wirePayload("jumbo6", 9000-48))
		},
	},
	{
		name: "9014-byte frame, IPv4 UDP for a host behind the TUN",
		build: func(w *wireRun) wireFrame {
			return w.eth4(w.udp4(wireBehind4, wirePayload("jumbo4", 9000-28)))
		},
		// Not A's: dropped by A (forwarding off) whichever way it comes.
		want: func(w *wireRun, f wireFrame) *wireFate { return w.long(f.ip).k("Ip.InAddrErrors") },
	},
	{
		name:  "after: IPv4 UDP for the app",
		build: func(w *wireRun) wireFrame { return w.eth4(w.udp4(netlab.App4, wirePayload("after", 32))) },
		want: func(w *wireRun, f wireFrame) *wireFate {
			return w.intoTUN(f.ip, w.udpWhy("Unmerged")).k("Udp.InDatagrams").to("app4", wirePayload("after", 32))
		},
	},
}

// long is the fate of a UDP packet longer than one UMEM frame: taken by
// the AF_PACKET port and by an AF_XDP port with multi-buffer receive (the
// gateway's default where the kernel has it), else passed to the kernel
// and counted as Oversize.
func (w *wireRun) long(ip []byte) *wireFate {
	if w.port == PortXDP && !w.lab.g.XDP().MultiBuffer() {
		return w.kernel("Oversize")
	}
	return w.intoTUN(ip, w.udpWhy("Unmerged"))
}

// Frame builders (gVisor's header encoders).

var (
	wireSrc4 = netlab.Srv4
	wireSrc6 = netlab.Srv6
	// wireOptions is an 8-byte Hop-by-Hop or Destination Options header
	// (PadN) before UDP.
	wireOptions = []byte{wireUDP, 0, 1, 4, 0, 0, 0, 0}
)

// Next-header values.
const (
	wireUDP      = uint8(header.UDPProtocolNumber)
	wireHopByHop = uint8(header.IPv6HopByHopOptionsExtHdrIdentifier)
	wireDestOpts = uint8(header.IPv6DestinationOptionsExtHdrIdentifier)
)

// wirePayload is n bytes beginning with a marker.
func wirePayload(marker string, n int) []byte {
	b := bytes.Repeat([]byte{'.'}, n)
	copy(b, "corpus-"+marker+"-")
	return b
}

func wireAddr(a netip.Addr) tcpip.Address { return tcpip.AddrFromSlice(a.AsSlice()) }

// eth puts payload behind an Ethernet header from gw-b to dst.
func (w *wireRun) eth(dst net.HardwareAddr, typ tcpip.NetworkProtocolNumber, payload []byte) wireFrame {
	b := make([]byte, header.EthernetMinimumSize+len(payload))
	header.Ethernet(b).Encode(&header.EthernetFields{SrcAddr: tcpip.LinkAddress(w.macB), DstAddr: tcpip.LinkAddress(dst), Type: typ})
	copy(b[header.EthernetMinimumSize:], payload)
	return wireFrame{frame: b, ip: payload}
}

func (w *wireRun) eth4(ip []byte) wireFrame { return w.eth(w.macA, header.IPv4ProtocolNumber, ip) }
func (w *wireRun) eth6(ip []byte) wireFrame { return w.eth(w.macA, header.IPv6ProtocolNumber, ip) }

// vlan inserts an 802.1Q tag with the VLAN ID vid.
func (w *wireRun) vlan(vid uint16, f wireFrame) wireFrame {
	tag := binary.BigEndian.AppendUint16([]byte{0x81, 0x00}, vid)
	f.frame = slices.Concat(f.frame[:12], tag, f.frame[12:])
	return f
}

// wireNICForm is the frame as a packet socket on gw-a sees it: the
// kernel takes an 802.1Q tag out of the data before the taps.
func wireNICForm(frame []byte) []byte {
	if len(frame) >= 18 && binary.BigEndian.Uint16(frame[12:]) == 0x8100 {
		return slices.Concat(frame[:12], frame[16:])
	}
	return frame
}

// ip4 is an IPv4 packet from the server to dst with a fresh ID.
func (w *wireRun) ip4(dst netip.Addr, proto tcpip.TransportProtocolNumber, payload []byte) []byte {
	w.id++
	ip := header.IPv4(make([]byte, header.IPv4MinimumSize+len(payload)))
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(ip)), ID: w.id, TTL: 64, Protocol: uint8(proto),
		SrcAddr: wireAddr(wireSrc4), DstAddr: wireAddr(dst)})
	ip.SetChecksum(^ip.CalculateChecksum())
	copy(ip[header.IPv4MinimumSize:], payload)
	return ip
}

// ip6 is an IPv6 packet from the server to dst: next is the fixed
// header's next header, ext the extension headers (if any), then l4.
func (w *wireRun) ip6(dst netip.Addr, next uint8, ext, l4 []byte) []byte {
	ip := header.IPv6(make([]byte, header.IPv6MinimumSize+len(ext)+len(l4)))
	ip.Encode(&header.IPv6Fields{PayloadLength: uint16(len(ext) + len(l4)), TransportProtocol: tcpip.TransportProtocolNumber(next),
		HopLimit: 64, SrcAddr: wireAddr(wireSrc6), DstAddr: wireAddr(dst)})
	copy(ip[header.IPv6MinimumSize:], ext)
	copy(ip[header.IPv6MinimumSize+len(ext):], l4)
	return ip
}

// udpSeg is a UDP header and payload from the server's port to the
// listeners' port, with its checksum for src and dst.
func (w *wireRun) udpSeg(src, dst netip.Addr, payload []byte) []byte {
	u := header.UDP(make([]byte, header.UDPMinimumSize+len(payload)))
	u.Encode(&header.UDPFields{SrcPort: wireSport, DstPort: wirePort, Length: uint16(len(u))})
	copy(u.Payload(), payload)
	wireL4Checksum(src, dst, header.UDPProtocolNumber, u, 6)
	return u
}

// tcpSeg is a TCP segment to the closed TCP port.
func (w *wireRun) tcpSeg(src, dst netip.Addr, flags header.TCPFlags, payload []byte) []byte {
	s := header.TCP(make([]byte, header.TCPMinimumSize+len(payload)))
	s.Encode(&header.TCPFields{SrcPort: wireSport, DstPort: wireTCPPort, SeqNum: 1000, AckNum: 2000,
		DataOffset: header.TCPMinimumSize, Flags: flags, WindowSize: 512})
	copy(s[header.TCPMinimumSize:], payload)
	wireL4Checksum(src, dst, header.TCPProtocolNumber, s, 16)
	return s
}

// wireL4Checksum fills in the checksum at off of the transport segment
// seg (UDP's 0 as 0xffff).
func wireL4Checksum(src, dst netip.Addr, proto tcpip.TransportProtocolNumber, seg []byte, off int) {
	seg[off], seg[off+1] = 0, 0
	c := ^checksum.Checksum(seg, header.PseudoHeaderChecksum(proto, wireAddr(src), wireAddr(dst), uint16(len(seg))))
	if c == 0 && proto == header.UDPProtocolNumber {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(seg[off:], c)
}

func (w *wireRun) udp4(dst netip.Addr, payload []byte) []byte {
	return w.ip4(dst, header.UDPProtocolNumber, w.udpSeg(wireSrc4, dst, payload))
}

func (w *wireRun) udp6(dst netip.Addr, payload []byte) []byte {
	return w.ip6(dst, wireUDP, nil, w.udpSeg(wireSrc6, dst, payload))
}

func (w *wireRun) tcp4(dst netip.Addr, flags header.TCPFlags, payload []byte) []byte {
	return w.ip4(dst, header.TCPProtocolNumber, w.tcpSeg(wireSrc4, dst, flags, payload))
}

func (w *wireRun) tcp6(dst netip.Addr, flags header.TCPFlags, payload []byte) []byte {
	return w.ip6(dst, uint8(header.TCPProtocolNumber), nil, w.tcpSeg(wireSrc6, dst, flags, payload))
}

// wireRefresh4 recomputes an IPv4 header checksum after a change.
func wireRefresh4(ip []byte) {
	h := header.IPv4(ip)
	h.SetChecksum(0)
	n := int(ip[0]&0xf) * 4
	binary.BigEndian.PutUint16(ip[10:], ^checksum.Checksum(ip[:min(max(n, 1), len(ip))], 0))
}

// fragments4 are the two IPv4 fragments of one UDP datagram of 48 bytes
// of payload: the UDP header and 24 bytes, then 24 bytes at offset 32.
func (w *wireRun) fragments4() [2]wireFrame {
	if w.frag4[0].frame == nil {
		seg := w.udpSeg(wireSrc4, netlab.App4, wirePayload("frag4", 48))
		w.id++
		for i, part := range [][]byte{seg[:32], seg[32:]} {
			ip := header.IPv4(make([]byte, header.IPv4MinimumSize+len(part)))
			f := header.IPv4Fields{TotalLength: uint16(len(ip)), ID: w.id, TTL: 64, Protocol: uint8(header.UDPProtocolNumber),
				SrcAddr: wireAddr(wireSrc4), DstAddr: wireAddr(netlab.App4)}
			if i == 0 {
				f.Flags = header.IPv4FlagMoreFragments
			} else {
				f.FragmentOffset = 32
			}
			ip.Encode(&f)
			ip.SetChecksum(^ip.CalculateChecksum())
			copy(ip[header.IPv4MinimumSize:], part)
			w.frag4[i] = w.eth4(ip)
		}
	}
	return w.frag4
}

// fragments6 are the two IPv6 fragments (Fragment header) of one UDP
// datagram, as fragments4.
func (w *wireRun) fragments6() [2]wireFrame {
	if w.frag6[0].frame == nil {
		seg := w.udpSeg(wireSrc6, netlab.App6, wirePayload("frag6", 48))
		w.id++
		for i, part := range [][]byte{seg[:32], seg[32:]} {
			fh := make([]byte, 8)
			fh[0] = wireUDP
			off := uint16(32 * i)
			if i == 0 {
				off |= 1 // M
			}
			binary.BigEndian.PutUint16(fh[2:], off)
			binary.BigEndian.PutUint32(fh[4:], uint32(w.id))
			ip := w.ip6(netlab.App6, uint8(header.IPv6FragmentExtHdrIdentifier), fh, part)
			w.frag6[i] = w.eth6(ip)
		}
	}
	return w.frag6
}

// solicit is a neighbour solicitation from gw-b for target: to its
// solicited-node multicast address, or unicast to gw-a.
func (w *wireRun) solicit(target netip.Addr, multicast bool) wireFrame {
	icmp := header.ICMPv6(make([]byte, header.ICMPv6NeighborSolicitMinimumSize+8))
	icmp.SetType(header.ICMPv6NeighborSolicit)
	ns := header.NDPNeighborSolicit(icmp.MessageBody())
	ns.SetTargetAddress(wireAddr(target))
	opt := icmp[header.ICMPv6NeighborSolicitMinimumSize:]
	opt[0], opt[1] = 1, 1 // source link-layer address
	copy(opt[2:], w.macB)
	dst, mac := target, w.macA
	if multicast {
		t := target.As16()
		dst = netip.AddrFrom16([16]byte{0: 0xff, 1: 0x02, 11: 1, 12: 0xff, 13: t[13], 14: t[14], 15: t[15]})
		d := dst.As16()
		mac = net.HardwareAddr{0x33, 0x33, d[12], d[13], d[14], d[15]}
	}
	ip := header.IPv6(make([]byte, header.IPv6MinimumSize+len(icmp)))
	ip.Encode(&header.IPv6Fields{PayloadLength: uint16(len(icmp)), TransportProtocol: header.ICMPv6ProtocolNumber,
		HopLimit: 255, SrcAddr: wireAddr(netlab.NICB6), DstAddr: wireAddr(dst)})
	copy(ip[header.IPv6MinimumSize:], icmp)
	wireL4Checksum(netlab.NICB6, dst, header.ICMPv6ProtocolNumber, ip[header.IPv6MinimumSize:], 2)
	return w.eth(mac, header.IPv6ProtocolNumber, ip)
}

// Neighbour entries.

func (w *wireRun) delNeigh(ns *netlab.NS, ifindex int, ip netip.Addr) {
	err := ns.Netlink().NeighDel(&netlink.Neigh{LinkIndex: ifindex, IP: ip.AsSlice()})
	if err != nil && !errors.Is(err, unix.ENOENT) {
		w.t.Fatalf("delete neighbour %v in %s: %v", ip, ns.Name, err)
	}
}

func (w *wireRun) hasNeigh(ns *netlab.NS, ifindex int, ip netip.Addr, mac net.HardwareAddr) bool {
	family := netlink.FAMILY_V4
	if ip.Is6() {
		family = netlink.FAMILY_V6
	}
	ns4, err := ns.Netlink().NeighList(ifindex, family)
	if err != nil {
		return false
	}
	for _, n := range ns4 {
		a, _ := netip.AddrFromSlice(n.IP)
		if a.Unmap() == ip && bytes.Equal(n.HardwareAddr, mac) && n.State&(netlink.NUD_INCOMPLETE|netlink.NUD_FAILED) == 0 {
			return true
		}
	}
	return false
}

// wireCapture is a packet socket on a device in A that keeps what the
// device receives (not what it sends).
type wireCapture struct {
	fd  int
	buf []byte
}

func openWireCapture(t *testing.T, ns *netlab.NS, dev string) *wireCapture {
	t.Helper()
	fd := ns.SocketT(t, unix.AF_PACKET, unix.SOCK_RAW)
	all := int(htons(unix.ETH_P_ALL))
	netlab.Must(t, os.NewSyscallError("bind", unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: uint16(all), Ifindex: ns.LinkT(t, dev).Attrs().Index})))
	netlab.Must(t, os.NewSyscallError("setsockopt", unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)))
	return &wireCapture{fd: fd, buf: make([]byte, 1<<17)}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// drain returns copies of the packets received since the last call.
func (c *wireCapture) drain() [][]byte {
	var out [][]byte
	for {
		n, from, err := unix.Recvfrom(c.fd, c.buf, unix.MSG_DONTWAIT)
		if err != nil {
			return out
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		out = append(out, bytes.Clone(c.buf[:n]))
	}
}

// wireListener is a UDP socket in A that keeps the datagrams it gets.
type wireListener struct {
	mu   sync.Mutex
	got  [][]byte
	conn net.PacketConn
}

func openWireListener(t *testing.T, ns *netlab.NS, addr netip.AddrPort) *wireListener {
	t.Helper()
	l := &wireListener{}
	ns.Do(t, func() {
		var err error
		if l.conn, err = net.ListenPacket("udp", addr.String()); err != nil {
			t.Fatalf("listen %v: %v", addr, err)
		}
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1<<16)
		for {
			n, _, err := l.conn.ReadFrom(buf)
			if err != nil {
				return
			}
			l.mu.Lock()
			l.got = append(l.got, bytes.Clone(buf[:n]))
			l.mu.Unlock()
		}
	}()
	t.Cleanup(func() { l.conn.Close(); <-done })
	return l
}

// take returns the datagrams received since the last call.
func (l *wireListener) take() [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	got := l.got
	l.got = nil
	return got
}

// wireKernel reads A's IP, ICMP, UDP and TCP counters: snmp and netstat
// ("Ip.InHdrErrors") and snmp6 ("Ip6InHdrErrors"), of the namespace of
// the reading thread.
func wireKernel(ns *netlab.NS) (map[string]uint64, error) {
	m := map[string]uint64{}
	err := ns.Run(func() error {
		for _, f := range []string{"snmp", "netstat"} {
			b, err := os.ReadFile("/proc/thread-self/net/" + f)
			if err != nil {
				return err
			}
			lines := strings.Split(string(b), "\n")
			for i := 0; i+1 < len(lines); i += 2 {
				names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
				if len(names) != len(values) || len(names) == 0 {
					continue
				}
				prefix := strings.TrimSuffix(names[0], ":")
				for j := 1; j < len(names); j++ {
					v, _ := strconv.ParseUint(values[j], 10, 64)
					m[prefix+"."+names[j]] = v
				}
			}
		}
		b, err := os.ReadFile("/proc/thread-self/net/snmp6")
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) == 2 {
				v, _ := strconv.ParseUint(f[1], 10, 64)
				m[f[0]] = v
			}
		}
		return nil
	})
	return m, err
}
