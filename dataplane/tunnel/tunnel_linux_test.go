package tunnel_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/tunnel"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
	"github.com/gsoplane/gsoplane/internal/testing/syncbuf"
)

func TestMain(m *testing.M) { os.Exit(netlab.Main(m)) }

const (
	port     = 51820
	tunName  = "tnl0"
	within   = 100 * time.Millisecond // Run and Close return within it
	tcpBytes = 16 << 20
)

// Inner addresses: A's and B's on their TUN devices, one /24.
var (
	innerA = netip.MustParseAddr("198.19.0.1")
	innerB = netip.MustParseAddr("198.19.0.2")
)

// end is one side of a test tunnel and what it logged.
type end struct {
	ns   *netlab.NS
	tnl  *tunnel.Tunnel
	logs *syncbuf.Buffer
	done chan error // Run's result
	ran  time.Time  // when Run returned, before its result is sent on done
	stop context.CancelFunc
}

// openEnd opens a tunnel in ns from local to peer with cfg's framing,
// gives its TUN device addr/24 and brings it up; it is closed in
// t.Cleanup.
func openEnd(t *testing.T, ns *netlab.NS, local, peer netip.Addr, addr netip.Addr, cfg tunnel.Config) *end {
	t.Helper()
	cfg.Local, cfg.Peer = netip.AddrPortFrom(local, port), netip.AddrPortFrom(peer, port)
	return openTunnel(t, ns, addr, cfg)
}

// openTunnel opens a tunnel in ns as cfg says, logging to the end's
// buffer, gives its TUN device addr/24 and brings it up, without IPv6
// (whose chatter would go to no peer of a tunnel with several); it is
// closed in t.Cleanup.
func openTunnel(t *testing.T, ns *netlab.NS, addr netip.Addr, cfg tunnel.Config) *end {
	t.Helper()
	e := &end{ns: ns, logs: new(syncbuf.Buffer)}
	cfg.Name = tunName
	cfg.Logger = slog.New(slog.NewTextHandler(e.logs, nil))
	var err error
	ns.Do(t, func() { e.tnl, err = tunnel.Open(cfg) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.tnl.Close() })
	netlab.Must(t, ns.Sysctl("net/ipv6/conf/"+tunName+"/disable_ipv6", "1"))
	netlab.Must(t, ns.LinkUp(tunName))
	netlab.Must(t, ns.AddAddr(tunName, addr.String()+"/24"))
	return e
}

// start runs the tunnel until stopped or closed.
func (e *end) start() {
	ctx, cancel := context.WithCancel(context.Background())
	e.done, e.stop = make(chan error, 1), cancel
	go func() {
		err := e.tnl.Run(ctx)
		e.ran = time.Now()
		e.done <- err
	}()
}

// newTunnel builds the two ends of a plaintext tunnel over a fresh pair
// and starts them.
func newTunnel(t *testing.T, cfg tunnel.Config) (*netlab.Pair, *end, *end) {
	t.Helper()
	p := netlab.NewPairT(t, "tunnel")
	a := openEnd(t, p.A, p.AddrA, p.AddrB, innerA, cfg)
	b := openEnd(t, p.B, p.AddrB, p.AddrA, innerB, cfg)
	a.start()
	b.start()
	return p, a, b
}

// TCP goes both ways through the tunnel, SHA-256 checked, in
// UDP_SEGMENT and UDP_GRO batches, with the MTU derived from the veth's
// 1500 and nothing warned about.
func TestTunnelTCP(t *testing.T) {
	p, a, b := newTunnel(t, tunnel.Config{})
	netlab.TCPTransfer(t, p.A, p.B, netip.AddrPortFrom(innerB, 5001), tcpBytes, false)
	netlab.TCPTransfer(t, p.A, p.B, netip.AddrPortFrom(innerB, 5002), tcpBytes, true)
	for _, e := range []*end{a, b} {
		st := e.tnl.Stats()
		t.Logf("%s: %.1f datagrams per sendmmsg, %.1f per recvmmsg; %+v", e.ns.Name, st.DatagramsPerSend(), st.DatagramsPerReceive(), st)
		if e.tnl.MTU() != tunnel.InnerMTU(1500, false, tunnel.DefaultHeadroom, 0) {
			t.Errorf("%s: inner MTU %d", e.ns.Name, e.tnl.MTU())
		}
		if st.Fallbacks != 0 || e.logs.String() != "" {
			t.Errorf("%s: %d fall-backs, logged %q", e.ns.Name, st.Fallbacks, e.logs)
		}
		if st.Send.GSOMessages == 0 || st.Receive.GROMessages == 0 || st.DatagramsPerSend() < 2 {
			t.Errorf("%s: no batches: %+v %+v", e.ns.Name, st.Send, st.Receive)
		}
		if d := st.Forward.Drops.Total() + st.Return.Drops.Total() + st.Send.Dropped + st.Receive.Refused; d != 0 {
			t.Errorf("%s: %d drops", e.ns.Name, d)
		}
	}
}

// The inner MTU comes from the path MTU to the peer, over IPv4 and IPv6,
// and the framing: the veth's 1500, or a route's mtu.
func TestTunnelMTU(t *testing.T) {
	p := netlab.NewPairT(t, "tunnel")
	netlab.Must(t, p.A.Netlink().LinkSetMTU(p.A.LinkT(t, netlab.PairLinkA), 1400))
	for _, c := range []struct {
		peer       netip.Addr
		head, tail int
		want       int
	}{
		{p.AddrB, 0, 0, 1400 - 20 - 8 - 16},
		{p.AddrB, 16, 16, 1400 - 20 - 8 - 32},
		{p.Addr6B, 0, 0, 1400 - 40 - 8 - 16},
		{p.Addr6B, 24, 16, 1400 - 40 - 8 - 40},
	} {
		var tnl *tunnel.Tunnel
		var err error
		p.A.Do(t, func() {
			tnl, err = tunnel.Open(tunnel.Config{Name: tunName, Peer: netip.AddrPortFrom(c.peer, port), Headroom: c.head, Tailroom: c.tail})
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := tnl.MTU(); got != c.want {
			t.Errorf("peer %v, headroom %d, tailroom %d: inner MTU %d, want %d", c.peer, c.head, c.tail, got, c.want)
		}
		if l := p.A.LinkT(t, tunName); l.Attrs().MTU != c.want {
			t.Errorf("TUN device MTU %d, want %d", l.Attrs().MTU, c.want)
		}
		netlab.Must(t, tnl.Close())
	}
}

// An inner MTU too large for the path makes the sink give UDP_SEGMENT up:
// warned about once, counted, and the traffic still goes through.
func TestTunnelFallbackWarning(t *testing.T) {
	p, a, _ := newTunnel(t, tunnel.Config{MTU: 1500})
	netlab.TCPTransfer(t, p.A, p.B, netip.AddrPortFrom(innerB, 5001), 4<<20, false)
	st := a.tnl.Stats()
	logs := a.logs.String()
	t.Logf("%+v\n%s", st.Send, logs)
	if st.Fallbacks == 0 || !strings.Contains(logs, "level=WARN") || strings.Count(logs, "\n") > 2 {
		t.Errorf("%d fall-backs, logged %q: want one warning", st.Fallbacks, logs)
	}
}

// Run returns within 100 ms of its context's end or of Close, idle and
// under load (a TCP stream), and a closed tunnel leaves no goroutine,
// file descriptor (netlab.Main checks), device or route. Close itself
// takes longer, as the kernel deletes the TUN device (see the package
// comment): it is logged, not bound. The bound is a bound, not a speed:
// this machine is shared and its scheduler sometimes runs a goroutine
// tens of milliseconds late, so a case fails only when three tries in a
// row miss it (a Run that waits for a poll timeout or a drain of a
// second misses it every time).
func TestTunnelStop(t *testing.T) {
	for _, load := range []bool{false, true} {
		for _, byClose := range []bool{false, true} {
			name := map[bool]string{false: "idle", true: "load"}[load] + map[bool]string{false: "/cancel", true: "/close"}[byClose]
			t.Run(name, func(t *testing.T) {
				var late []string
				for range 3 {
					if l := checkStop(t, load, byClose); l == "" {
						return
					} else {
						late = append(late, l)
					}
				}
				t.Errorf("three tries: %s", strings.Join(late, "; "))
			})
		}
	}
}

// checkStop stops a tunnel and checks that nothing is left; it returns
// what took longer than within, or "".
func checkStop(t *testing.T, load, byClose bool) (late string) {
	goroutines := runtime.NumGoroutine()
	p, a, b := newTunnel(t, tunnel.Config{})
	stopLoad := func() {}
	if load {
		stopLoad = tcpLoad(t, p)
		time.Sleep(200 * time.Millisecond)
	}
	start := time.Now()
	if byClose {
		netlab.Must(t, a.tnl.Close())
		t.Logf("Close took %v", time.Since(start))
	} else {
		a.stop()
	}
	select {
	case err := <-a.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		if el := a.ran.Sub(start); el > within {
			late = fmt.Sprintf("Run returned after %v", el)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return")
	}
	netlab.Must(t, a.tnl.Close())
	netlab.Must(t, b.tnl.Close())
	stopLoad()
	if _, err := p.A.Link(tunName); err == nil {
		t.Errorf("%s still there after Close", tunName)
	}
	if rs, err := p.A.Netlink().RouteGet(innerB.AsSlice()); err == nil {
		t.Errorf("a route to the tunnel's peer after Close: %v", rs)
	}
	waitGoroutines(t, goroutines)
	return late
}

// tcpLoad runs a TCP stream from A to B through the tunnel until stop.
func tcpLoad(t *testing.T, p *netlab.Pair) (stop func()) {
	t.Helper()
	addr := netip.AddrPortFrom(innerB, 5003).String()
	var ln net.Listener
	var c net.Conn
	var err error
	p.B.Do(t, func() { ln, err = net.Listen("tcp", addr) })
	netlab.Must(t, err)
	defer ln.Close()
	p.A.Do(t, func() { c, err = net.DialTimeout("tcp", addr, 5*time.Second) })
	netlab.Must(t, err)
	s, err := ln.Accept()
	netlab.Must(t, err)
	var wg sync.WaitGroup
	wg.Go(func() { io.Copy(io.Discard, s) })
	wg.Go(func() {
		for buf := make([]byte, 256<<10); ; {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	})
	return func() {
		c.Close()
		s.Close()
		wg.Wait()
	}
}

// waitGoroutines fails the test if more than n goroutines are left after
// a second.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for runtime.NumGoroutine() > n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := runtime.NumGoroutine(); got > n {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines left, %d before:\n%s", got, n, buf[:runtime.Stack(buf, true)])
	}
}

// A UDP stream goes through in order, nothing lost.
func TestTunnelUDP(t *testing.T) {
	p, _, b := newTunnel(t, tunnel.Config{})
	netlab.UDPSequence(t, p.A, p.B, netip.AddrPortFrom(innerB, 9000), 20000, 1200, 64)
	if st := b.tnl.Stats(); st.Receive.Datagrams < 20000 {
		t.Errorf("B received %d datagrams", st.Receive.Datagrams)
	}
}

// When the peer goes away, its host answers with ICMP port unreachable:
// the errors are counted, the tunnel goes on, and once the peer is back
// the traffic flows again.
func TestTunnelPeerGone(t *testing.T) {
	p, a, b := newTunnel(t, tunnel.Config{})
	netlab.Must(t, b.tnl.Close())
	var c net.Conn
	var err error
	p.A.Do(t, func() { c, err = net.Dial("udp", netip.AddrPortFrom(innerB, 9000).String()) })
	netlab.Must(t, err)
	defer c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for st := a.tnl.Stats(); st.Send.Refused+st.Receive.PeerErrors < 3; st = a.tnl.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("no ICMP errors counted: %+v %+v", st.Send, st.Receive)
		}
		c.Write([]byte("anyone there?"))
		time.Sleep(5 * time.Millisecond)
	}
	b = openEnd(t, p.B, p.AddrB, p.AddrA, innerB, tunnel.Config{})
	b.start()
	netlab.TCPTransfer(t, p.A, p.B, netip.AddrPortFrom(innerB, 5001), 4<<20, false)
	netlab.TCPTransfer(t, p.A, p.B, netip.AddrPortFrom(innerB, 5002), 4<<20, true)
	select {
	case err := <-a.done:
		t.Fatalf("A's Run returned %v", err)
	default:
	}
	st := a.tnl.Stats()
	t.Logf("A: %d sends refused, %d ICMP errors on receive", st.Send.Refused, st.Receive.PeerErrors)
}
