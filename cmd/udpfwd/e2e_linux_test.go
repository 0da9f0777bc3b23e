package main

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"

	"golang.org/x/sys/unix"
)

// TestEndToEnd drives the built binary as an operator would, with each
// NIC port: udpfwd in namespace A (dropping to user nobody), a
// SHA-256-checked TCP stream (IPv4 and IPv6) and a lossless UDP_SEGMENT
// stream through it to B, /metrics checked against what was sent,
// capabilities checked on every thread, then SIGTERM: exit 0 within
// -drain-timeout, nothing left behind.
func TestEndToEnd(t *testing.T) {
	for _, port := range []string{"xdp", "packet"} {
		t.Run(port, func(t *testing.T) {
			requireRoot(t)
			a, b := newLab(t)
			endToEnd(t, port, a, b)
		})
	}
}

// TestEndToEndNIC is TestEndToEnd on two real NICs joined by a wire
// (netlab.NICsEnv: the virtio-net NICs of make test-kernels' guests) in
// place of the veth pair, with the port udpfwd chooses itself too.
func TestEndToEndNIC(t *testing.T) {
	for _, port := range []string{"auto", "xdp", "packet"} {
		t.Run(port, func(t *testing.T) {
			tp := netlab.NewTopologyOnNICsT(t, "udpfwd-nic")
			endToEnd(t, port, tp.A, tp.B)
		})
	}
}

// endToEnd runs udpfwd with the port in the lab a, b (port "auto": the
// one udpfwd chooses).
func endToEnd(t *testing.T, port string, a, b *netlab.NS) {
	args := append([]string{"-port", port, "-v", "-pprof", "-budget", "8M", "-drain-timeout", "2s", "-log-format", "json"}, labArgs...)
	if _, err := user.Lookup("nobody"); err == nil {
		args = append(args, "-user", "nobody")
	}
	p := startUdpfwd(t, a, labEnv, args...)
	waitReady(t, p, a)
	if port == "auto" {
		port = chosenPort(t, p)
	}
	checkPrivileges(t, p.cmd.Process.Pid)
	if code := pprofStatus(t, a); code != 200 {
		t.Errorf("-pprof: /debug/pprof/ answers %d", code)
	}

	const tcpBytes, v6Bytes = 64 << 20, 4 << 20
	tcpStream(t, a, b, net.JoinHostPort(srv4, "5201"), tcpBytes)
	tcpStream(t, a, b, net.JoinHostPort(srv6, "5202"), v6Bytes)
	tcpStream(t, b, a, net.JoinHostPort(netlab.App4.String(), "5203"), v6Bytes) // back, from the NIC to the TUN
	const sends, segs, size = 250, 40, 1400
	enobufs := udpStream(t, a, b, sends, segs, size)
	t.Logf("UDP: %d datagrams, %d ENOBUFS resends", sends*segs, enobufs)

	m := scrapeIdle(t, a, "127.0.0.1:9464")
	checkMetrics(t, m, port, tcpBytes+v6Bytes, sends*segs, size)
	if !p.waitOutput(`"msg":"stats","tun_to_nic":{"super_per_s":`, 3*time.Second) {
		t.Errorf("-v printed no stats line:\n%s", p.out.String())
	}

	start := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(4 * time.Second); code != 0 {
		t.Fatalf("after SIGTERM: exit %d after %v, want 0 within the 2s drain timeout:\n%s", code, time.Since(start), p.out.String())
	}
	t.Logf("stopped %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	if left := leftovers(t, a); left != "" {
		t.Errorf("left behind: %s", left)
	}
	for _, want := range []string{`"msg":"udpfwd started"`, `"port":"` + port + `"`, `"capabilities":"CAP_NET_ADMIN"`, `"version":"`, `"msg":"udpfwd stopped"`} {
		if !strings.Contains(p.out.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, p.out.String())
		}
	}
}

// chosenPort is the port ("xdp", "packet") udpfwd says it started with.
func chosenPort(t *testing.T, p *proc) string {
	t.Helper()
	for _, line := range strings.Split(p.out.String(), "\n") {
		if !strings.Contains(line, `"msg":"udpfwd started"`) {
			continue
		}
		var m struct{ Port string }
		if err := json.Unmarshal([]byte(line), &m); err != nil || m.Port == "" {
			t.Fatalf("no port in %q: %v", line, err)
		}
		t.Logf("-port auto chose %s", m.Port)
		return m.Port
	}
	t.Fatalf("no start line:\n%s", p.out.String())
	return ""
}

// checkPrivileges checks that every thread of pid kept only CAP_NET_ADMIN
// (and runs as nobody if that user exists).
func checkPrivileges(t *testing.T, pid int) {
	t.Helper()
	tasks, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "status"))
	if len(tasks) == 0 {
		t.Fatalf("no threads for pid %d", pid)
	}
	u, _ := user.Lookup("nobody")
	for _, f := range tasks {
		status, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"CapEff:\t0000000000001000", "CapPrm:\t0000000000001000", "CapAmb:\t0000000000000000"} {
			if !strings.Contains(string(status), want) {
				t.Errorf("%s: want %q:\n%s", f, want, status)
			}
		}
		if u != nil && !strings.Contains(string(status), "Uid:\t"+u.Uid+"\t"+u.Uid) {
			t.Errorf("%s: not running as nobody (%s)", f, u.Uid)
		}
	}
}

// tcpStream sends n pseudo-random bytes from a to a server in b and
// compares the SHA-256 the server computes with the sender's.
func tcpStream(t *testing.T, a, b *netlab.NS, addr string, n int64) {
	t.Helper()
	var ln net.Listener
	if err := b.Run(func() (err error) { ln, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		h := sha256.New()
		io.Copy(h, c)
		got <- h.Sum(nil)
	}()
	c, err := dial(a, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	src := io.LimitReader(rand.NewChaCha8([32]byte{byte(n)}), n)
	start := time.Now()
	if _, err := io.Copy(io.MultiWriter(c, h), src); err != nil {
		t.Fatalf("send to %s: %v", addr, err)
	}
	c.(*net.TCPConn).CloseWrite()
	select {
	case sum := <-got:
		if string(sum) != string(h.Sum(nil)) {
			t.Fatalf("%s: SHA-256 %x received, %x sent", addr, sum, h.Sum(nil))
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: receiver timed out", addr)
	}
	c.Close()
	d := time.Since(start)
	t.Logf("TCP %s: %d MiB in %v (%.0f Mbit/s), SHA-256 ok", addr, n>>20, d.Round(time.Millisecond), float64(n)*8/d.Seconds()/1e6)
}

// udpStream sends sends UDP_SEGMENT super-packets of segs datagrams of
// size bytes with sequence numbers from A to B, resending on ENOBUFS
// (the TUN ring was full: the kernel's backpressure), and checks that B
// receives every datagram once. It returns how many resends it took.
// Where the TUN has no USO it sends the same datagrams one at a time.
func udpStream(t *testing.T, a, b *netlab.NS, sends, segs, size int) int {
	t.Helper()
	addr := net.JoinHostPort(srv4, "9000")
	var pc net.PacketConn
	if err := b.Run(func() (err error) { pc, err = net.ListenPacket("udp", addr); return err }); err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	setsockopt(t, pc.(*net.UDPConn), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20)
	got := make(chan int, 1)
	go func() { got <- receiveSeqs(pc, sends*segs, size) }()

	c, err := dial(a, "udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	setsockopt(t, c.(*net.UDPConn), unix.IPPROTO_IP, unix.IP_RECVERR, 1)
	if err := netlab.Lacks(t, netlab.VirtioNetUSO); err != nil {
		// Without USO the kernel cuts a UDP_SEGMENT send before the
		// TUN, and the drops of its segments on a full TUN ring do not
		// reach the sender: only single datagrams are held back.
		t.Logf("one datagram per send: %v", err)
		sends, segs = sends*segs, 1
	} else {
		setsockopt(t, c.(*net.UDPConn), unix.IPPROTO_UDP, unix.UDP_SEGMENT, size)
	}
	buf, resends := make([]byte, segs*size), 0

	for i := range sends {
		for j := range segs {
			binary.BigEndian.PutUint64(buf[j*size:], uint64(i*segs+j))
		}
		n, err := sendRetry(c, buf)
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		resends += n
	}
	if n := <-got; n != sends*segs {
		t.Fatalf("UDP: %d of %d datagrams received", n, sends*segs)
	}
	return resends
}

// sendRetry writes buf, again while the kernel refuses it with ENOBUFS,
// and returns how many times it was refused.
func sendRetry(c net.Conn, buf []byte) (int, error) {
	for refused := 0; ; refused++ {
		_, err := c.Write(buf)
		if !errors.Is(err, syscall.ENOBUFS) {
			return refused, err
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// receiveSeqs reads datagrams until it has seen want distinct sequence
// numbers or nothing comes for 2 s, and returns how many it saw.
func receiveSeqs(pc net.PacketConn, want, size int) int {
	seen, n, buf := make([]bool, want), 0, make([]byte, 2048)
	for n < want {
		pc.SetReadDeadline(time.Now().Add(2 * time.Second))
		m, _, err := pc.ReadFrom(buf)
		if err != nil {
			break
		}
		if seq := binary.BigEndian.Uint64(buf); m == size && seq < uint64(want) && !seen[seq] {
			seen[seq] = true
			n++
		}
	}
	return n
}

func setsockopt(t *testing.T, c *net.UDPConn, level, opt, v int) {
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

// scrapeIdle scrapes addr in ns until the transmit queue is empty (the
// last frames may still be in flight when the traffic ends), for at most
// two seconds.
func scrapeIdle(t *testing.T, ns *netlab.NS, addr string) map[string]float64 {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		m, err := scrape(ns, addr)
		if err != nil {
			t.Fatal(err)
		}
		if sumMetric(m, "udpfwd_queue_depth_segments") == 0 || time.Now().After(deadline) {
			return m
		}
	}
}

// checkMetrics compares the scraped counters of a gateway with the given
// port with the traffic sent: tcpBytes of TCP payload and datagrams UDP
// datagrams of size bytes.
func checkMetrics(t *testing.T, m map[string]float64, port string, tcpBytes, datagrams, size int) {
	t.Helper()
	label := `,port="` + port + `"}`
	fwd := func(name string) float64 { return m[name+`{direction="tun_to_nic"`+label] }
	segs, supers := fwd("udpfwd_segments_total"), fwd("udpfwd_super_packets_total")
	// The host's own link-local traffic into the TUN (MLD reports and
	// the like) is not routed: queued, then discarded by the sink and
	// counted as host control (or, for the rest, as a not_routed drop).
	dropped := m[`udpfwd_drops_total{direction="tun_to_nic",reason="not_routed"}`]
	notRouted := dropped + m["udpfwd_host_control_packets_total"]
	t.Logf("tun->nic: %.0f super-packets, %.0f segments, %.0f bytes; nic->tun %.0f packets; budget stalls %.0f",
		supers, segs, fwd("udpfwd_bytes_total"), m[`udpfwd_packets_total{direction="nic_to_tun"`+label],
		m[`udpfwd_producer_stalls_total{cause="budget"}`])
	sent := fwd("udpfwd_packets_total")
	latency := m["udpfwd_tx_completion_latency_seconds_count"]
	refused := 0.0
	for k, v := range m {
		if strings.HasPrefix(k, "udpfwd_packet_events_total{") && strings.Contains(k, `event="tx_refused"`) {
			refused += v
		}
	}
	checks := []struct {
		what string
		ok   bool
	}{
		{"no drops but link-local", sumMetric(m, "udpfwd_drops_total") == dropped},
		{"segments >= datagrams + TCP bytes/MSS", segs >= float64(datagrams+tcpBytes/1460)},
		{"bytes >= payload sent", fwd("udpfwd_bytes_total") >= float64(tcpBytes+datagrams*size)},
		// Some super-packets carried more than one segment (how many
		// depends on the machine's speed, and without TUN USO every UDP
		// datagram comes alone).
		{"GSO: super-packets of several segments", supers > 0 && m[`udpfwd_segments_per_super_packet_bucket{le="1"}`] < supers},
		// AF_PACKET hands whole super-packets to a NIC that segments.
		{"every segment handed to the NIC", sent == segs-notRouted || port == "packet" && sent > 0 && sent < segs},
		{"every packet handed over completed", m[`udpfwd_tx_completed_total{port="`+port+`"}`] == sent},
		{"histogram counts every super-packet", m["udpfwd_segments_per_super_packet_count"] == supers},
		{"histogram sums every segment", m["udpfwd_segments_per_super_packet_sum"] == segs},
		// Frames the kernel refused (counted as tx_refused) complete too.
		{"latency histogram counts every completion", latency == sent+notRouted+refused},
		{"return path carried the ACKs", m[`udpfwd_packets_total{direction="nic_to_tun"`+label] > 0},
		{"-budget 8M is the limit", m["udpfwd_budget_limit_bytes"] == 8<<20},
		{"queue empty when idle", sumMetric(m, "udpfwd_queue_depth_segments") == 0},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("metrics: %s fails", c.what)
		}
	}
	if t.Failed() {
		t.Logf("metrics: %v", m)
	}
}
