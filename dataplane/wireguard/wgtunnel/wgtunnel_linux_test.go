package wgtunnel

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/wireguard"
	"github.com/gsoplane/gsoplane/dataplane/wireguard/uapi"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
	"github.com/gsoplane/gsoplane/internal/testing/wgkernel"
)

func TestMain(m *testing.M) { os.Exit(netlab.Main(m)) }

// handshakeWait bounds the wait for a handshake: an initiation lost is
// tried again after 5 s, on a busy machine later.
const handshakeWait = 30 * time.Second

func newKey(t *testing.T) wireguard.Key {
	k, err := wireguard.NewPrivateKey()
	netlab.Must(t, err)
	return k
}

func hexKey(k wireguard.Key) string { return hex.EncodeToString(k[:]) }

// waitHandshake sends a datagram from ns to dst's discard port every
// 200 ms until done reports the handshake it starts.
func waitHandshake(t *testing.T, ns *netlab.NS, dst netip.Addr, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(handshakeWait)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("no handshake within %v", handshakeWait)
		}
		ns.Do(t, func() {
			if c, err := net.Dial("udp", netip.AddrPortFrom(dst, 9).String()); err == nil {
				c.Write([]byte("handshake"))
				c.Close()
			}
		})
		time.Sleep(200 * time.Millisecond)
	}
}

// apply applies a set operation's lines to h.
func apply(t *testing.T, h *uapi.Handler, lines string) {
	t.Helper()
	s, err := uapi.ParseSet(bufio.NewReader(strings.NewReader(lines+"\n")), uapi.Limits{})
	netlab.Must(t, err)
	netlab.Must(t, h.Apply(s))
}

// TestInteropWireguardGo runs a Device in one namespace against a stock
// wireguard-go device on a real TUN in another (interop.run).
func TestInteropWireguardGo(t *testing.T) {
	newInterop(t, "wgtun", Config{}).run(t)
}

// TestInteropIPv6: the interop flow (interop.run) with the endpoints on
// the veth's IPv6 addresses, carrying IPv4 and IPv6 inside, and with
// IPv6 inside over IPv4 endpoints. The Device's peer has no endpoint
// at first: it takes the one wireguard-go's first initiation comes
// from, which the dual-stack socket receives v4-mapped for IPv4, and
// the UAPI get shows it plain; wireguard-go receives the data messages
// from the Device's address of the family asked for.
func TestInteropIPv6(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []interopOption
	}{
		{"outer6", []interopOption{outer6}},
		{"outer6-inner6", []interopOption{outer6, inner6}},
		{"outer4-inner6", []interopOption{inner6}},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := newInterop(t, "wgv6", Config{}, append(c.opts, learnEndpoint)...)
			x.run(t)
			from := netip.AddrPortFrom(x.outA, interopPort).String()
			if n := x.w.tap.count(true, func(m wireMsg) bool { return m.typ == wireguard.TypeData && m.peer == from }); n < 1000 {
				t.Errorf("wireguard-go received %d data messages from %s", n, from)
			}
		})
	}
}

// TestInteropQueues: the Device on a TUN device with two queues
// (wggso -queues 2) against wireguard-go: TCP streams both ways at once
// (two each way, so that both queues' forwarders are likely busy)
// arrive whole (SHA-256), each flow in order: the receiving TCP stacks
// queue no segment out of order (TcpExt:TCPOFOQueue) unless something
// was dropped on the way; and no data message is refused as a replay
// on either side: the Device counts none, and wireguard-go receives each
// of the Device's counters once, none further below the highest seen
// than its replay window (the forwarders seal concurrently).
func TestInteropQueues(t *testing.T) {
	x := newInterop(t, "wgqueues", Config{Queues: 2})
	x.handshake(t, x.p.A)
	ofo, drops := x.reordered(t)
	t.Run("streams", func(t *testing.T) {
		for i := range 4 {
			t.Run(fmt.Sprintf("%d", 5001+i), func(t *testing.T) {
				t.Parallel()
				netlab.TCPTransfer(t, x.p.A, x.p.B, netip.AddrPortFrom(x.inB, uint16(5001+i)), 8<<20, i%2 == 1)
			})
		}
	})
	ofo2, drops2 := x.reordered(t)
	t.Logf("%d segments queued out of order by the receivers, %d packets dropped on the way", ofo2-ofo, drops2-drops)
	if ofo2 != ofo && drops2 == drops {
		t.Errorf("%d segments queued out of order by the receivers, nothing dropped: a flow changed queues", ofo2-ofo)
	}
	if st := x.d.Stats(); st.Tunnel.Receive.Replay != 0 {
		t.Errorf("the Device refused %d data messages as replays", st.Tunnel.Receive.Replay)
	}
	below, late := counterOrder(t, x.w.tap.received())
	const window = (128 - 1) * 64 // wireguard-go's replay window (replay.Filter)
	if late >= window {
		t.Errorf("a data message %d counters below the highest seen: past wireguard-go's replay window (%d)", late, window)
	}
	t.Logf("wireguard-go: %d data messages below the highest counter seen, at most %d below", below, late)
}

// counterOrder checks the data messages msgs, as they came: none repeats
// a (receiver index, counter) pair. It returns how many came with a
// counter below the highest of their index seen before, and by how many
// counters at most.
func counterOrder(t *testing.T, msgs []wireMsg) (below, late uint64) {
	t.Helper()
	type nonce struct {
		index   uint32
		counter uint64
	}
	seen, highest := map[nonce]bool{}, map[uint32]uint64{}
	for _, m := range msgs {
		if m.typ != wireguard.TypeData {
			continue
		}
		n := nonce{m.index, m.counter}
		if seen[n] {
			t.Fatalf("counter %d under receiver index %#x twice", m.counter, m.index)
		}
		seen[n] = true
		if h := highest[m.index]; m.counter < h {
			below++
			late = max(late, h-m.counter)
		}
		highest[m.index] = max(highest[m.index], m.counter)
	}
	return below, late
}

// reordered returns the TCP segments both namespaces' stacks queued out
// of order so far, and the packets dropped on the way that the test
// sees: the Device's, the links' (the TUN devices, the veth) and the
// UDP sockets' of both namespaces.
func (x *interop) reordered(t *testing.T) (ofo, drops uint64) {
	t.Helper()
	for _, side := range []struct {
		ns    *netlab.NS
		links []string
	}{{x.p.A, []string{"wgs0", netlab.PairLinkA}}, {x.p.B, []string{"wgg0", netlab.PairLinkB}}} {
		c := side.ns.Counters(t)
		ofo += uint64(c["TcpExt:TCPOFOQueue"])
		drops += uint64(c["Udp:InErrors"] + c["Udp:RcvbufErrors"] + c["Udp:SndbufErrors"])
		drops += side.ns.LinkDrops(t, side.links...)
	}
	st := x.d.Stats().Tunnel
	return ofo, drops + st.Forward.Drops.Total() + st.Return.Drops.Total() + st.Send.Dropped + st.Receive.Refused
}

// TestInteropKernel runs a Device in one namespace against the kernel's
// WireGuard (wireguard.ko) in another (interop.run), configured over
// generic netlink. It skips where the kernel has no WireGuard; the kernel
// matrix runs it on Debian's kernels.
func TestInteropKernel(t *testing.T) {
	x := newOurs(t, "wgkern", Config{})
	const name = "wgk0"
	if err := wgkernel.Create(x.p.B.Netlink(), name, 1420); errors.Is(err, netlab.ErrMissingFeature) {
		t.Skip(err)
	} else {
		netlab.Must(t, err)
	}
	c, err := wgkernel.Open(x.p.B.Handle())
	netlab.Must(t, err)
	t.Cleanup(func() { c.Close() })
	k := &kernelEnd{c: c, peer: wgkernel.Key(x.privA.Public()), cfg: wgkernel.Config{
		Name: name, PrivateKey: wgkernel.Key(x.privB), ListenPort: interopPort,
		Peers: []wgkernel.PeerConfig{{
			PublicKey:  wgkernel.Key(x.privA.Public()),
			Endpoint:   netip.AddrPortFrom(x.outA, interopPort),
			AllowedIPs: []netip.Prefix{netip.PrefixFrom(x.inA, 32)},
		}},
	}}
	netlab.Must(t, c.Set(k.cfg))
	netlab.Must(t, x.p.B.LinkUp(name))
	netlab.Must(t, x.p.B.AddAddr(name, x.inB.String()+"/24"))
	x.other = k
	x.run(t)
}

// firstWaits removes both peers and adds them again, and sends one
// datagram to sink: it must wait, staged, for the handshake it starts,
// and arrive. A packet of either end's own (IPv6 neighbour discovery,
// say) may start a handshake between the re-adding and the datagram,
// which then finds a session: such a try proves nothing, and it tries
// again, up to 5 times.
func (x *interop) firstWaits(t *testing.T, sink *net.UDPConn) {
	t.Helper()
	for try := 1; ; try++ {
		x.readd(t)
		before := x.d.Stats().Staged
		udpSend(t, x.p.A, netip.AddrPortFrom(x.inB, 7000), []byte("first"))
		if got := udpReceive(sink, handshakeWait); string(got) != "first" {
			t.Fatalf("the first datagram after wg set: %q (stats %+v)", got, x.d.Stats())
		}
		st := x.d.Stats().Staged
		if st.Staged > before.Staged && st.Sent > before.Sent {
			return
		}
		if try == 5 {
			t.Errorf("the first datagram did not wait for the handshake in %d tries: %+v", try, st)
			return
		}
		t.Logf("try %d: the datagram found a session, a handshake came before it: %+v", try, st)
	}
}

// run checks the Device against the other end: the other end starts the
// first handshake; then both peers are removed and added again, and the
// first datagram sent, sent once, waits for the handshake it starts and
// arrives; after each handshake a TCP stream goes each way, checked with
// SHA-256, and the other end's transfer counters show both, and the
// UAPI get shows the other end's endpoint, plain. Then the Device's
// counters, and a new listen port: the tunnel opens again, the
// counters go on.
func (x *interop) run(t *testing.T) {
	const size = 4 << 20
	transfers := func() {
		netlab.TCPTransfer(t, x.p.A, x.p.B, netip.AddrPortFrom(x.inB, 5001), size, false)
		netlab.TCPTransfer(t, x.p.A, x.p.B, netip.AddrPortFrom(x.inB, 5002), size, true)
		rx, tx := x.other.transfer(t)
		if rx < size || tx < size {
			t.Errorf("the other end counts %d bytes received, %d sent, after %d each way", rx, tx, size)
		}
		t.Logf("the other end counts %d bytes received, %d sent", rx, tx)
	}
	x.handshake(t, x.p.B)
	if n := x.d.Stats().NoKey; n != 0 {
		t.Errorf("the Device found no keypair for %d packets, with the other end initiating", n)
	}
	transfers()
	x.checkEndpoint(t)

	x.firstWaits(t, x.p.B.ListenUDP(t, netip.AddrPortFrom(x.inB, 7000)))
	transfers()
	x.checkEndpoint(t)
	s := x.d.Stats()
	// Receive.Auth may count a data message under the keys of the peers
	// removed (an unknown receiver index), in flight as they were. The
	// other end never moves: nothing roams, but for a peer configured
	// without an endpoint its first data message, if it comes before
	// the handshake loop gave the tunnel the endpoint it learnt.
	roamed := uint64(0)
	if x.learn {
		roamed = 1
	}
	if s.Tunnel.Receive.Replay != 0 || s.Tunnel.Receive.Malformed != 0 || s.Tunnel.Receive.NotAllowed != 0 || s.ControlDropped != 0 || s.Tunnel.Receive.Roamed > roamed {
		t.Errorf("drops: %+v", s)
	}
	checkPeerStats(t, x.d, x.privB.Public())
	t.Logf("tunnel: sent %d datagrams in %d messages, received %d in %d; control sent %d, received %d",
		s.Tunnel.Send.Datagrams, s.Tunnel.Send.Messages, s.Tunnel.Receive.Datagrams, s.Tunnel.Receive.Messages,
		s.Tunnel.ControlSent, s.Tunnel.Receive.Control)

	// Another listen port opens the tunnel again: the counters go on.
	before := x.d.PeerStats()[0]
	apply(t, x.h, fmt.Sprintf("listen_port=%d\n", interopPort+1))
	after, s2 := x.d.PeerStats()[0], x.d.Stats()
	if after.RxPackets < before.RxPackets || after.TxPackets < before.TxPackets || s2.Tunnel.Send.Datagrams < s.Tunnel.Send.Datagrams || !s2.Tunnel.Send.GSO {
		t.Errorf("after the tunnel opened again: peer packets %d and %d (were %d and %d), tunnel datagrams sent %d (were %d), GSO %v",
			after.RxPackets, after.TxPackets, before.RxPackets, before.TxPackets, s2.Tunnel.Send.Datagrams, s.Tunnel.Send.Datagrams, s2.Tunnel.Send.GSO)
	}
}

// checkPeerStats checks the counters of the Device's one peer, pub,
// after a handshake the Device started, and TCP both ways.
func checkPeerStats(t *testing.T, d *Device, pub wireguard.Key) {
	t.Helper()
	ps := d.PeerStats()
	if len(ps) != 1 || ps[0].PublicKey != pub {
		t.Fatalf("PeerStats %+v, want the one peer", ps)
	}
	p := ps[0]
	if p.Initiations == 0 || p.Handshakes == 0 || p.LastHandshake.IsZero() {
		t.Errorf("initiations %d, handshakes %d, last %v: want each above 0", p.Initiations, p.Handshakes, p.LastHandshake)
	}
	// Each way 4 MiB of TCP: thousands of packets, the bytes above them.
	if p.RxPackets < 1000 || p.TxPackets < 1000 || p.RxBytes < 4<<20 || p.TxBytes < 4<<20 || !p.Endpoint.IsValid() {
		t.Errorf("peer counters %+v, want thousands of packets and over 4 MiB each way", p)
	}
	t.Logf("peer: rx %d packets %d bytes, tx %d packets %d bytes, %d initiations, %d handshakes, drops %v",
		p.RxPackets, p.RxBytes, p.TxPackets, p.TxBytes, p.Initiations, p.Handshakes, p.Drops)
}

// kernelEnd is the kernel's WireGuard device (wireguard.ko) as the
// other end.
type kernelEnd struct {
	c    *wgkernel.Conn
	cfg  wgkernel.Config
	peer wgkernel.Key
}

func (k *kernelEnd) get(t *testing.T) *wgkernel.Peer {
	d, err := k.c.Get(k.cfg.Name)
	netlab.Must(t, err)
	p := d.Peer(k.peer)
	if p == nil {
		t.Fatalf("the kernel's %s has no peer %x...", k.cfg.Name, k.peer[:4])
	}
	return p
}

func (k *kernelEnd) handshaked(t *testing.T) bool { return !k.get(t).LastHandshake.IsZero() }

func (k *kernelEnd) remove(t *testing.T) {
	cfg := k.cfg
	cfg.ReplacePeers, cfg.Peers = true, nil
	netlab.Must(t, k.c.Set(cfg))
}

func (k *kernelEnd) add(t *testing.T) { netlab.Must(t, k.c.Set(k.cfg)) }

func (k *kernelEnd) transfer(t *testing.T) (rx, tx uint64) {
	p := k.get(t)
	return p.RxBytes, p.TxBytes
}

// wgQuickTools returns the paths of wg, wg-quick and ip, or skips the
// test without them or without root.
func wgQuickTools(t *testing.T) (wg, wgQuick string) {
	netlab.RequireRoot(t)
	t.Setenv("PATH", os.Getenv("PATH")+":/usr/sbin:/sbin")
	var paths []string
	for _, tool := range []string{"wg", "wg-quick", "ip"} {
		path, err := exec.LookPath(tool)
		if err != nil {
			t.Skipf("%s is not installed (wireguard-tools, iproute2): the interface is not checked against wg-quick(8)", tool)
		}
		paths = append(paths, path)
	}
	return paths[0], paths[1]
}

// TestWgQuick brings cmd/wggso up with Debian's wg-quick (as its
// userspace implementation) in one namespace, against a wireguard-go
// device in another: the interface answers UDP and TCP echo and carries
// a TCP stream each way, its MTU follows the configuration's (set by
// wg-quick after the peers), wg show reports the handshake and the
// transfer, and wg-quick down stops the process and removes its socket.
// As a peer (AllowedIPs the peer's address) and as the default route
// (0.0.0.0/0, the peer's endpoint reached through the main table's
// default route only): wg-quick then marks the tunnel's own packets
// (fwmark 51820) so that its policy rules keep them out of the tunnel,
// and the tunnel works only if the socket carries the mark.
func TestWgQuick(t *testing.T) {
	t.Run("peer", func(t *testing.T) { testWgQuick(t, false) })
	t.Run("default-route", func(t *testing.T) { testWgQuick(t, true) })
}

func testWgQuick(t *testing.T, defaultRoute bool) {
	wg, wgQuick := wgQuickTools(t)
	p := netlab.NewPairT(t, "wgquick")
	dir := t.TempDir()
	bin := netlab.GoBuild(t, filepath.Join("..", "..", "..", "cmd", "wggso"), filepath.Join(dir, "wggso"))
	logFile := filepath.Join(dir, "wggso.log")
	impl := filepath.Join(dir, "impl")
	netlab.Must(t, os.WriteFile(impl, []byte(fmt.Sprintf("#!/bin/sh\nexec %s -log %s -log-level debug \"$@\"\n", bin, logFile)), 0o755))

	name := fmt.Sprintf("wgq%d", os.Getpid()%1000000)
	allowed, endpoint := "10.8.0.2/32", p.AddrB
	if defaultRoute {
		if _, err := exec.LookPath("nft"); err != nil {
			t.Skip("nft is not installed (nftables): wg-quick cannot route 0.0.0.0/0")
		}
		name = fmt.Sprintf("wgd%d", os.Getpid()%1000000)
		allowed, endpoint = "0.0.0.0/0", netip.MustParseAddr("203.0.113.2")
		netlab.Must(t, p.B.AddAddr("lo", endpoint.String()+"/32"))
		netlab.Must(t, p.A.AddRoute("0.0.0.0/0", netlab.PairLinkA, p.AddrB.String()))
	}
	sock, err := uapi.SocketPath(name)
	netlab.Must(t, err)
	privA, privB := newKey(t), newKey(t)
	const port, mtu = 51821, 1440
	conf := filepath.Join(dir, name+".conf")
	netlab.Must(t, os.WriteFile(conf, []byte(fmt.Sprintf(`[Interface]
PrivateKey = %s
Address = 10.8.0.1/24
ListenPort = %d
MTU = %d

[Peer]
PublicKey = %s
Endpoint = %s
AllowedIPs = %s
`, privA, port, mtu, privB.Public(), netip.AddrPortFrom(endpoint, port), allowed)), 0o600))
	w := startWgGo(t, p.B, "wgg1", "10.8.0.2/24", mtu,
		fmt.Sprintf("private_key=%s\nlisten_port=%d\npublic_key=%s\nallowed_ip=10.8.0.1/32\n", hexKey(privB), port, hexKey(privA.Public())))

	up := exec.Command(wgQuick, "up", conf)
	up.Env = append(os.Environ(), "WG_QUICK_USERSPACE_IMPLEMENTATION="+impl)
	t.Logf("wg-quick up:\n%s", p.A.Output(t, up))
	logged, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatalf("wg-quick did not run wggso (is there a wireguard kernel module?): %v", err)
	}
	m := regexp.MustCompile(`pid=(\d+)`).FindSubmatch(logged)
	if m == nil {
		t.Fatalf("no pid in the log:\n%s", logged)
	}
	pid, _ := strconv.Atoi(string(m[1]))
	t.Cleanup(func() {
		if syscall.Kill(pid, 0) == nil {
			syscall.Kill(pid, syscall.SIGTERM)
		}
		if t.Failed() {
			logged, _ := os.ReadFile(logFile)
			t.Logf("wggso's log:\n%s", logged)
		}
	})

	followed := regexp.MustCompile(`MTU changed.* to=` + strconv.Itoa(mtu))
	for deadline := time.Now().Add(10 * time.Second); !followed.Match(logged); logged, _ = os.ReadFile(logFile) {
		if time.Now().After(deadline) {
			t.Fatalf("the tunnel did not follow the MTU wg-quick set (%d) within 10 s:\n%s", mtu, logged)
		}
		time.Sleep(50 * time.Millisecond)
	}

	inB := netip.MustParseAddr("10.8.0.2")
	waitHandshake(t, p.A, inB, func() bool { return w.handshaked(t) })
	netlab.Echo(t, p.B, p.A, inB, 10*time.Second)
	netlab.TCPTransfer(t, p.A, p.B, netip.AddrPortFrom(inB, 5001), 4<<20, false)
	netlab.TCPTransfer(t, p.A, p.B, netip.AddrPortFrom(inB, 5002), 4<<20, true)

	show := p.A.Output(t, exec.Command(wg, "show", name))
	wants := []string{"peer: " + privB.Public().String(), "latest handshake:", "transfer:", fmt.Sprintf("listening port: %d", port)}
	if defaultRoute {
		wants = append(wants, "fwmark: 0xca6c")
	}
	for _, want := range wants {
		if !strings.Contains(show, want) {
			t.Errorf("wg show has no %q:\n%s", want, show)
		}
	}

	t.Logf("wg-quick down:\n%s", p.A.Output(t, exec.Command(wgQuick, "down", conf)))
	deadline := time.Now().Add(10 * time.Second)
	for running(pid) {
		if time.Now().After(deadline) {
			logged, _ = os.ReadFile(logFile)
			t.Fatalf("wggso (pid %d) still runs 10 s after wg-quick down; its log:\n%s", pid, logged)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := os.Lstat(sock); err == nil {
		t.Errorf("%s is still there after wggso stopped", sock)
	}
	if logged, _ = os.ReadFile(logFile); !bytes.Contains(logged, []byte("the interface was deleted")) {
		t.Errorf("wggso did not stop for the interface's deletion:\n%s", logged)
	}
}

// running reports whether process pid runs (not gone, not a zombie).
func running(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

// TestWggsoSIGTERM: wggso -f stops cleanly on SIGTERM, with exit
// status 0, its socket and its interface gone.
func TestWggsoSIGTERM(t *testing.T) {
	ns := netlab.NewT(t, "wggso")
	bin := netlab.GoBuild(t, filepath.Join("..", "..", "..", "cmd", "wggso"), filepath.Join(t.TempDir(), "wggso"))
	name := fmt.Sprintf("wgt%d", os.Getpid()%1000000)
	sock, err := uapi.SocketPath(name)
	netlab.Must(t, err)
	var out bytes.Buffer
	cmd := exec.Command(bin, "-f", name)
	cmd.Stdout, cmd.Stderr = &out, &out
	netlab.Must(t, ns.Start(cmd))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Lstat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("no socket 10 s after the start:\n%s", out.String())
		}
	}
	netlab.Must(t, cmd.Process.Signal(syscall.SIGTERM))
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, out.String())
	}
	if _, err := os.Lstat(sock); err == nil {
		t.Errorf("%s is still there", sock)
	}
	if _, err := ns.Link(name); err == nil {
		t.Errorf("the interface outlived wggso")
	}
}
