package wgtunnel

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	wgtun "golang.zx2c4.com/wireguard/tun"

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

// wgGo is a stock wireguard-go device on a real TUN device in a
// namespace.
type wgGo struct {
	dev *device.Device
}

// startWgGo creates the TUN device name (MTU mtu, address cidr, up) in
// ns and a wireguard-go device on it, configured with IpcSet(cfg).
func startWgGo(t *testing.T, ns *netlab.NS, name, cidr string, mtu int, cfg string) *wgGo {
	t.Helper()
	w := &wgGo{}
	ns.Do(t, func() {
		tdev, err := wgtun.CreateTUN(name, mtu)
		netlab.Must(t, err)
		// Silent: its TUN's netlink listener looks the device's MTU up
		// outside the namespace and logs an error for each event.
		w.dev = device.NewDevice(tdev, conn.NewDefaultBind(), device.NewLogger(device.LogLevelSilent, ""))
		netlab.Must(t, w.dev.IpcSet(cfg))
		netlab.Must(t, w.dev.Up())
	})
	t.Cleanup(w.dev.Close)
	netlab.Must(t, ns.LinkUp(name))
	netlab.Must(t, ns.AddAddr(name, cidr))
	return w
}

// handshaked reports whether the device completed a handshake.
func (w *wgGo) handshaked(t *testing.T) bool {
	get, err := w.dev.IpcGet()
	netlab.Must(t, err)
	m := regexp.MustCompile(`last_handshake_time_sec=(\d+)`).FindStringSubmatch(get)
	return m != nil && m[1] != "0"
}

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
			if c, err := net.Dial("udp4", netip.AddrPortFrom(dst, 9).String()); err == nil {
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

// interopPort is both ends' listen port in the interop tests, each in a
// namespace of its own.
const interopPort = 51820

// The interop tests' tunnel addresses: the Device's in A, the other end's
// in B.
var (
	interopA = netip.MustParseAddr("10.9.0.1")
	interopB = netip.MustParseAddr("10.9.0.2")
)

// interop is a Device in namespace A of a pair, configured with one peer,
// another WireGuard implementation in namespace B.
type interop struct {
	p            *netlab.Pair
	d            *Device
	h            *uapi.Handler
	privA, privB wireguard.Key
	ours         string // the peer's lines in the Device's configuration
}

// newInterop makes two keys and runs a Device named wgs0 in p.A, with
// address interopA/24 and the peer of privB's public key at p.AddrB.
func newInterop(t *testing.T, p *netlab.Pair) *interop {
	l := &interop{p: p, privA: newKey(t), privB: newKey(t)}
	var err error
	p.A.Do(t, func() { l.d, err = New(Config{Name: "wgs0", Logger: slog.New(slog.DiscardHandler)}) })
	netlab.Must(t, err)
	t.Cleanup(func() { l.d.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- l.d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	l.h = uapi.NewHandler(l.d, uapi.Limits{})
	l.ours = fmt.Sprintf("public_key=%s\nendpoint=%s\nallowed_ip=%s/32\n", hexKey(l.privB.Public()), netip.AddrPortFrom(p.AddrB, interopPort), interopB)
	apply(t, l.h, fmt.Sprintf("private_key=%s\nlisten_port=%d\n%s", hexKey(l.privA), interopPort, l.ours))
	netlab.Must(t, p.A.LinkUp("wgs0"))
	netlab.Must(t, p.A.AddAddr("wgs0", interopA.String()+"/24"))
	return l
}

// interopPeer is the other end of an interop test, with the Device as
// its one peer.
type interopPeer interface {
	// handshaked reports whether it completed a handshake with the
	// Device.
	handshaked(t *testing.T) bool
	// renew removes its peer and adds it again, without a session.
	renew(t *testing.T)
	// transfer returns the bytes it received from and sent to the peer.
	transfer(t *testing.T) (rx, tx uint64)
}

// run checks the Device against other: the other end starts the first
// handshake, the Device the second (both peers removed and added again in
// between), and after each a TCP stream goes each way, checked with
// SHA-256, and the other end's transfer counters show both.
func (l *interop) run(t *testing.T, other interopPeer) {
	pubB := l.privB.Public()
	ourHandshake := func() bool { return !l.d.PeerByKey(pubB).LastHandshake().IsZero() }
	const size = 4 << 20
	transfers := func() {
		netlab.TCPTransfer(t, l.p.A, l.p.B, netip.AddrPortFrom(interopB, 5001), size, false)
		netlab.TCPTransfer(t, l.p.A, l.p.B, netip.AddrPortFrom(interopB, 5002), size, true)
		rx, tx := other.transfer(t)
		if rx < size || tx < size {
			t.Errorf("the other end counts %d bytes received, %d sent, after %d each way", rx, tx, size)
		}
		t.Logf("the other end counts %d bytes received, %d sent", rx, tx)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the Device's counters: %+v", l.d.Stats())
		}
	})
	waitHandshake(t, l.p.B, interopA, func() bool { return ourHandshake() && other.handshaked(t) })
	if n := l.d.Stats().NoKey; n != 0 {
		t.Errorf("the Device dropped %d packets for want of a keypair, with the other end initiating", n)
	}
	transfers()

	apply(t, l.h, fmt.Sprintf("public_key=%s\nremove=true\n%s", hexKey(pubB), l.ours))
	other.renew(t)
	if ourHandshake() || other.handshaked(t) {
		t.Fatal("a handshake with peers just added")
	}
	waitHandshake(t, l.p.A, interopB, func() bool { return ourHandshake() && other.handshaked(t) })
	if l.d.Stats().NoKey == 0 {
		t.Error("the Device initiated without a packet waiting for a keypair")
	}
	transfers()
	s := l.d.Stats()
	// Receive.Auth may count a data message under the keys of the peers
	// removed (an unknown receiver index), in flight as they were.
	if s.Tunnel.Receive.Replay != 0 || s.Tunnel.Receive.Malformed != 0 || s.Tunnel.Receive.NotAllowed != 0 || s.ControlDropped != 0 {
		t.Errorf("drops: %+v", s)
	}
	checkPeerStats(t, l.d, pubB)
	t.Logf("tunnel: sent %d datagrams in %d messages, received %d in %d; control sent %d, received %d",
		s.Tunnel.Send.Datagrams, s.Tunnel.Send.Messages, s.Tunnel.Receive.Datagrams, s.Tunnel.Receive.Messages,
		s.Tunnel.ControlSent, s.Tunnel.Receive.Control)

	// Another listen port opens the tunnel again: the counters go on.
	before := l.d.PeerStats()[0]
	apply(t, l.h, fmt.Sprintf("listen_port=%d\n", interopPort+1))
	after, s2 := l.d.PeerStats()[0], l.d.Stats()
	if after.RxPackets < before.RxPackets || after.TxPackets < before.TxPackets || s2.Tunnel.Send.Datagrams < s.Tunnel.Send.Datagrams || !s2.Tunnel.Send.GSO {
		t.Errorf("after the tunnel opened again: peer packets %d and %d (were %d and %d), tunnel datagrams sent %d (were %d), GSO %v",
			after.RxPackets, after.TxPackets, before.RxPackets, before.TxPackets, s2.Tunnel.Send.Datagrams, s.Tunnel.Send.Datagrams, s2.Tunnel.Send.GSO)
	}
}

// checkPeerStats checks the counters of the Device's one peer, pub,
// after a handshake the Device started with a packet waiting, and TCP
// both ways.
func checkPeerStats(t *testing.T, d *Device, pub wireguard.Key) {
	t.Helper()
	ps := d.PeerStats()
	if len(ps) != 1 || ps[0].PublicKey != pub {
		t.Fatalf("PeerStats %+v, want the one peer", ps)
	}
	p := ps[0]
	if p.Initiations == 0 || p.Handshakes == 0 || p.LastHandshake.IsZero() || p.Drops[wireguard.NoKey] == 0 {
		t.Errorf("initiations %d, handshakes %d, last %v, dropped for want of a keypair %d: want each above 0",
			p.Initiations, p.Handshakes, p.LastHandshake, p.Drops[wireguard.NoKey])
	}
	// Each way 4 MiB of TCP: thousands of packets, the bytes above them.
	if p.RxPackets < 1000 || p.TxPackets < 1000 || p.RxBytes < 4<<20 || p.TxBytes < 4<<20 || !p.Endpoint.IsValid() {
		t.Errorf("peer counters %+v, want thousands of packets and over 4 MiB each way", p)
	}
	t.Logf("peer: rx %d packets %d bytes, tx %d packets %d bytes, %d initiations, %d handshakes, drops %v",
		p.RxPackets, p.RxBytes, p.TxPackets, p.TxBytes, p.Initiations, p.Handshakes, p.Drops)
}

// wgGoPeer is a wireguard-go device as an interopPeer.
type wgGoPeer struct {
	*wgGo
	key  wireguard.Key // its peer's public key
	peer string        // its peer's lines
}

func (w wgGoPeer) renew(t *testing.T) {
	netlab.Must(t, w.dev.IpcSet(fmt.Sprintf("public_key=%s\nremove=true\n%s", hexKey(w.key), w.peer)))
}

func (w wgGoPeer) transfer(t *testing.T) (rx, tx uint64) {
	get, err := w.dev.IpcGet()
	netlab.Must(t, err)
	for _, c := range []struct {
		key string
		n   *uint64
	}{{"rx_bytes", &rx}, {"tx_bytes", &tx}} {
		if m := regexp.MustCompile(c.key + `=(\d+)`).FindStringSubmatch(get); m != nil {
			*c.n, _ = strconv.ParseUint(m[1], 10, 64)
		}
	}
	return rx, tx
}

// TestInteropWireguardGo runs a Device in one namespace against a stock
// wireguard-go device on a real TUN in another (interop.run).
func TestInteropWireguardGo(t *testing.T) {
	l := newInterop(t, netlab.NewPairT(t, "wgtun"))
	peer := fmt.Sprintf("public_key=%s\nendpoint=%s\nallowed_ip=%s/32\n", hexKey(l.privA.Public()), netip.AddrPortFrom(l.p.AddrA, interopPort), interopA)
	w := startWgGo(t, l.p.B, "wgg0", interopB.String()+"/24", 1420, fmt.Sprintf("private_key=%s\nlisten_port=%d\n%s", hexKey(l.privB), interopPort, peer))
	l.run(t, wgGoPeer{w, l.privA.Public(), peer})
}

// kernelPeer is the kernel's WireGuard device (wireguard.ko) as an
// interopPeer.
type kernelPeer struct {
	c    *wgkernel.Conn
	cfg  wgkernel.Config
	peer wgkernel.Key
}

func (k *kernelPeer) get(t *testing.T) *wgkernel.Peer {
	d, err := k.c.Get(k.cfg.Name)
	netlab.Must(t, err)
	p := d.Peer(k.peer)
	if p == nil {
		t.Fatalf("the kernel's %s has no peer %x...", k.cfg.Name, k.peer[:4])
	}
	return p
}

func (k *kernelPeer) handshaked(t *testing.T) bool { return !k.get(t).LastHandshake.IsZero() }

func (k *kernelPeer) renew(t *testing.T) {
	cfg := k.cfg
	cfg.ReplacePeers = true
	netlab.Must(t, k.c.Set(cfg))
}

func (k *kernelPeer) transfer(t *testing.T) (rx, tx uint64) {
	p := k.get(t)
	return p.RxBytes, p.TxBytes
}

// TestInteropKernel runs a Device in one namespace against the kernel's
// WireGuard (wireguard.ko) in another (interop.run), configured over
// generic netlink. It skips where the kernel has no WireGuard; the kernel
// matrix runs it on Debian's kernels.
func TestInteropKernel(t *testing.T) {
	p := netlab.NewPairT(t, "wgkern")
	const name = "wgk0"
	if err := wgkernel.Create(p.B.Netlink(), name, 1420); errors.Is(err, netlab.ErrMissingFeature) {
		t.Skip(err)
	} else {
		netlab.Must(t, err)
	}
	c, err := wgkernel.Open(p.B.Handle())
	netlab.Must(t, err)
	t.Cleanup(func() { c.Close() })
	l := newInterop(t, p)
	k := &kernelPeer{c: c, peer: wgkernel.Key(l.privA.Public()), cfg: wgkernel.Config{
		Name: name, PrivateKey: wgkernel.Key(l.privB), ListenPort: interopPort,
		Peers: []wgkernel.PeerConfig{{
			PublicKey:  wgkernel.Key(l.privA.Public()),
			Endpoint:   netip.AddrPortFrom(p.AddrA, interopPort),
			AllowedIPs: []netip.Prefix{netip.PrefixFrom(interopA, 32)},
		}},
	}}
	netlab.Must(t, c.Set(k.cfg))
	netlab.Must(t, p.B.LinkUp(name))
	netlab.Must(t, p.B.AddAddr(name, interopB.String()+"/24"))
	l.run(t, k)
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

// buildWggso builds cmd/wggso into dir, with `go build -o OUT .` in its
// directory (what the kernel matrix's guests answer with a binary the
// host built).
func buildWggso(t *testing.T, dir string) string {
	bin := filepath.Join(dir, "wggso")
	goTool := "go"
	if root := runtime.GOROOT(); root != "" {
		goTool = filepath.Join(root, "bin", "go")
	}
	cmd := exec.Command(goTool, "build", "-o", bin, ".")
	cmd.Dir = filepath.Join("..", "..", "..", "cmd", "wggso")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build cmd/wggso: %v\n%s", err, out)
	}
	return bin
}

// runIn runs cmd in ns and returns its output.
func runIn(t *testing.T, ns *netlab.NS, cmd *exec.Cmd) string {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	netlab.Must(t, ns.Start(cmd))
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out.String())
	}
	return out.String()
}

// TestWgQuick brings cmd/wggso up with Debian's wg-quick (as its
// userspace implementation) in one namespace, against a wireguard-go
// device in another: the interface answers UDP and TCP echo and carries
// a TCP stream each way, its MTU follows the configuration's (set by
// wg-quick after the peers), wg show reports the handshake and the
// transfer, and wg-quick down stops the process and removes its socket.
func TestWgQuick(t *testing.T) {
	wg, wgQuick := wgQuickTools(t)
	p := netlab.NewPairT(t, "wgquick")
	dir := t.TempDir()
	bin := buildWggso(t, dir)
	logFile := filepath.Join(dir, "wggso.log")
	impl := filepath.Join(dir, "impl")
	netlab.Must(t, os.WriteFile(impl, []byte(fmt.Sprintf("#!/bin/sh\nexec %s -log %s -log-level debug \"$@\"\n", bin, logFile)), 0o755))

	name := fmt.Sprintf("wgq%d", os.Getpid()%1000000)
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
AllowedIPs = 10.8.0.2/32
`, privA, port, mtu, privB.Public(), netip.AddrPortFrom(p.AddrB, port))), 0o600))
	w := startWgGo(t, p.B, "wgg1", "10.8.0.2/24", mtu,
		fmt.Sprintf("private_key=%s\nlisten_port=%d\npublic_key=%s\nallowed_ip=10.8.0.1/32\n", hexKey(privB), port, hexKey(privA.Public())))

	up := exec.Command(wgQuick, "up", conf)
	up.Env = append(os.Environ(), "WG_QUICK_USERSPACE_IMPLEMENTATION="+impl)
	t.Logf("wg-quick up:\n%s", runIn(t, p.A, up))
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
			t.Logf("wggso's log:\n%s\nwireguard-go's:\n%s", logged, w.logTail())
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

	show := runIn(t, p.A, exec.Command(wg, "show", name))
	for _, want := range []string{"peer: " + privB.Public().String(), "latest handshake:", "transfer:", fmt.Sprintf("listening port: %d", port)} {
		if !strings.Contains(show, want) {
			t.Errorf("wg show has no %q:\n%s", want, show)
		}
	}

	t.Logf("wg-quick down:\n%s", runIn(t, p.A, exec.Command(wgQuick, "down", conf)))
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
	bin := buildWggso(t, t.TempDir())
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
