package wgtunnel

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	wgtun "golang.zx2c4.com/wireguard/tun"

	"github.com/gsoplane/gsoplane/dataplane/wireguard"
	"github.com/gsoplane/gsoplane/dataplane/wireguard/uapi"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
	"github.com/gsoplane/gsoplane/internal/testing/syncbuf"
	"github.com/gsoplane/gsoplane/internal/testing/wggo"
)

// wgGo is a stock wireguard-go device on a real TUN device in a
// namespace, its UDP socket tapped: the tap sees every message it sends
// and receives.
type wgGo struct {
	ns         *netlab.NS
	name, cidr string
	mtu        int
	cfg        string
	dev        *device.Device
	tap        *tap
}

// startWgGo creates the TUN device name (MTU mtu, address cidr, up) in
// ns and a wireguard-go device on it, configured with IpcSet(cfg).
func startWgGo(t *testing.T, ns *netlab.NS, name, cidr string, mtu int, cfg string) *wgGo {
	t.Helper()
	w := &wgGo{ns: ns, name: name, cidr: cidr, mtu: mtu, cfg: cfg, tap: &tap{}}
	w.start(t)
	return w
}

func (w *wgGo) start(t *testing.T) {
	t.Helper()
	w.ns.Do(t, func() {
		tdev, err := wgtun.CreateTUN(w.name, w.mtu)
		netlab.Must(t, err)
		tdev = wggo.SteadyTUN(tdev) // its sockets stay in the namespace
		// Silent: its TUN's netlink listener looks the device's MTU up
		// outside the namespace and logs an error for each event.
		w.dev = device.NewDevice(tdev, &tapBind{Bind: conn.NewDefaultBind(), tap: w.tap}, device.NewLogger(device.LogLevelSilent, ""))
		netlab.Must(t, w.dev.IpcSet(w.cfg))
		netlab.Must(t, w.dev.Up())
	})
	t.Cleanup(w.dev.Close)
	netlab.Must(t, w.ns.LinkUp(w.name))
	netlab.Must(t, w.ns.AddAddr(w.name, w.cidr))
}

// restart closes the device and creates it again with the same keys
// and configuration: a new ephemeral key, new indices, counters from 0.
func (w *wgGo) restart(t *testing.T) {
	t.Helper()
	w.dev.Close()
	w.start(t)
}

// handshaked reports whether the device completed a handshake.
func (w *wgGo) handshaked(t *testing.T) bool { return w.lastHandshake(t) != "0" }

// lastHandshake is the device's last_handshake_time_sec ("0": none).
func (w *wgGo) lastHandshake(t *testing.T) string {
	get, err := w.dev.IpcGet()
	netlab.Must(t, err)
	if m := regexp.MustCompile(`last_handshake_time_sec=(\d+)`).FindStringSubmatch(get); m != nil {
		return m[1]
	}
	return "0"
}

// wireMsg is a WireGuard message as the tap saw it.
type wireMsg struct {
	typ     uint32 // wireguard.Type
	index   uint32 // a data message's receiver index
	counter uint64 // a data message's counter
	mac2    bool   // a handshake message whose MAC2 is not zeros
	peer    string // where it came from or went to
}

func parseWire(b []byte, peer string) wireMsg {
	m := wireMsg{typ: wireguard.Type(b), peer: peer}
	switch m.typ {
	case wireguard.TypeData:
		if len(b) >= wireguard.HeaderLen {
			m.index, m.counter = binary.LittleEndian.Uint32(b[4:]), binary.LittleEndian.Uint64(b[8:])
		}
	case wireguard.TypeInitiation, wireguard.TypeResponse:
		m.mac2 = len(b) >= 16 && !bytes.Equal(b[len(b)-16:], make([]byte, 16))
	}
	return m
}

// tap records what a wireguard-go device received and sent.
type tap struct {
	mu       sync.Mutex
	rx, tx   []wireMsg
	lastData []byte // the last data message sent
}

func (tp *tap) record(rx bool, b []byte, peer string) {
	m := parseWire(b, peer)
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if rx {
		tp.rx = append(tp.rx, m)
		return
	}
	tp.tx = append(tp.tx, m)
	if m.typ == wireguard.TypeData {
		tp.lastData = append(tp.lastData[:0], b...)
	}
}

// count counts the messages received (rx) or sent that match.
func (tp *tap) count(rx bool, match func(wireMsg) bool) int {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	msgs := tp.tx
	if rx {
		msgs = tp.rx
	}
	n := 0
	for _, m := range msgs {
		if match(m) {
			n++
		}
	}
	return n
}

// received returns a copy of the messages received so far.
func (tp *tap) received() []wireMsg {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return append([]wireMsg(nil), tp.rx...)
}

// tapBind is wireguard-go's own UDP bind with every message it receives
// and sends recorded.
type tapBind struct {
	conn.Bind
	tap *tap
}

func (b *tapBind) Open(port uint16) ([]conn.ReceiveFunc, uint16, error) {
	fns, actual, err := b.Bind.Open(port)
	for i, fn := range fns {
		fns[i] = func(packets [][]byte, sizes []int, eps []conn.Endpoint) (int, error) {
			n, err := fn(packets, sizes, eps)
			for k := range n {
				b.tap.record(true, packets[k][:sizes[k]], eps[k].DstToString())
			}
			return n, err
		}
	}
	return fns, actual, err
}

func (b *tapBind) Send(bufs [][]byte, ep conn.Endpoint) error {
	for _, m := range bufs {
		b.tap.record(false, m, ep.DstToString())
	}
	return b.Bind.Send(bufs, ep)
}

// interop is a Device in namespace A (wgs0, 10.9.0.1) against a stock
// wireguard-go device in B (wgg0, 10.9.0.2), each the other's peer, both
// on interopPort, through the pair's veth (its IPv4 addresses): the
// setup the interop tests share. Options change the addresses.
type interop struct {
	p            *netlab.Pair
	cfg          Config
	log          *syncbuf.Buffer // the Device's log, debug level
	d            *Device
	h            *uapi.Handler
	stop         func()   // ends the Device's Run and closes it
	w            *wgGo    // wireguard-go, the other end (newInterop)
	other        otherEnd // the other end: w, or the test's
	privA, privB wireguard.Key
	inA, inB     netip.Addr // the tunnel's addresses, inside
	outA, outB   netip.Addr // the endpoints' addresses, on the veth
	inBits       int        // the prefix length of inA and inB on their devices
	learn        bool       // the Device's peer configured with no endpoint at first
}

const interopPort = 51820

// interopOption changes an interop's setup before its devices start.
type interopOption func(*interop)

// outer6 puts the endpoints on the veth's IPv6 addresses.
func outer6(x *interop) { x.outA, x.outB = x.p.Addr6A, x.p.Addr6B }

// inner6 gives the tunnel's devices IPv6 addresses (fd09::1, fd09::2).
func inner6(x *interop) {
	x.inA, x.inB, x.inBits = netip.MustParseAddr("fd09::1"), netip.MustParseAddr("fd09::2"), 64
}

// learnEndpoint configures the Device's peer without an endpoint: it
// takes the one wireguard-go's first initiation comes from.
func learnEndpoint(x *interop) { x.learn = true }

// newInterop sets both devices up with cfg for the Device (its Name and
// Logger are the harness's); no handshake yet.
func newInterop(t *testing.T, tag string, cfg Config, opts ...interopOption) *interop {
	t.Helper()
	x := newOurs(t, tag, cfg, opts...)
	x.w = startWgGo(t, x.p.B, "wgg0", x.cidr(x.inB), 1420,
		fmt.Sprintf("private_key=%s\nlisten_port=%d\n%s", hexKey(x.privB), interopPort, x.theirs()))
	x.other = goEnd{x}
	return x
}

// newOurs sets the Device up with cfg in A of a new pair; the test sets
// the other end up in B.
func newOurs(t *testing.T, tag string, cfg Config, opts ...interopOption) *interop {
	t.Helper()
	p := netlab.NewPairT(t, tag)
	x := &interop{
		p: p, cfg: cfg, log: &syncbuf.Buffer{}, privA: newKey(t), privB: newKey(t),
		inA: netip.MustParseAddr("10.9.0.1"), inB: netip.MustParseAddr("10.9.0.2"), inBits: 24,
		outA: p.AddrA, outB: p.AddrB,
	}
	for _, o := range opts {
		o(x)
	}
	x.startOurs(t)
	t.Cleanup(func() {
		if t.Failed() {
			x.dump(t)
		}
	})
	return x
}

// otherEnd is the other WireGuard implementation of an interop test,
// with the Device as its one peer.
type otherEnd interface {
	// handshaked reports whether it completed a handshake with the
	// Device.
	handshaked(t *testing.T) bool
	// remove removes its peer, the Device; add adds it again, without
	// a session.
	remove(t *testing.T)
	add(t *testing.T)
	// transfer returns the bytes it received from and sent to the peer.
	transfer(t *testing.T) (rx, tx uint64)
}

// goEnd is the wireguard-go device of an interop as the other end.
type goEnd struct{ x *interop }

func (g goEnd) handshaked(t *testing.T) bool { return g.x.w.handshaked(t) }

func (g goEnd) remove(t *testing.T) {
	netlab.Must(t, g.x.w.dev.IpcSet(fmt.Sprintf("public_key=%s\nremove=true\n", hexKey(g.x.privA.Public()))))
}

func (g goEnd) add(t *testing.T) { netlab.Must(t, g.x.w.dev.IpcSet(g.x.theirs())) }

func (g goEnd) transfer(t *testing.T) (rx, tx uint64) {
	get, err := g.x.w.dev.IpcGet()
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

// dump logs what the test failed with: the Device's log and counters,
// and the handshake messages wireguard-go received and sent.
func (x *interop) dump(t *testing.T) {
	t.Logf("the Device's log:\n%s", x.log)
	t.Logf("the Device's counters: %+v", x.d.Stats())
	if x.w == nil {
		return
	}
	x.w.tap.mu.Lock()
	defer x.w.tap.mu.Unlock()
	for _, dir := range []struct {
		name string
		msgs []wireMsg
	}{{"received", x.w.tap.rx}, {"sent", x.w.tap.tx}} {
		data := 0
		for _, m := range dir.msgs {
			if m.typ == wireguard.TypeData {
				data++
			} else if !strings.HasPrefix(m.peer, "198.18.100.4:") { // not the flood
				t.Logf("wireguard-go %s a message of type %d, MAC2 %v, peer %s", dir.name, m.typ, m.mac2, m.peer)
			}
		}
		t.Logf("wireguard-go %s %d data messages", dir.name, data)
	}
}

// ours is the set lines of the Device's peer, wireguard-go.
func (x *interop) ours() string { return peerLines(x.privB.Public(), x.outB, x.inB) }

// theirs is the set lines of wireguard-go's peer, the Device.
func (x *interop) theirs() string { return peerLines(x.privA.Public(), x.outA, x.inA) }

// peerLines is the set lines of the peer pub at out (none: no endpoint)
// on interopPort, with inside address in.
func peerLines(pub wireguard.Key, out, in netip.Addr) string {
	s := fmt.Sprintf("public_key=%s\nallowed_ip=%s\n", hexKey(pub), netip.PrefixFrom(in, in.BitLen()))
	if out.IsValid() {
		s += fmt.Sprintf("endpoint=%s\n", netip.AddrPortFrom(out, interopPort))
	}
	return s
}

// cidr is a tunnel address in CIDR form, as its device has it.
func (x *interop) cidr(a netip.Addr) string { return netip.PrefixFrom(a, x.inBits).String() }

// startOurs creates the Device, runs it and configures it with its
// private key, the listen port and its peer.
func (x *interop) startOurs(t *testing.T) {
	t.Helper()
	cfg := x.cfg
	cfg.Name = "wgs0"
	cfg.Logger = slog.New(slog.NewTextHandler(x.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var d *Device
	var err error
	x.p.A.Do(t, func() { d, err = New(cfg) })
	netlab.Must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx) }()
	var once sync.Once
	x.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-ran; err != nil {
				t.Errorf("Run: %v", err)
			}
			d.Close()
		})
	}
	t.Cleanup(x.stop)
	x.d, x.h = d, uapi.NewHandler(d, uapi.Limits{})
	peer := x.ours()
	if x.learn {
		peer = peerLines(x.privB.Public(), netip.Addr{}, x.inB)
	}
	apply(t, x.h, fmt.Sprintf("private_key=%s\nlisten_port=%d\n%s", hexKey(x.privA), interopPort, peer))
	netlab.Must(t, x.p.A.LinkUp("wgs0"))
	netlab.Must(t, x.p.A.AddAddr("wgs0", x.cidr(x.inA)))
}

// restartOurs closes the Device and creates it again with the same
// configuration.
func (x *interop) restartOurs(t *testing.T) {
	t.Helper()
	x.stop()
	x.startOurs(t)
}

// peer is the Device's peer, wireguard-go.
func (x *interop) peer() *wireguard.Peer { return x.d.PeerByKey(x.privB.Public()) }

// handshakedSince reports whether both sides completed a handshake,
// the Device's after since.
func (x *interop) handshakedSince(t *testing.T, since time.Time) func() bool {
	return func() bool { return x.peer().LastHandshake().After(since) && x.other.handshaked(t) }
}

// handshake has from (A: the Device, B: wireguard-go) start a handshake,
// the first since the peers were added, unless packets still in flight
// started it already, and waits for both sides to complete it.
func (x *interop) handshake(t *testing.T, from *netlab.NS) {
	t.Helper()
	to := x.inB
	if from == x.p.B {
		to = x.inA
	}
	waitHandshake(t, from, to, x.handshakedSince(t, time.Time{}))
}

// readd removes each side's peer and adds it again: no session. Both
// are removed before either is added, and the handshake messages in
// flight given 100 ms to land and be refused: a handshake an old peer
// answered for a new one would leave that one a session the other side
// does not have. The last packets of a connection closed just before (a
// FIN, an ACK) may start a handshake at once between the new peers: it
// tries again then, a little later.
func (x *interop) readd(t *testing.T) {
	t.Helper()
	for range 10 {
		apply(t, x.h, fmt.Sprintf("public_key=%s\nremove=true\n", hexKey(x.privB.Public())))
		x.other.remove(t)
		time.Sleep(100 * time.Millisecond)
		apply(t, x.h, x.ours())
		x.other.add(t)
		if x.peer().LastHandshake().IsZero() && !x.other.handshaked(t) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("a handshake with peers just added, each of 10 times")
}

// quiet waits until no data message came for half a second (the
// connections closed before are done with) and returns how many came.
func (x *interop) quiet(t *testing.T) uint64 {
	t.Helper()
	n := x.d.Stats().Tunnel.Receive.Datagrams
	for deadline := time.Now().Add(10 * time.Second); ; n = x.d.Stats().Tunnel.Receive.Datagrams {
		time.Sleep(500 * time.Millisecond)
		if x.d.Stats().Tunnel.Receive.Datagrams == n {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatal("data messages still come 10 s after the last transfer")
		}
	}
}

// endpoint is the endpoint of the Device's peer as wg(8) shows it.
func (x *interop) endpoint() netip.AddrPort { return x.h.State().Peers[0].Endpoint }

// checkEndpoint checks the endpoint line of the Device's peer in the
// answer to a UAPI get, what wg show prints: the other end's address on
// the veth, plain (an IPv4 one not v4-mapped, as the dual-stack socket
// receives it), and its port.
func (x *interop) checkEndpoint(t *testing.T) {
	t.Helper()
	var out bytes.Buffer
	netlab.Must(t, x.h.Handle(struct {
		io.Reader
		io.Writer
	}{strings.NewReader("get=1\n\n"), &out}))
	want := "endpoint=" + netip.AddrPortFrom(x.outB, interopPort).String()
	if got := regexp.MustCompile(`(?m)^endpoint=.*$`).FindString(out.String()); got != want {
		t.Errorf("the UAPI get shows %q, want %q", got, want)
	}
}

// waitFor polls cond every 20 ms for up to wait.
func waitFor(t *testing.T, wait time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(wait); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, wait)
		}
	}
}

// tcpStream is one TCP connection from client to a listener on addr in
// server, carrying a deterministic stream in steps (send), so that
// things happen mid-connection, SHA-256-checked at its end (finish).
type tcpStream struct {
	t          *testing.T
	conn, peer net.Conn
	src        io.Reader
	sum        io.Writer
	hash       func() []byte
	sent       int64
	got        atomic.Int64
	done       chan [32]byte
}

func newTCPStream(t *testing.T, client, server *netlab.NS, addr netip.AddrPort) *tcpStream {
	t.Helper()
	var ln net.Listener
	var err error
	server.Do(t, func() { ln, err = net.Listen("tcp", addr.String()) })
	netlab.Must(t, err)
	defer ln.Close()
	s := &tcpStream{t: t, src: rand.NewChaCha8([32]byte{1}), done: make(chan [32]byte, 1)}
	client.Do(t, func() { s.conn, err = net.DialTimeout("tcp", addr.String(), handshakeWait) })
	netlab.Must(t, err)
	t.Cleanup(func() { s.conn.Close() })
	s.peer, err = ln.Accept()
	netlab.Must(t, err)
	t.Cleanup(func() { s.peer.Close() })
	h := sha256.New()
	s.sum, s.hash = h, func() []byte { return h.Sum(nil) }
	go func() {
		h := sha256.New()
		buf := make([]byte, 64<<10)
		for {
			n, err := s.peer.Read(buf)
			h.Write(buf[:n])
			s.got.Add(int64(n))
			if err != nil {
				s.done <- [32]byte(h.Sum(nil))
				return
			}
		}
	}()
	return s
}

// send sends n more bytes and waits until they arrived.
func (s *tcpStream) send(n int64) {
	s.t.Helper()
	s.conn.SetWriteDeadline(time.Now().Add(2 * handshakeWait))
	if _, err := io.CopyN(io.MultiWriter(s.conn, s.sum), s.src, n); err != nil {
		s.t.Fatalf("TCP stream: send: %v", err)
	}
	s.sent += n
	waitFor(s.t, 2*handshakeWait, "TCP stream: the bytes sent to arrive", func() bool { return s.got.Load() >= s.sent })
}

// finish ends the stream and compares the SHA-256 of what arrived with
// what was sent.
func (s *tcpStream) finish() {
	s.t.Helper()
	s.conn.(*net.TCPConn).CloseWrite()
	select {
	case sum := <-s.done:
		if !bytes.Equal(sum[:], s.hash()) || s.got.Load() != s.sent {
			s.t.Fatalf("TCP stream: received %d bytes of %d, SHA-256 %x, sent %x", s.got.Load(), s.sent, sum, s.hash())
		}
	case <-time.After(handshakeWait):
		s.t.Fatal("TCP stream: no end")
	}
}

// udpSend sends each payload once, in order, from ns to dst.
func udpSend(t *testing.T, ns *netlab.NS, dst netip.AddrPort, payloads ...[]byte) {
	t.Helper()
	var c *net.UDPConn
	var err error
	ns.Do(t, func() { c, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst)) })
	netlab.Must(t, err)
	defer c.Close()
	for _, p := range payloads {
		if _, err := c.Write(p); err != nil {
			t.Fatalf("UDP to %v: %v", dst, err)
		}
	}
}

// udpReceive reads a datagram from c within wait (nil: none came).
func udpReceive(c *net.UDPConn, wait time.Duration) []byte {
	buf := make([]byte, 2048)
	c.SetReadDeadline(time.Now().Add(wait))
	n, err := c.Read(buf)
	if err != nil {
		return nil
	}
	return buf[:n]
}

// shortTimers are the protocol's timers with initiations retried after
// 300 ms instead of 5 s, for the tests that lose one on purpose.
func shortTimers() *wireguard.Timers {
	t := wireguard.DefaultTimers
	t.RekeyTimeout, t.RekeyJitter = 300*time.Millisecond, 50*time.Millisecond
	return &t
}

// TestInteropRekey: with the Device's RekeyAfterMessages at 2,000 and
// RejectAfterMessages at 3,000, a TCP stream of 16 MiB to wireguard-go
// (some 12,000 data messages) goes through new handshakes mid-stream
// and arrives whole (SHA-256); wireguard-go receives the data messages
// under several receiver indices (sessions), none with a counter at or
// past 3,000 (no message is sent on a keypair out of counters: those
// packets wait, staged, for the next session).
func TestInteropRekey(t *testing.T) {
	timers := shortTimers()
	timers.RekeyAfterMessages, timers.RejectAfterMessages = 2000, 3000
	x := newInterop(t, "wgrekey", Config{Timers: timers})
	x.handshake(t, x.p.A)
	first := x.peer().LastHandshake()
	netlab.TCPTransfer(t, x.p.A, x.p.B, netip.AddrPortFrom(x.inB, 5001), 16<<20, false)
	sessions := map[uint32]uint64{} // receiver index: messages
	for _, m := range x.w.tap.received() {
		if m.typ != wireguard.TypeData {
			continue
		}
		sessions[m.index]++
		if m.counter >= timers.RejectAfterMessages {
			t.Errorf("a data message with counter %d under receiver index %#x: past RejectAfterMessages", m.counter, m.index)
		}
	}
	if len(sessions) < 3 || !x.peer().LastHandshake().After(first) {
		t.Errorf("%d sessions (%v), last handshake %v after the first: no rekey mid-stream", len(sessions), sessions, x.peer().LastHandshake().Sub(first))
	}
	st := x.d.Stats()
	t.Logf("%d sessions; %d packets out of counters before the next handshake, %d staged (%d dropped, the queue full)",
		len(sessions), st.Unsealed, st.Staged.Staged, st.Staged.Full)
}

// TestInteropRoaming: wireguard-go moves its socket to another port
// mid-connection; the Device's endpoint for it follows its first data
// message from there (as wg show shows it) and the TCP stream goes on;
// it moves again with nothing to send but keepalives, and the endpoint
// follows its first keepalive.
// Then datagrams from another address (a replay of wireguard-go's last
// data message, a forged one under the Device's receiver index, a junk
// initiation) are refused and do not move the endpoint.
func TestInteropRoaming(t *testing.T) {
	x := newInterop(t, "wgroam", Config{})
	x.handshake(t, x.p.B)
	s := newTCPStream(t, x.p.B, x.p.A, netip.AddrPortFrom(x.inA, 5001)) // wireguard-go sends
	s.send(1 << 20)
	if ep := x.endpoint(); ep != netip.AddrPortFrom(x.p.AddrB, interopPort) {
		t.Fatalf("endpoint %v before roaming", ep)
	}
	const moved = interopPort + 2
	var err error
	x.p.B.Do(t, func() { err = x.w.dev.IpcSet(fmt.Sprintf("listen_port=%d\n", moved)) }) // its new socket in B
	netlab.Must(t, err)
	s.send(1 << 20)
	s.finish()
	roamed := netip.AddrPortFrom(x.p.AddrB, moved)
	if ep := x.endpoint(); ep != roamed {
		t.Fatalf("endpoint %v after wireguard-go moved to %v", ep, roamed)
	}
	netlab.TCPTransfer(t, x.p.A, x.p.B, netip.AddrPortFrom(x.inB, 5002), 4<<20, false)

	// With nothing to send but its persistent keepalives, wireguard-go
	// moves again: the endpoint follows its first keepalive from there.
	roamed = netip.AddrPortFrom(x.p.AddrB, moved+1)
	data := x.quiet(t)
	x.p.B.Do(t, func() {
		err = x.w.dev.IpcSet(fmt.Sprintf("listen_port=%d\npublic_key=%s\npersistent_keepalive_interval=1\n", roamed.Port(), hexKey(x.privA.Public())))
	})
	netlab.Must(t, err)
	waitFor(t, 10*time.Second, "the endpoint following a keepalive", func() bool { return x.endpoint() == roamed })
	if n := x.d.Stats().Tunnel.Receive.Datagrams; n != data {
		t.Fatalf("%d data messages came meanwhile: the endpoint did not move for a keepalive", n-data)
	}
	netlab.TCPTransfer(t, x.p.A, x.p.B, netip.AddrPortFrom(x.inB, 5004), 1<<20, false)

	spoofed := netip.MustParseAddr("198.18.100.3")
	netlab.Must(t, x.p.B.AddAddr(netlab.PairLinkB, spoofed.String()+"/24"))
	var c *net.UDPConn
	x.p.B.Do(t, func() {
		c, err = net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(spoofed, interopPort)), net.UDPAddrFromAddrPort(netip.AddrPortFrom(x.p.AddrA, interopPort)))
	})
	netlab.Must(t, err)
	defer c.Close()
	x.w.tap.mu.Lock()
	replay := bytes.Clone(x.w.tap.lastData)
	x.w.tap.mu.Unlock()
	forged := make([]byte, wireguard.HeaderLen+64+wireguard.TagLen)
	copy(forged, replay[:8]) // type and the Device's receiver index
	binary.LittleEndian.PutUint64(forged[8:], 1<<20)
	junk := make([]byte, wireguard.InitiationSize)
	junk[0] = wireguard.TypeInitiation
	before := x.d.Stats().Tunnel.Receive
	for _, b := range [][]byte{replay, forged, junk} {
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "the spoofed datagrams refused", func() bool {
		r := x.d.Stats().Tunnel.Receive
		return r.Replay > before.Replay && r.Auth > before.Auth && strings.Contains(x.log.String(), "wrong mac1")
	})
	if ep := x.endpoint(); ep != roamed {
		t.Fatalf("endpoint %v after unauthenticated datagrams from %v", ep, spoofed)
	}
	if r := x.d.Stats().Tunnel.Receive; r.Roamed != before.Roamed {
		t.Fatalf("the tunnel roamed %d times for unauthenticated datagrams", r.Roamed-before.Roamed)
	}
	netlab.TCPTransfer(t, x.p.A, x.p.B, netip.AddrPortFrom(x.inB, 5003), 1<<20, true)
}

// TestInteropCookieUnderLoad: with the Device forced under load
// (Config.UnderLoad), it answers wireguard-go's initiation with a cookie
// reply and completes the handshake only with wireguard-go's next
// initiation, which carries MAC2; and, initiating, it answers
// wireguard-go's response with a cookie reply, so that its own next
// initiation's response carries MAC2 and completes it. Then the other
// way round: wireguard-go, put under load by a flood, answers the
// Device's initiation with a cookie reply and the Device's next
// initiation carries MAC2.
func TestInteropCookieUnderLoad(t *testing.T) {
	var load atomic.Bool
	load.Store(true)
	// Initiations retried after a second: wireguard-go under load may
	// take longer than 300 ms to answer, and an answer to an initiation
	// retried meanwhile is refused.
	timers := wireguard.DefaultTimers
	timers.RekeyTimeout = time.Second
	x := newInterop(t, "wgcookie", Config{UnderLoad: load.Load, Timers: &timers})
	cookies := func() int {
		return x.w.tap.count(true, func(m wireMsg) bool { return m.typ == wireguard.TypeCookieReply })
	}
	withMAC2 := func(typ uint32) int {
		return x.w.tap.count(false, func(m wireMsg) bool { return m.typ == typ && m.mac2 })
	}
	x.handshake(t, x.p.B)
	if cookies() == 0 || withMAC2(wireguard.TypeInitiation) == 0 {
		t.Fatalf("wireguard-go initiating: %d cookie replies, %d initiations with MAC2", cookies(), withMAC2(wireguard.TypeInitiation))
	}
	netlab.TCPTransfer(t, x.p.A, x.p.B, netip.AddrPortFrom(x.inB, 5001), 1<<20, false)

	x.readd(t)
	before := withMAC2(wireguard.TypeResponse)
	x.handshake(t, x.p.A)
	if withMAC2(wireguard.TypeResponse) == before {
		t.Fatalf("the Device initiating: no response with MAC2 (%d cookie replies in all)", cookies())
	}
	netlab.TCPTransfer(t, x.p.A, x.p.B, netip.AddrPortFrom(x.inB, 5002), 1<<20, true)

	// wireguard-go under load: a flood of initiations from a stranger
	// (another address of A's, another static key) fills its queue of
	// handshake messages past an eighth, its own measure of load, so
	// that it answers the Device's initiation with a cookie reply; the
	// Device's next initiation carries MAC2 and completes the handshake.
	load.Store(false)
	stop := floodInitiations(t, x, netip.MustParseAddr("198.18.100.4"), 200)
	ours := netip.AddrPortFrom(x.p.AddrA, interopPort).String()
	waitFor(t, 10*time.Second, "wireguard-go under load", func() bool {
		return x.w.tap.count(false, func(m wireMsg) bool { return m.typ == wireguard.TypeCookieReply }) > 0
	})
	x.readd(t)
	toUs := func() int {
		return x.w.tap.count(false, func(m wireMsg) bool { return m.typ == wireguard.TypeCookieReply && m.peer == ours })
	}
	x.handshake(t, x.p.A)
	stop()
	fromUs := x.w.tap.count(true, func(m wireMsg) bool { return m.typ == wireguard.TypeInitiation && m.mac2 && m.peer == ours })
	if toUs() == 0 || fromUs == 0 {
		t.Fatalf("wireguard-go under load: %d cookie replies to the Device, %d initiations from it with MAC2", toUs(), fromUs)
	}
	netlab.TCPTransfer(t, x.p.A, x.p.B, netip.AddrPortFrom(x.inB, 5003), 1<<20, false)
}

// floodInitiations sends wireguard-go bursts of copies of one valid
// initiation (its MAC1 right, from a static key that is not its peer's)
// from addr, an address it adds to A, every 100 ms until stop is
// called: a burst puts more than 128 in its handshake queue, its mark of
// load, which it keeps for a second; while the bursts, at some 2,000
// messages a second, leave it the time to answer the Device's
// initiations before they are retried (a backlog in its socket would
// make the answers late, and an answer to an initiation retried is
// refused).
func floodInitiations(t *testing.T, x *interop, addr netip.Addr, burst int) (stop func()) {
	t.Helper()
	netlab.Must(t, x.p.A.AddAddr(netlab.PairLinkA, addr.String()+"/24"))
	stranger, err := wireguard.NewDevice(wireguard.Config{PrivateKey: newKey(t)})
	netlab.Must(t, err)
	p, err := stranger.AddPeer(wireguard.PeerConfig{PublicKey: x.privB.Public()})
	netlab.Must(t, err)
	msg, err := stranger.AppendInitiation(nil, p)
	netlab.Must(t, err)
	var c *net.UDPConn
	x.p.A.Do(t, func() {
		c, err = net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, 0)), net.UDPAddrFromAddrPort(netip.AddrPortFrom(x.p.AddrB, interopPort)))
	})
	netlab.Must(t, err)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			for range burst {
				c.Write(msg)
			}
		}
	})
	var once sync.Once
	stop = func() { once.Do(func() { close(done); wg.Wait(); c.Close() }) }
	t.Cleanup(stop)
	return stop
}

// TestInteropRestart: wireguard-go is closed and created again with the
// same keys mid-connection; its new handshake (a newer timestamp, new
// ephemeral keys) is accepted and the connection goes on, and a new one
// passes. Then the Device is closed and created again with the same
// configuration: the first datagram waits for a fresh handshake, and no
// data message wireguard-go received, before or after either restart,
// repeats a (receiver index, counter) pair, its indices after the
// Device's restart all new: a receiver index names one keypair of
// wireguard-go's, so no key and nonce were used twice.
func TestInteropRestart(t *testing.T) {
	x := newInterop(t, "wgrestart", Config{})
	x.handshake(t, x.p.B)
	s := newTCPStream(t, x.p.A, x.p.B, netip.AddrPortFrom(x.inB, 5001))
	s.send(1 << 20)
	since := x.peer().LastHandshake()
	x.w.restart(t)
	waitHandshake(t, x.p.B, x.inA, x.handshakedSince(t, since))
	s.send(1 << 20)
	s.finish()
	netlab.TCPTransfer(t, x.p.A, x.p.B, netip.AddrPortFrom(x.inB, 5002), 4<<20, false)

	old := map[uint32]bool{}
	for _, m := range x.w.tap.received() {
		if m.typ == wireguard.TypeData {
			old[m.index] = true
		}
	}
	x.restartOurs(t)
	sink := x.p.B.ListenUDP(t, netip.AddrPortFrom(x.inB, 7000))
	udpSend(t, x.p.A, netip.AddrPortFrom(x.inB, 7000), []byte("after the restart"))
	if got := udpReceive(sink, handshakeWait); string(got) != "after the restart" {
		t.Fatalf("the first datagram after the Device's restart: %q", got)
	}
	netlab.TCPTransfer(t, x.p.A, x.p.B, netip.AddrPortFrom(x.inB, 5003), 4<<20, false)
	type nonce struct {
		index   uint32
		counter uint64
	}
	seen := map[nonce]bool{}
	var after int
	for _, m := range x.w.tap.received() {
		if m.typ != wireguard.TypeData || m.peer != netip.AddrPortFrom(x.p.AddrA, interopPort).String() {
			continue
		}
		n := nonce{m.index, m.counter}
		if seen[n] {
			t.Fatalf("receiver index %#x and counter %d twice", m.index, m.counter)
		}
		seen[n] = true
		if _, ok := old[m.index]; !ok {
			after++
		}
	}
	if after == 0 {
		t.Fatal("no data message under a new receiver index after the Device's restart")
	}
	t.Logf("%d data messages, %d under receiver indices new since the Device's restart", len(seen), after)
}

// TestInteropStaged: datagrams sent to wireguard-go while it does not
// answer (the Device is not its peer yet) wait for the handshake, the
// oldest dropped (counted) past wireguard.StagedPackets; once
// wireguard-go takes the Device as its peer, the next initiation
// completes and the newest StagedPackets datagrams arrive, in order.
func TestInteropStaged(t *testing.T) {
	x := newInterop(t, "wgstaged", Config{Timers: shortTimers()})
	netlab.Must(t, x.w.dev.IpcSet(fmt.Sprintf("public_key=%s\nremove=true\n", hexKey(x.privA.Public()))))
	sink := x.p.B.ListenUDP(t, netip.AddrPortFrom(x.inB, 7000))
	const n = wireguard.StagedPackets + 72
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = binary.BigEndian.AppendUint32(make([]byte, 0, 64), uint32(i))[:64]
	}
	udpSend(t, x.p.A, netip.AddrPortFrom(x.inB, 7000), payloads...)
	waitFor(t, 10*time.Second, "the datagrams staged", func() bool { return x.d.Stats().Staged.Staged == n })
	if st, staged := x.d.Stats().Staged, x.peer().Staged(); st.Full != n-wireguard.StagedPackets || staged != wireguard.StagedPackets {
		t.Fatalf("%d staged, %+v", staged, st)
	}
	netlab.Must(t, x.w.dev.IpcSet(x.theirs()))
	for i := n - wireguard.StagedPackets; i < n; i++ {
		got := udpReceive(sink, handshakeWait)
		if len(got) != 64 || binary.BigEndian.Uint32(got) != uint32(i) {
			t.Fatalf("datagram %d: %x (stats %+v, handshake %v, staged %d)\n%s", i, got, x.d.Stats(), x.peer().LastHandshake(), x.peer().Staged(), x.log)
		}
	}
	if got := udpReceive(sink, 200*time.Millisecond); got != nil {
		t.Fatalf("another datagram: %x", got)
	}
	if st := x.d.Stats().Staged; st.Sent != wireguard.StagedPackets || x.peer().Staged() != 0 {
		t.Fatalf("staged after the handshake: %+v", st)
	}
}
