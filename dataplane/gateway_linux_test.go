package dataplane

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/dataplane/afpacket"
	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// The reference topology (netlab.Topology): the gateway and an
// application in netns A, a server in netns B. A routes the server's
// prefixes into the TUN device; the gateway sends them out of gw-a
// through its NIC port, AF_XDP or AF_PACKET. B routes the application's
// prefixes back to gw-a, where the port's program (XDP, or an ingress
// program, tcx or cls_bpf, and a socket filter for AF_PACKET) hands them
// to the gateway, which writes them into the TUN device.
const labTUN = "gsotun0"

// labPort is a NIC port the integration tests run over.
type labPort struct {
	name string // the subtest's name: -run 'TestGatewayTCP/packet'
	kind PortKind
	gso  afpacket.GSOMode // AF_PACKET: what the sink leaves to the NIC
	// filter is how an AF_PACKET port attaches its ingress program.
	filter afpacket.HostFilter
}

// config sets the port of cfg.
func (p labPort) config(cfg GatewayConfig) GatewayConfig {
	cfg.Port, cfg.Packet.GSO, cfg.Packet.HostFilter = p.kind, p.gso, p.filter
	return cfg
}

var (
	portXDP    = labPort{name: "xdp", kind: PortXDP}
	portPacket = labPort{name: "packet", kind: PortPacket} // GSOModeAuto, tcx on this kernel
	labPorts   = []labPort{portXDP, portPacket}
	// portClsact is AF_PACKET with its ingress program on a clsact qdisc,
	// as on a kernel without tcx.
	portClsact = labPort{name: "packet-clsact", kind: PortPacket, filter: afpacket.HostFilterClsact}
)

// forPorts runs fn as a subtest per port, named after it (skipping them
// all at once unless root).
func forPorts(t *testing.T, fn func(t *testing.T, p labPort)) {
	netlab.RequireRoot(t)
	for _, p := range labPorts {
		t.Run(p.name, func(t *testing.T) { fn(t, p) })
	}
}

var (
	labSrv4 = netlab.Srv4
	labSrv6 = netlab.Srv6
)

func TestMain(m *testing.M) { os.Exit(netlab.Main(m)) }

type gwLab struct {
	*netlab.Topology
	g    *Gateway
	done chan error   // Run's result
	stop func() error // stops and closes the gateway; idempotent
}

// newGwLab builds the topology and starts a gateway configured by cfg
// (its names and routes are filled in). cfg.Port picks the NIC port;
// PortAuto is AF_PACKET on the veth, whose driver has no AF_XDP
// zero-copy (TestPortChoice).
func newGwLab(t testing.TB, cfg GatewayConfig) *gwLab { return newGwLabWith(t, cfg, nil) }

// newGwLabWith is newGwLab with prepare, if not nil, run on the topology
// before the gateway opens.
func newGwLabWith(t testing.TB, cfg GatewayConfig, prepare func(*netlab.Topology)) *gwLab {
	t.Helper()
	lab := &gwLab{Topology: netlab.NewTopologyT(t, "gw")}
	if prepare != nil {
		prepare(lab.Topology)
	}
	cfg.TUN.Name, cfg.NIC, cfg.Routes = labTUN, netlab.NICA, netlab.AppRoutes
	lab.A.Do(t, func() {
		g, err := OpenGateway(cfg)
		if err != nil {
			t.Fatalf("OpenGateway (port %v): %v", cfg.Port, err)
		}
		lab.g = g
	})
	if want := cfg.Port; want != PortAuto && lab.g.Port() != want {
		lab.g.Close()
		t.Fatalf("the gateway opened port %v, want %v", lab.g.Port(), want)
	}
	netlab.Must(t, lab.TUNUp(labTUN))
	lab.run()
	t.Cleanup(func() {
		if err := lab.stop(); err != nil {
			t.Errorf("gateway: %v", err)
		}
	})
	return lab
}

// run runs the lab's gateway and sets stop.
func (lab *gwLab) run() {
	ctx, cancel := context.WithCancel(context.Background())
	g, done := lab.g, make(chan error, 1)
	lab.done = done
	go func() { done <- g.Run(ctx) }()
	stopped := false
	lab.stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		var err error
		select {
		case err = <-done:
		case <-time.After(10 * time.Second):
			err = errors.New("Run did not return")
		}
		return errors.Join(err, g.Close())
	}
}

// listen opens a listener in B on the server address.
func (lab *gwLab) listen(t testing.TB, network string, srv netip.Addr, port int) (ln net.Listener, pc net.PacketConn) {
	t.Helper()
	addr := netip.AddrPortFrom(srv, uint16(port)).String()
	lab.B.Do(t, func() {
		var err error
		if network == "tcp" {
			ln, err = net.Listen("tcp", addr)
		} else {
			pc, err = net.ListenPacket("udp", addr)
		}
		if err != nil {
			t.Fatalf("listen %s %s: %v", network, addr, err)
		}
	})
	return ln, pc
}

// dial connects from A.
func (lab *gwLab) dial(t testing.TB, network string, dst netip.Addr, port int) net.Conn {
	t.Helper()
	var c net.Conn
	lab.A.Do(t, func() {
		var err error
		c, err = net.DialTimeout(network, netip.AddrPortFrom(dst, uint16(port)).String(), 5*time.Second)
		if err != nil {
			t.Fatalf("dial %s %v: %v", network, dst, err)
		}
	})
	return c
}

// tcpTransfer sends size bytes of a deterministic stream from A to B, or
// from B to A, and checks the SHA-256 at the receiver.
func tcpTransfer(t testing.TB, lab *gwLab, srv netip.Addr, size int64, toA bool) time.Duration {
	t.Helper()
	return netlab.TCPTransfer(t, lab.A, lab.B, netip.AddrPortFrom(srv, 5201), size, toA)
}

// settledStats returns the gateway's counters once both directions are
// idle: every super-packet read is counted in the histograms, every
// frame handed to the port is complete, and the return path's counters
// stay still between two looks (a packet is counted when it is read and
// again when it is written). Right after a transfer the closing
// sockets' last packets may still be on their way.
func (lab *gwLab) settledStats() GatewayStats {
	st := lab.g.Stats()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		prev := st.Return
		st = lab.g.Stats()
		f, r := st.Forward, st.Return
		if sum(f.SegmentsPerRead[:]) == f.SuperPackets && f.Completed == f.Transmitted && sum(f.TxLatency[:]) == f.Completed &&
			r.Packets == prev.Packets && r.Writes == prev.Writes {
			break
		}
	}
	return st
}

// lost counts the drops of packets that were to go through: all but
// those to multicast and link-local addresses, which a router does not
// forward (the host's own MLD reports and router solicitations are not
// even drops: Stats.HostControl).
func lost(d frame.Drops) uint64 { return d.Total() - d[frame.DropNotRouted] }

// TestGatewayTCP moves SHA-256-checked TCP streams both ways, over IPv4
// and IPv6, through each NIC port: AF_XDP, and AF_PACKET in each GSO
// mode (offload: whole super-packets the NIC segments; partial: segments
// with partial checksums; full: complete segments), checking from the
// port's counters that the mode did what it says. The return path runs
// with GRO and without; GRO does not depend on the TX mode, so the
// AF_PACKET modes other than offload run with it only, and one run has
// GRO on gw-a too, where the kernel merges before the port and the
// return path passes its super-packets on unchanged. The AF_PACKET port
// attaches its ingress program through tcx, and in one run as a cls_bpf
// filter on a clsact qdisc, which the gateway leaves nothing of.
func TestGatewayTCP(t *testing.T) {
	netlab.RequireRoot(t)
	packet := func(mode afpacket.GSOMode) labPort {
		return labPort{name: "packet/" + mode.String(), kind: PortPacket, gso: mode}
	}
	for _, c := range []struct {
		port   labPort
		gro    string // "gro=true", "gro=false", or "nic-gro": GRO on gw-a and in the return path
		sizeV4 int64
	}{
		{portXDP, "gro=true", 64 << 20},
		{portXDP, "gro=false", 32 << 20},
		{packet(afpacket.GSOModeOffload), "gro=true", 64 << 20},
		{packet(afpacket.GSOModeOffload), "gro=false", 32 << 20},
		{packet(afpacket.GSOModeOffload), "nic-gro", 32 << 20},
		{packet(afpacket.GSOModePartial), "gro=true", 32 << 20},
		{packet(afpacket.GSOModeFull), "gro=true", 32 << 20},
		{portClsact, "gro=true", 32 << 20},
	} {
		t.Run(c.port.name+"/"+c.gro, func(t *testing.T) { gatewayTCP(t, c.port, c.gro, c.sizeV4) })
	}
}

func gatewayTCP(t *testing.T, port labPort, gro string, size int64) {
	nicGRO := gro == "nic-gro"
	lab := newGwLab(t, port.config(GatewayConfig{DisableGRO: gro == "gro=false"}))
	if nicGRO {
		netlab.Must(t, lab.A.SetFeatures(netlab.NICA, map[string]bool{"gro": true}))
	}
	for _, c := range []struct {
		name string
		srv  netip.Addr
		toA  bool
		size int64
	}{
		{"v4/A-to-B", labSrv4, false, size},
		{"v4/B-to-A", labSrv4, true, size},
		{"v6/A-to-B", labSrv6, false, size / 4},
		{"v6/B-to-A", labSrv6, true, size / 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := tcpTransfer(t, lab, c.srv, c.size, c.toA)
			t.Logf("%d MiB in %v: %.0f Mbit/s", c.size>>20, d.Round(time.Millisecond), float64(c.size)*8/d.Seconds()/1e6)
		})
	}
	st := lab.settledStats()
	t.Logf("forward %+v\nreturn %+v\nbudget %+v", st.Forward, st.Return, st.Budget)
	if lost(st.Forward.Drops) != 0 || st.Return.Drops.Total() != 0 {
		t.Errorf("the gateway dropped: forward %v, return %v", st.Forward.Drops, st.Return.Drops)
	}
	if st.Forward.Segments <= st.Forward.SuperPackets {
		t.Errorf("%d segments from %d super-packets: no GSO seen", st.Forward.Segments, st.Forward.SuperPackets)
	}
	if n := sum(st.Forward.SegmentsPerRead[:]); n != st.Forward.SuperPackets {
		t.Errorf("segments-per-read histogram counts %d super-packets, %d read", n, st.Forward.SuperPackets)
	}
	if n := sum(st.Forward.TxLatency[:]); n != st.Forward.Completed || st.Forward.TxLatencySum <= 0 {
		t.Errorf("latency histogram counts %d segments (sum %v), %d completed", n, st.Forward.TxLatencySum, st.Forward.Completed)
	}
	checkPort(t, st, port)
	if nicGRO {
		checkKernelGRO(t, st)
	} else {
		checkGRO(t, st.Return, gro == "gro=true")
	}
	t.Logf("segments per read %v, TX latency %v (mean %v)", st.Forward.SegmentsPerRead, st.Forward.TxLatency, st.Forward.TxLatencySum/time.Duration(max(st.Forward.Completed, 1)))
	if port.kind == PortPacket {
		checkHostFilter(t, lab, port.filter)
	}
}

// TestGatewaySmallMSS moves SHA-256-checked TCP streams at MSS 100 both
// ways, over IPv4 and IPv6, through each NIC port. The kernel hands the
// TUN super-packets of up to 655 segments (a TUN's gso_max_segs is
// 65535), which the gateway cuts and charges BurstSegments at a time:
// it drops none, and its histogram shows super-packets of more than 128
// segments, so the test took that path.
func TestGatewaySmallMSS(t *testing.T) { forPorts(t, gatewaySmallMSS) }

func gatewaySmallMSS(t *testing.T, port labPort) {
	const mss, size = 100, 16 << 20
	lab := newGwLab(t, port.config(GatewayConfig{}))
	for _, c := range []struct {
		name string
		srv  netip.Addr
		toA  bool
	}{{"v4/A-to-B", labSrv4, false}, {"v4/B-to-A", labSrv4, true}, {"v6/A-to-B", labSrv6, false}, {"v6/B-to-A", labSrv6, true}} {
		t.Run(c.name, func(t *testing.T) {
			d := netlab.TCPTransferMSS(t, lab.A, lab.B, netip.AddrPortFrom(c.srv, 5201), size, c.toA, mss)
			t.Logf("%d MiB at MSS %d in %v: %.0f Mbit/s", size>>20, mss, d.Round(time.Millisecond), float64(size)*8/d.Seconds()/1e6)
		})
	}
	st := lab.settledStats()
	t.Logf("forward %+v\nreturn %+v\nbudget %+v", st.Forward, st.Return, st.Budget)
	if lost(st.Forward.Drops) != 0 || st.Return.Drops.Total() != 0 {
		t.Errorf("the gateway dropped: forward %v, return %v", st.Forward.Drops, st.Return.Drops)
	}
	if n := st.Forward.SegmentsPerRead[len(pipeline.SegmentBounds)]; n == 0 {
		t.Errorf("segments per read %v: no super-packet of more than %d segments, the path is not tested", st.Forward.SegmentsPerRead, pipeline.SegmentBounds[len(pipeline.SegmentBounds)-1])
	}
}

// checkHostFilter checks that the gateway's AF_PACKET port attached its
// ingress program as asked (for auto: tcx, clsact without tcx), and that
// stopping the gateway leaves nothing on gw-a: no tcx program, no
// filter, no clsact qdisc.
func checkHostFilter(t *testing.T, lab *gwLab, want afpacket.HostFilter) {
	t.Helper()
	if want == afpacket.HostFilterAuto {
		want = afpacket.HostFilterTCX
		if netlab.Lacks(t, netlab.TCX) != nil {
			want = afpacket.HostFilterClsact
		}
	}
	if got, why := lab.g.Packet().HostFilter(); got != want {
		t.Errorf("host filter %v (%s), want %v", got, why, want)
	}
	if err := lab.stop(); err != nil {
		t.Fatalf("the gateway failed: %v", err)
	}
	if left := ingressLeft(t, lab.A); left != "" {
		t.Errorf("left on %s after the gateway stopped: %s", netlab.NICA, left)
	}
}

// ingressLeft describes what is on the ingress of gw-a in ns: tcx
// programs, a clsact or ingress qdisc, filters; "" when nothing.
func ingressLeft(t *testing.T, ns *netlab.NS) string {
	t.Helper()
	lnk := ns.LinkT(t, netlab.NICA)
	var left []string
	ns.Do(t, func() {
		if netlab.Lacks(t, netlab.TCX) != nil { // no tcx, no tcx programs
			return
		}
		r, err := link.QueryPrograms(link.QueryOptions{Target: lnk.Attrs().Index, Attach: ebpf.AttachTCXIngress})
		netlab.Must(t, err)
		for _, p := range r.Programs {
			left = append(left, fmt.Sprintf("tcx program %d", p.ID))
		}
	})
	qs, err := ns.Netlink().QdiscList(lnk)
	netlab.Must(t, err)
	for _, q := range qs {
		if q.Attrs().Parent == netlink.HANDLE_INGRESS {
			left = append(left, q.Type()+" qdisc")
		}
	}
	fs, err := ns.Netlink().FilterList(lnk, netlink.HANDLE_MIN_INGRESS)
	netlab.Must(t, err)
	for _, f := range fs {
		left = append(left, fmt.Sprintf("%s filter %+v", f.Type(), *f.Attrs()))
	}
	return strings.Join(left, ", ")
}

// checkPort checks that the port's counters are the port's, and for
// AF_PACKET that its GSO mode did what it says: whole super-packets to
// the NIC (TXSuper, Forward.Offloaded) only with offload or auto, partial
// checksums with partial, neither with full.
func checkPort(t *testing.T, st GatewayStats, port labPort) {
	t.Helper()
	if port.kind == PortXDP {
		if st.Port.Kind != PortXDP || len(st.Port.Sockets) == 0 || st.Port.Sent == 0 {
			t.Errorf("AF_XDP port: %v stats of %d sockets, %d sent", st.Port.Kind, len(st.Port.Sockets), st.Port.Sent)
		}
		return
	}
	if st.Port.Kind != PortPacket || len(st.Port.Sockets) == 0 {
		t.Fatalf("AF_PACKET port: %v stats of %d sockets", st.Port.Kind, len(st.Port.Sockets))
	}
	var tx, super, partial, refused, busy, rxSuper uint64
	for _, s := range st.Port.Sockets {
		tx, super, partial, refused = tx+s.TX, super+s.Counter("tx_super"), partial+s.Counter("tx_partial"), refused+s.Counter("tx_refused")
		busy, rxSuper = busy+s.Counter("tx_busy"), rxSuper+s.Counter("rx_super")
	}
	t.Logf("AF_PACKET %v: %d frames sent, %d whole super-packets (%d offloaded by the forwarder, %d of them not copied), %d with partial checksums, %d sends retried, %d refused, %d super-packets received",
		port.gso, tx, super, st.Forward.Offloaded, st.Forward.InPlace, partial, busy, refused, rxSuper)
	if tx != st.Port.Sent || st.Port.Sent == 0 {
		t.Errorf("the sockets sent %d frames, the gateway says %d", tx, st.Port.Sent)
	}
	if refused != 0 {
		t.Errorf("the kernel refused %d frames", refused)
	}
	for i, s := range st.Port.Sockets {
		t.Logf("socket %d: %+v", i, s)
	}
	switch port.gso {
	case afpacket.GSOModeAuto, afpacket.GSOModeOffload:
		if super == 0 || st.Forward.Offloaded == 0 {
			t.Errorf("%v: %d super-packets sent whole (%d offloaded): the NIC segmented nothing", port.gso, super, st.Forward.Offloaded)
		}
		if st.Forward.InPlace == 0 {
			t.Errorf("%v: of %d super-packets offloaded none left from the frame it was read into", port.gso, st.Forward.Offloaded)
		}
		if st.Forward.Segments <= tx {
			t.Errorf("%v: %d frames sent for %d segments", port.gso, tx, st.Forward.Segments)
		}
	case afpacket.GSOModePartial:
		if super != 0 || st.Forward.Offloaded != 0 || partial == 0 {
			t.Errorf("partial: %d super-packets sent whole (%d offloaded), %d with partial checksums", super, st.Forward.Offloaded, partial)
		}
	case afpacket.GSOModeFull:
		if super != 0 || st.Forward.Offloaded != 0 || partial != 0 {
			t.Errorf("full: %d super-packets sent whole (%d offloaded), %d with partial checksums", super, st.Forward.Offloaded, partial)
		}
	}
}

// checkKernelGRO checks the return path behind an AF_PACKET port on a
// NIC with GRO on: the kernel's super-packets went into the TUN as they
// were, none refused.
func checkKernelGRO(t *testing.T, st GatewayStats) {
	t.Helper()
	var rx, rxSuper uint64
	for _, s := range st.Port.Sockets {
		rx, rxSuper = rx+s.RX, rxSuper+s.Counter("rx_super")
	}
	r := st.Return
	t.Logf("return path: %d frames received, %d of them the kernel's super-packets; %d packets in %d writes, %d merged here",
		rx, rxSuper, r.Packets, r.Writes, r.SuperPackets)
	if rxSuper == 0 || r.Refused != 0 || r.Writes > r.Packets {
		t.Errorf("GRO on the NIC: %d super-packets received; %d writes for %d packets, %d refused", rxSuper, r.Writes, r.Packets, r.Refused)
	}
}

// checkGRO checks that GRO merged (fewer writes than packets; how many
// fewer depends on how many packets each wakeup finds) or, off, that
// every packet went in a write of its own.
func checkGRO(t *testing.T, r pipeline.ReturnStats, on bool) {
	t.Helper()
	t.Logf("return path: %d packets in %d writes (%.2f writes/packet), %d super-packets, GRO %+v",
		r.Packets, r.Writes, float64(r.Writes)/float64(max(r.Packets, 1)), r.SuperPackets, r.GRO)
	switch {
	case on && (r.SuperPackets == 0 || r.Writes >= r.Packets):
		t.Errorf("GRO on: %d writes for %d packets, %d super-packets", r.Writes, r.Packets, r.SuperPackets)
	case !on && r.Writes != r.Packets:
		t.Errorf("GRO off: %d writes for %d packets", r.Writes, r.Packets)
	case r.Refused != 0:
		t.Errorf("the TUN refused %d super-packets", r.Refused)
	}
}

// TestGatewayGROUDP sends UDP datagrams of several sizes from B to the
// application in A, through the return path with GRO, behind each port:
// every datagram arrives once, in order, with its own length (the
// boundaries survive the merge into USO super-packets and the kernel's
// cut).
func TestGatewayGROUDP(t *testing.T) { forPorts(t, gatewayGROUDP) }

func gatewayGROUDP(t *testing.T, port labPort) {
	// Merged datagrams go to the TUN as USO super-packets.
	netlab.SkipWithout(t, netlab.VirtioNetUSO)
	lab := newGwLab(t, port.config(GatewayConfig{}))
	for _, c := range []struct {
		name string
		app  netip.Addr
	}{{"v4", netlab.App4}, {"v6", netlab.App6}} {
		t.Run(c.name, func(t *testing.T) { udpToA(t, lab, c.app) })
	}
	st := lab.g.Stats().Return
	checkGRO(t, st, true)
	if st.GRO.Merged == 0 {
		t.Error("no UDP datagram was merged")
	}
}

// udpToA sends runs of equal-sized datagrams (sizes cycling, each run
// ending with a shorter one) from B to app in A with sequence numbers,
// and checks what A receives. UDP has no flow control and the return
// path no backpressure (a full RX ring drops): the sender keeps at most
// a window of datagrams ahead of the receiver, enough for the return
// path to see batches to merge, so that a machine busy with other work
// slows the test down instead of failing it.
func udpToA(t *testing.T, lab *gwLab, app netip.Addr) {
	const n, port, window = 20000, 9100, 1024
	sizeOf := func(i int) int { // runs of 15 equal datagrams, then a short one
		if i%16 == 15 {
			return 100 + i%200
		}
		return []int{1200, 512, 1400, 64}[i/16%4]
	}
	var pc net.PacketConn
	lab.A.Do(t, func() {
		var err error
		if pc, err = net.ListenPacket("udp", netip.AddrPortFrom(app, port).String()); err != nil {
			t.Fatal(err)
		}
	})
	defer pc.Close()
	forceRcvBuf(t, pc.(*net.UDPConn), 64<<20)
	var c net.Conn
	lab.B.Do(t, func() {
		var err error
		if c, err = net.Dial("udp", netip.AddrPortFrom(app, port).String()); err != nil {
			t.Fatal(err)
		}
	})
	defer c.Close()

	var got atomic.Int64 // datagrams received in order
	failed := make(chan error, 1)
	go func() {
		buf := make([]byte, 2048)
		for next := 0; next < n; next++ {
			pc.SetReadDeadline(time.Now().Add(2 * time.Second))
			m, _, err := pc.ReadFrom(buf)
			if err != nil {
				failed <- fmt.Errorf("after %d of %d datagrams: %w", next, n, err)
				return
			}
			if seq := int(binary.BigEndian.Uint32(buf)); seq != next || m != sizeOf(seq) {
				failed <- fmt.Errorf("datagram %d (%d bytes), want %d (%d bytes)", seq, m, next, sizeOf(next))
				return
			}
			got.Store(int64(next + 1))
		}
		failed <- nil
	}()
	buf := make([]byte, 2048)
send:
	for i := range n {
		for int64(i)-got.Load() >= window {
			if len(failed) > 0 {
				break send // the receiver gave up
			}
			time.Sleep(100 * time.Microsecond)
		}
		binary.BigEndian.PutUint32(buf, uint32(i))
		if _, err := c.Write(buf[:sizeOf(i)]); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if err := <-failed; err != nil {
		st := lab.g.Stats()
		t.Errorf("return path %+v; %v port %+v", st.Return, st.Port.Kind, st.Port.Sockets)
		t.Fatal(err)
	}
}

func sum(v []uint64) uint64 {
	var n uint64
	for _, x := range v {
		n += x
	}
	return n
}

// udpRun is one UDP_SEGMENT flood through the gateway.
type udpRun struct {
	sends, enobufs, received, lost int
	elapsed                        time.Duration
	single                         bool // one datagram per send (a kernel without TUN USO)
}

// udpFlood sends sends super-packets of segs×1400-byte datagrams (UDP_SEGMENT,
// blocking socket, IP_RECVERR) with sequence numbers from A to B, resending
// what the kernel refuses with ENOBUFS, and counts what B receives. Where
// the TUN has no USO it sends the same datagrams one at a time.
func udpFlood(t testing.TB, lab *gwLab, sends, segs int) udpRun {
	t.Helper()
	const size, port = 1400, 9000
	_, pc := lab.listen(t, "udp", labSrv4, port)
	defer pc.Close()
	forceRcvBuf(t, pc.(*net.UDPConn), 64<<20)
	seen := make([]bool, sends*segs)
	got := make(chan int, 1)
	go func() {
		buf, n := make([]byte, 2048), 0
		for n < len(seen) {
			pc.SetReadDeadline(time.Now().Add(2 * time.Second))
			m, _, err := pc.ReadFrom(buf)
			if err != nil {
				break
			}
			if seq := binary.BigEndian.Uint64(buf); m == size && seq < uint64(len(seen)) && !seen[seq] {
				seen[seq] = true
				n++
			}
		}
		got <- n
	}()
	conn := lab.dial(t, "udp", labSrv4, port).(*net.UDPConn)
	defer conn.Close()
	setSockopt(t, conn, unix.IPPROTO_IP, unix.IP_RECVERR, 1)
	var r udpRun
	if err := netlab.Lacks(t, netlab.VirtioNetUSO); err != nil {
		// Without USO the kernel cuts a UDP_SEGMENT send before the
		// TUN, and the drops of its segments on a full TUN ring do not
		// reach the sender: only single datagrams are held back.
		t.Logf("one datagram per send: %v", err)
		sends, segs = sends*segs, 1
		r.single = true
	} else {
		setSockopt(t, conn, unix.IPPROTO_UDP, unix.UDP_SEGMENT, size)
	}
	// The server's next hop resolved first: backpressure is lossless once
	// it is known; while it resolves, its frames wait in a bounded queue,
	// as the kernel's arp_queue, and a flood's excess is dropped.
	netlab.Echo(t, lab.B, lab.A, labSrv4, 5*time.Second)
	buf := make([]byte, segs*size)
	start := time.Now()
	for i := range sends {
		for j := range segs {
			binary.BigEndian.PutUint64(buf[j*size:], uint64(i*segs+j))
		}
		for {
			_, err := conn.Write(buf)
			if err == nil {
				break
			}
			if !errors.Is(err, syscall.ENOBUFS) {
				t.Fatalf("send %d: %v", i, err)
			}
			r.enobufs++
			time.Sleep(100 * time.Microsecond)
		}
		r.sends++
	}
	r.received = <-got
	r.elapsed = time.Since(start)
	r.lost = len(seen) - r.received
	return r
}

func setSockopt(t testing.TB, c *net.UDPConn, level, opt, v int) {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), level, opt, v) })
	if serr != nil {
		t.Fatalf("setsockopt %d/%d: %v", level, opt, serr)
	}
}

func forceRcvBuf(t testing.TB, c *net.UDPConn, n int) {
	setSockopt(t, c, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n)
}

// TestGatewayUDPBackpressure sends UDP_SEGMENT super-packets as fast as a
// blocking socket allows through a TX path paced at 200 Mbit/s. With
// backpressure every datagram arrives and the gateway drops nothing: the
// budget stops the TUN reader, the TUN ring fills and the kernel refuses
// the sender's next super-packet (ENOBUFS) until there is room; the
// sender waits and sends it again. (The kernel's TUN driver releases a
// packet's socket charge when it rings it, so the sender's send buffer
// never fills and a blocking send does not block.) Without backpressure
// the queue in front of the NIC drops, and datagrams are lost.
func TestGatewayUDPBackpressure(t *testing.T) { forPorts(t, gatewayUDPBackpressure) }

func gatewayUDPBackpressure(t *testing.T, port labPort) {
	const rate, sends, segs = 200e6, 300, 40
	t.Run("on", func(t *testing.T) {
		lab := newGwLab(t, port.config(GatewayConfig{TUN: TUNOptions{TxQueueLen: 32}, DisableGRO: true, TxRate: rate}))
		r := udpFlood(t, lab, sends, segs)
		st := lab.g.Stats()
		t.Logf("%+v; gateway drops %v, budget stalls %d (%v), peak %d of %d, %d super-packets sent whole (%d in place)",
			r, st.Forward.Drops, st.Budget.Stalls, st.Budget.StallTime, st.Budget.Peak, st.Budget.Limit, st.Forward.Offloaded, st.Forward.InPlace)
		if r.lost != 0 || lost(st.Forward.Drops) != 0 {
			t.Errorf("lost %d datagrams, the gateway dropped %v", r.lost, st.Forward.Drops)
		}
		if port.kind == PortPacket && !r.single && st.Forward.InPlace == 0 { // single datagrams (no TUN USO) are not super-packets
			t.Errorf("of %d super-packets sent whole none left from the frame it was read into", st.Forward.Offloaded)
		}
		if r.enobufs == 0 || st.Budget.Stalls == 0 {
			t.Errorf("the sender was never held back: %d ENOBUFS, %d budget stalls", r.enobufs, st.Budget.Stalls)
		}
	})
	t.Run("off", func(t *testing.T) {
		lab := newGwLab(t, port.config(GatewayConfig{DisableBackpressure: true, DisableGRO: true, QueueLen: 256, TxRate: rate}))
		r := udpFlood(t, lab, sends, segs)
		st := lab.g.Stats()
		t.Logf("%+v; gateway drops %v", r, st.Forward.Drops)
		if r.lost == 0 || st.Forward.Drops.Total() == 0 {
			t.Errorf("no collapse without backpressure: lost %d, gateway drops %v", r.lost, st.Forward.Drops)
		}
	})
}

// TestGatewayShutdown checks, behind each port, that Close leaves
// nothing behind: no XDP program and no tcx program on gw-a, no AF_XDP
// or AF_PACKET socket (neither among this process's file descriptors
// nor in A's own socket counts), no BPF object, no TUN device and, once
// the test has cleaned up, no namespace; and that a second gateway
// starts on the same devices.
func TestGatewayShutdown(t *testing.T) {
	netlab.RequireRoot(t)
	for _, p := range labPorts {
		var names []string
		t.Run(p.name, func(t *testing.T) { names = gatewayShutdown(t, p) })
		for _, name := range names {
			if _, err := os.Stat("/run/netns/" + name); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: namespace %s left behind (%v)", p.name, name, err)
			}
		}
	}
}

// gatewayShutdown runs and closes a gateway with port and returns the
// names of its namespaces.
func gatewayShutdown(t *testing.T, port labPort) []string {
	const budget = 1 << 20 // a fixed budget sizes the TX frames
	fds := ownObjects(t)
	lab := newGwLab(t, port.config(GatewayConfig{DisableGRO: true, Budget: budget}))
	names := []string{lab.A.Name, lab.B.Name}
	tcpTransfer(t, lab, labSrv4, 1<<20, false)
	switch port.kind {
	case PortXDP:
		if got, want := lab.g.XDP().Sockets()[0].NumFrames(), UMEMFrames(budget); got != want {
			t.Errorf("%d UMEM frames for a %d-byte budget, want %d", got, budget, want)
		}
	case PortPacket:
		if got, want := lab.g.Packet().Sockets()[0].Frames(), packetFrames(budget); got != want {
			t.Errorf("%d TX frames for a %d-byte budget, want %d", got, budget, want)
		}
	}
	if st := lab.g.Stats().Budget; st.Limit != budget {
		t.Errorf("budget limit %d, want %d", st.Limit, budget)
	}

	// While it runs, the checks below see what the port holds.
	running := nicState(t, lab)
	open := ownObjects(t)
	t.Logf("running: %+v; this process holds %v, before the gateway %v", running, open, fds)
	switch port.kind {
	case PortXDP:
		if !running.xdp || running.xskSockets == 0 || open["AF_XDP"] == 0 {
			t.Errorf("running with AF_XDP: %+v, this process holds %v", running, open)
		}
	case PortPacket:
		if running.ingress != 1 || running.packetSockets == 0 || open["AF_PACKET"] == 0 {
			t.Errorf("running with AF_PACKET: %+v, this process holds %v", running, open)
		}
	}

	if err := lab.stop(); err != nil {
		t.Fatal(err)
	}
	checkClosed(t, lab, fds, "after Close")
	if _, err := lab.A.Netlink().LinkByName(labTUN); !errors.As(err, new(netlink.LinkNotFoundError)) {
		t.Errorf("%s still there after Close: %v", labTUN, err)
	}
	lab.A.Do(t, func() {
		g, err := OpenGateway(port.config(GatewayConfig{TUN: TUNOptions{Name: labTUN}, NIC: netlab.NICA, Routes: netlab.AppRoutes, DisableGRO: true}))
		if err != nil {
			t.Fatalf("second start: %v", err)
		}
		if g.Port() != port.kind {
			t.Errorf("second start: port %v, want %v", g.Port(), port.kind)
		}
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
	})
	checkClosed(t, lab, fds, "after the second gateway's Close")
	return names
}

// nicView is what the kernel shows of a port on gw-a and in A.
type nicView struct {
	xdp                       bool // an XDP program is attached to gw-a
	ingress                   int  // programs on gw-a's ingress: tcx programs, cls_bpf filters
	xskSockets, packetSockets int  // AF_XDP and AF_PACKET sockets open in A (/proc/net/protocols)
}

// nicState reads gw-a's programs and A's socket counts.
func nicState(t *testing.T, lab *gwLab) nicView {
	t.Helper()
	var v nicView
	l := lab.A.LinkT(t, netlab.NICA)
	v.xdp = l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached
	fs, err := lab.A.Netlink().FilterList(l, netlink.HANDLE_MIN_INGRESS)
	netlab.Must(t, err)
	for _, f := range fs {
		if _, ok := f.(*netlink.BpfFilter); ok {
			v.ingress++
		}
	}
	lab.A.Do(t, func() {
		if netlab.Lacks(t, netlab.TCX) == nil { // a kernel without tcx has none
			r, err := link.QueryPrograms(link.QueryOptions{Target: l.Attrs().Index, Attach: ebpf.AttachTCXIngress})
			if err != nil {
				t.Fatalf("tcx ingress programs of %s: %v", netlab.NICA, err)
			}
			v.ingress += len(r.Programs)
		}
		// The socket counts of the namespace of this (locked) thread.
		b, err := os.ReadFile("/proc/thread-self/net/protocols")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) < 3 {
				continue
			}
			var n int
			fmt.Sscan(f[2], &n)
			switch f[0] {
			case "XDP":
				v.xskSockets += n
			case "PACKET":
				v.packetSockets += n
			}
		}
	})
	return v
}

// ownObjects counts this process's AF_XDP and AF_PACKET sockets (by
// SO_DOMAIN) and BPF programs, maps and links among its file
// descriptors.
func ownObjects(t *testing.T) map[string]int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue // the directory's own descriptor, gone
		}
		switch {
		case strings.HasPrefix(target, "anon_inode:bpf"):
			n["BPF"]++
		case strings.HasPrefix(target, "socket:"):
			fd, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			switch d, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN); d {
			case unix.AF_XDP:
				n["AF_XDP"]++
			case unix.AF_PACKET:
				n["AF_PACKET"]++
			}
		}
	}
	return n
}

// checkClosed checks that no port is left: no program on gw-a, no
// AF_XDP or AF_PACKET socket in A or in this process, no more BPF
// objects than before (fds, from ownObjects).
func checkClosed(t *testing.T, lab *gwLab, fds map[string]int, when string) {
	t.Helper()
	if v := nicState(t, lab); v != (nicView{}) {
		t.Errorf("%s: %s still has %+v", when, netlab.NICA, v)
	}
	now := ownObjects(t)
	if now["AF_XDP"] != 0 || now["AF_PACKET"] != 0 || now["BPF"] > fds["BPF"] {
		t.Errorf("%s: this process holds %v, before the gateway %v", when, now, fds)
	}
}

// TestGatewayIperf3 runs iperf3 TCP (both ways) and UDP through the
// gateway, behind each port, and pings the NIC's own addresses
// meanwhile: ARP, ND and traffic for the host itself still reach the
// kernel.
func TestGatewayIperf3(t *testing.T) {
	if _, err := exec.LookPath("iperf3"); err != nil {
		t.Skip("iperf3 not installed (apt-get install iperf3)")
	}
	forPorts(t, gatewayIperf3)
}

func gatewayIperf3(t *testing.T, port labPort) {
	lab := newGwLab(t, port.config(GatewayConfig{}))
	for _, c := range []struct {
		name string
		args []string
	}{
		{"tcp", []string{"-t", "1"}},
		{"tcp-reverse", []string{"-t", "1", "-R"}},
		{"tcp6", []string{"-t", "1", "-6"}},
		{"udp", []string{"-t", "1", "-u", "-b", "300M", "-l", "1400"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := labSrv4.String()
			if c.name == "tcp6" {
				srv = labSrv6.String()
			}
			server := exec.Command("iperf3", "-s", "-1", "-B", srv, "-p", "5202")
			if err := lab.B.Start(server); err != nil {
				t.Fatal(err)
			}
			defer server.Wait()
			defer server.Process.Kill()
			out := iperf3Client(t, lab, append([]string{"-c", srv, "-p", "5202", "-J"}, c.args...))
			t.Logf("%.0f Mbit/s received, %d retransmits, %.2f%% lost", out.End.SumReceived.BitsPerSecond/1e6, out.End.SumSent.Retransmits, out.End.Sum.LostPercent)
		})
	}
	t.Run("ping", func(t *testing.T) {
		if _, err := exec.LookPath("ping"); err != nil {
			t.Skip("ping not installed (apt-get install iputils-ping)")
		}
		for _, dst := range []string{netlab.NICA4.String(), netlab.NICA6.String()} {
			ping := exec.Command("ping", "-c", "2", "-i", "0.2", "-W", "2", dst)
			var out []byte
			err := lab.B.Run(func() (err error) { out, err = ping.CombinedOutput(); return err })
			if err != nil {
				t.Fatalf("ping %s: %v\n%s", dst, err, out)
			}
		}
	})
}

type iperf3Result struct {
	Error string
	End   struct {
		SumSent struct {
			Retransmits int
		} `json:"sum_sent"`
		SumReceived struct {
			BitsPerSecond float64 `json:"bits_per_second"`
		} `json:"sum_received"`
		Sum struct {
			LostPercent float64 `json:"lost_percent"`
		}
	}
}

// iperf3Client runs the iperf3 client in A, retrying while the server in B
// is not listening yet, and fails the test on any error.
func iperf3Client(t *testing.T, lab *gwLab, args []string) iperf3Result {
	t.Helper()
	var r iperf3Result
	for try := 0; ; try++ {
		var out []byte
		var err error
		netlab.Must(t, lab.A.Run(func() error { out, err = exec.Command("iperf3", args...).Output(); return nil }))
		r = iperf3Result{}
		if jerr := json.Unmarshal(out, &r); jerr != nil {
			t.Fatalf("iperf3: %v, output %q: %v", err, out, jerr)
		}
		if strings.Contains(r.Error, "connect") && try < 20 {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if err != nil || r.Error != "" {
			t.Fatalf("iperf3 %v: %v: %s", args, err, r.Error)
		}
		return r
	}
}

// BenchmarkGatewayTCP measures one TCP stream from A to B through the
// gateway's AF_XDP port, with TUN offloads (gsoplane segments super-packets) and
// without (the kernel segments before the TUN: one packet per read), in
// the same run.
func BenchmarkGatewayTCP(b *testing.B) {
	for _, c := range []struct {
		name    string
		offload bool
	}{{"gso", true}, {"no-gso", false}} {
		b.Run(c.name, func(b *testing.B) {
			lab := newGwLab(b, GatewayConfig{TUN: TUNOptions{DisableOffload: !c.offload}, Port: PortXDP, DisableGRO: true})
			ln, _ := lab.listen(b, "tcp", labSrv4, 5201)
			defer ln.Close()
			conn := lab.dial(b, "tcp", labSrv4, 5201)
			peer, err := ln.Accept()
			if err != nil {
				b.Fatal(err)
			}
			drained := make(chan error, 1)
			go func() { _, err := io.Copy(io.Discard, peer); drained <- err }()
			chunk := make([]byte, 1<<20)
			rand.NewChaCha8([32]byte{1, 2}).Read(chunk)
			b.SetBytes(int64(len(chunk)))
			for b.Loop() {
				if _, err := conn.Write(chunk); err != nil {
					b.Fatal(err)
				}
			}
			conn.(*net.TCPConn).CloseWrite()
			if err := <-drained; err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			conn.Close()
			peer.Close()
			st := lab.g.Stats()
			b.ReportMetric(float64(st.Forward.Segments)/float64(max(st.Forward.SuperPackets, 1)), "segs/read")
		})
	}
}
