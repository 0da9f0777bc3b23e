package dataplane

import (
	"context"
	"crypto/sha256"
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
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/dataplane/tun"
	"github.com/gsoplane/gsoplane/internal/netlab"
)

// The reference topology (netlab.Topology): the gateway and an
// application in netns A, a server in netns B. A routes the server's
// prefixes into the TUN device; the gateway sends them out of gw-a as
// AF_XDP frames. B routes the application's prefixes back to gw-a, where
// the XDP program hands them to the gateway, which writes them into the
// TUN device.
const labTUN = "gsotun0"

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
// (its names and routes are filled in).
func newGwLab(t testing.TB, cfg GatewayConfig) *gwLab {
	t.Helper()
	lab := &gwLab{Topology: netlab.NewTopologyT(t, "gw")}
	cfg.TUN.Name, cfg.NIC, cfg.Routes = labTUN, netlab.NICA, netlab.AppRoutes
	lab.A.Do(t, func() {
		g, err := OpenGateway(cfg)
		if err != nil {
			t.Fatalf("OpenGateway: %v", err)
		}
		lab.g = g
	})
	netlab.Must(t, lab.TUNUp(labTUN))

	ctx, cancel := context.WithCancel(context.Background())
	lab.done = make(chan error, 1)
	go func() { lab.done <- lab.g.Run(ctx) }()
	stopped := false
	lab.stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		var err error
		select {
		case err = <-lab.done:
		case <-time.After(10 * time.Second):
			err = errors.New("Run did not return")
		}
		return errors.Join(err, lab.g.Close())
	}
	t.Cleanup(func() {
		if err := lab.stop(); err != nil {
			t.Errorf("gateway: %v", err)
		}
	})
	return lab
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

// stream is a deterministic pseudo-random byte stream of n bytes.
type stream struct {
	r *rand.PCG
	n int64
}

func (s *stream) Read(p []byte) (int, error) {
	if s.n <= 0 {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), s.n)&^7]
	if len(p) == 0 {
		return 0, io.ErrShortBuffer
	}
	for i := 0; i < len(p); i += 8 {
		binary.LittleEndian.PutUint64(p[i:], s.r.Uint64())
	}
	s.n -= int64(len(p))
	return len(p), nil
}

// tcpTransfer sends size bytes of a deterministic stream from A to B, or
// from B to A, and checks the SHA-256 at the receiver.
func tcpTransfer(t testing.TB, lab *gwLab, srv netip.Addr, size int64, toA bool) time.Duration {
	t.Helper()
	ln, _ := lab.listen(t, "tcp", srv, 5201)
	defer ln.Close()
	type result struct {
		sum [32]byte
		err error
	}
	res := make(chan result, 1)
	conn := lab.dial(t, "tcp", srv, 5201)
	defer conn.Close()
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	sender, receiver := net.Conn(conn), peer
	if toA {
		sender, receiver = peer, conn
	}
	start := time.Now()
	go func() {
		h := sha256.New()
		_, err := io.Copy(h, receiver)
		res <- result{[32]byte(h.Sum(nil)), err}
	}()
	h := sha256.New()
	src := &stream{r: rand.NewPCG(uint64(size), 7), n: size}
	if _, err := io.CopyBuffer(io.MultiWriter(sender, h), src, make([]byte, 256<<10)); err != nil {
		t.Fatalf("send: %v", err)
	}
	sender.(*net.TCPConn).CloseWrite()
	var r result
	select {
	case r = <-res:
	case <-time.After(2 * time.Minute):
		t.Fatal("receiver timed out")
	}
	if r.err != nil || r.sum != [32]byte(h.Sum(nil)) {
		t.Fatalf("receiver: SHA-256 %x, sent %x, err %v", r.sum, h.Sum(nil), r.err)
	}
	return time.Since(start)
}

// lost counts the drops of packets that were to go through: all but the
// host's own link-local traffic into the TUN (MLD reports, router
// solicitations), which a router does not forward.
func lost(d pipeline.Drops) uint64 { return d.Total() - d[pipeline.DropNotRouted] }

// TestGatewayTCP moves SHA-256-checked TCP streams both ways, over IPv4
// and IPv6, with GRO on the return path and without.
func TestGatewayTCP(t *testing.T) {
	for _, gro := range []bool{true, false} {
		t.Run(fmt.Sprintf("gro=%v", gro), func(t *testing.T) { gatewayTCP(t, gro) })
	}
}

func gatewayTCP(t *testing.T, gro bool) {
	lab := newGwLab(t, GatewayConfig{TUN: tun.Config{Offload: true}, Backpressure: true, GRO: gro})
	const size = 128 << 20
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
	st := lab.g.Stats()
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
	checkGRO(t, st.Return, gro)
	t.Logf("segments per read %v, TX latency %v (mean %v)", st.Forward.SegmentsPerRead, st.Forward.TxLatency, st.Forward.TxLatencySum/time.Duration(max(st.Forward.Completed, 1)))
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
// application in A, through the return path with GRO: every datagram
// arrives once, in order, with its own length (the boundaries survive
// the merge into USO super-packets and the kernel's cut).
func TestGatewayGROUDP(t *testing.T) {
	lab := newGwLab(t, GatewayConfig{TUN: tun.Config{Offload: true}, Backpressure: true, GRO: true})
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
// and checks what A receives.
func udpToA(t *testing.T, lab *gwLab, app netip.Addr) {
	const n, port = 20000, 9100
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
	buf := make([]byte, 2048)
	for i := range n {
		binary.BigEndian.PutUint32(buf, uint32(i))
		if _, err := c.Write(buf[:sizeOf(i)]); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if i%256 == 255 {
			time.Sleep(200 * time.Microsecond) // stay within A's socket buffer
		}
	}
	next := 0
	for next < n {
		pc.SetReadDeadline(time.Now().Add(2 * time.Second))
		m, _, err := pc.ReadFrom(buf)
		if err != nil {
			t.Fatalf("after %d of %d datagrams: %v", next, n, err)
		}
		seq := int(binary.BigEndian.Uint32(buf))
		if seq != next || m != sizeOf(seq) {
			t.Fatalf("datagram %d (%d bytes), want %d (%d bytes)", seq, m, next, sizeOf(next))
		}
		next++
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
}

// udpFlood sends sends super-packets of segs×1400-byte datagrams (UDP_SEGMENT,
// blocking socket, IP_RECVERR) with sequence numbers from A to B, resending
// what the kernel refuses with ENOBUFS, and counts what B receives.
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
	setSockopt(t, conn, unix.IPPROTO_UDP, unix.UDP_SEGMENT, size)
	var r udpRun
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
func TestGatewayUDPBackpressure(t *testing.T) {
	const rate, sends, segs = 200e6, 300, 40
	t.Run("on", func(t *testing.T) {
		lab := newGwLab(t, GatewayConfig{TUN: tun.Config{Offload: true, TxQueueLen: 32}, Backpressure: true, TxRate: rate})
		r := udpFlood(t, lab, sends, segs)
		st := lab.g.Stats()
		t.Logf("%+v; gateway drops %v, budget stalls %d (%v), peak %d of %d", r, st.Forward.Drops, st.Budget.Stalls, st.Budget.StallTime, st.Budget.Peak, st.Budget.Limit)
		if r.lost != 0 || lost(st.Forward.Drops) != 0 {
			t.Errorf("lost %d datagrams, the gateway dropped %v", r.lost, st.Forward.Drops)
		}
		if r.enobufs == 0 || st.Budget.Stalls == 0 {
			t.Errorf("the sender was never held back: %d ENOBUFS, %d budget stalls", r.enobufs, st.Budget.Stalls)
		}
	})
	t.Run("off", func(t *testing.T) {
		lab := newGwLab(t, GatewayConfig{TUN: tun.Config{Offload: true}, Backpressure: false, QueueLen: 256, TxRate: rate})
		r := udpFlood(t, lab, sends, segs)
		st := lab.g.Stats()
		t.Logf("%+v; gateway drops %v", r, st.Forward.Drops)
		if r.lost == 0 || st.Forward.Drops.Total() == 0 {
			t.Errorf("no collapse without backpressure: lost %d, gateway drops %v", r.lost, st.Forward.Drops)
		}
	})
}

// TestGatewayShutdown checks that Close leaves neither the XDP program
// nor the TUN device behind, and that a second gateway starts.
func TestGatewayShutdown(t *testing.T) {
	const budget = 1 << 20 // a fixed budget sizes the UMEM
	lab := newGwLab(t, GatewayConfig{TUN: tun.Config{Offload: true}, Backpressure: true, Budget: budget})
	tcpTransfer(t, lab, labSrv4, 1<<20, false)
	if got, want := lab.g.XDP().Sockets()[0].NumFrames(), UMEMFrames(budget); got != want {
		t.Errorf("%d UMEM frames for a %d-byte budget, want %d", got, budget, want)
	}
	if st := lab.g.Stats().Budget; st.Limit != budget {
		t.Errorf("budget limit %d, want %d", st.Limit, budget)
	}
	if err := lab.stop(); err != nil {
		t.Fatal(err)
	}
	nl := lab.A.Netlink()
	if l, err := nl.LinkByName(netlab.NICA); err != nil || (l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached) {
		t.Errorf("%s after Close: %v, XDP %+v", netlab.NICA, err, l.Attrs().Xdp)
	}
	if _, err := nl.LinkByName(labTUN); !errors.As(err, new(netlink.LinkNotFoundError)) {
		t.Errorf("%s still there after Close: %v", labTUN, err)
	}
	lab.A.Do(t, func() {
		g, err := OpenGateway(GatewayConfig{TUN: tun.Config{Name: labTUN, Offload: true}, NIC: netlab.NICA, Routes: netlab.AppRoutes, Backpressure: true})
		if err != nil {
			t.Fatalf("second start: %v", err)
		}
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestGatewayIperf3 runs iperf3 TCP (both ways) and UDP through the
// gateway, and pings the NIC's own addresses meanwhile: ARP, ND and
// traffic for the host itself still reach the kernel.
func TestGatewayIperf3(t *testing.T) {
	if _, err := exec.LookPath("iperf3"); err != nil {
		t.Skip("iperf3 not installed (apt-get install iperf3)")
	}
	lab := newGwLab(t, GatewayConfig{TUN: tun.Config{Offload: true}, Backpressure: true, GRO: true})
	for _, c := range []struct {
		name string
		args []string
	}{
		{"tcp", []string{"-t", "2"}},
		{"tcp-reverse", []string{"-t", "2", "-R"}},
		{"tcp6", []string{"-t", "1", "-6"}},
		{"udp", []string{"-t", "2", "-u", "-b", "300M", "-l", "1400"}},
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
// gateway, with TUN offloads (gsoplane segments super-packets) and
// without (the kernel segments before the TUN: one packet per read), in
// the same run.
func BenchmarkGatewayTCP(b *testing.B) {
	for _, c := range []struct {
		name    string
		offload bool
	}{{"gso", true}, {"no-gso", false}} {
		b.Run(c.name, func(b *testing.B) {
			lab := newGwLab(b, GatewayConfig{TUN: tun.Config{Offload: c.offload}, Backpressure: true})
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
			(&stream{r: rand.NewPCG(1, 2), n: int64(len(chunk))}).Read(chunk)
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
