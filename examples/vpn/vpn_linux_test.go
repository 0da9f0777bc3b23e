package vpn

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/tunnel"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

func TestMain(m *testing.M) { os.Exit(netlab.Main(m)) }

var (
	innerA = netip.MustParseAddr("10.0.0.1")
	innerB = netip.MustParseAddr("10.0.0.2")
	psk    = []byte("0123456789abcdef0123456789abcdef")
)

// end opens the example's tunnel in ns, as its flags say, with the key
// and a state file in dir, gives the TUN device addr/24 and runs it
// until stop is called or the test ends.
func end(t *testing.T, ns *netlab.NS, dir string, local, peer netip.Addr, addr netip.Addr) (tnl *tunnel.Tunnel, stop func()) {
	t.Helper()
	key := filepath.Join(dir, "vpn.key")
	netlab.Must(t, os.WriteFile(key, psk, 0o600))
	args := []string{"-key", key, "-state", filepath.Join(dir, "vpn.state"),
		"-local", netip.AddrPortFrom(local, 51820).String(), "-peer", netip.AddrPortFrom(peer, 51820).String()}
	var err error
	ns.Do(t, func() { tnl, err = Open(args, io.Discard) })
	netlab.Must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tnl.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
			tnl.Close()
		})
	}
	t.Cleanup(stop)
	netlab.Must(t, ns.AddAddr("vpn0", addr.String()+"/24"))
	netlab.Must(t, ns.LinkUp("vpn0"))
	return tnl, stop
}

// TCP both ways (SHA-256 compared) and a sequence-checked UDP stream go
// through the encrypted tunnel, in batches, nothing refused.
func TestVPN(t *testing.T) {
	p := netlab.NewPairT(t, "vpn")
	a, _ := end(t, p.A, t.TempDir(), p.AddrA, p.AddrB, innerA)
	b, _ := end(t, p.B, t.TempDir(), p.AddrB, p.AddrA, innerB)
	netlab.TCPTransfer(t, p.A, p.B, netip.AddrPortFrom(innerB, 5001), 32<<20, false)
	netlab.TCPTransfer(t, p.A, p.B, netip.AddrPortFrom(innerB, 5002), 32<<20, true)
	netlab.UDPSequence(t, p.A, p.B, netip.AddrPortFrom(innerB, 9000), 10000, 1200, 64)
	for _, tnl := range []*tunnel.Tunnel{a, b} {
		st := tnl.Stats()
		t.Logf("%.1f datagrams per sendmmsg, %.1f per recvmmsg; receive %+v", st.DatagramsPerSend(), st.DatagramsPerReceive(), st.Receive)
		if st.Receive.Refused+st.Receive.Short != 0 || st.Fallbacks != 0 || st.Send.GSOMessages == 0 || st.Receive.GROMessages == 0 {
			t.Errorf("send %+v, receive %+v, %d fall-backs", st.Send, st.Receive, st.Fallbacks)
		}
	}
}

// Forged, replayed and foreign datagrams from the peer's address are
// dropped and counted by reason, and the tunnel goes on.
func TestVPNForgeries(t *testing.T) {
	p := netlab.NewPairT(t, "vpn")
	a, _ := end(t, p.A, t.TempDir(), p.AddrA, p.AddrB, innerA)
	peer := netip.AddrPortFrom(p.AddrB, 51820)
	var c *net.UDPConn
	var err error
	p.B.Do(t, func() {
		c, err = net.DialUDP("udp", net.UDPAddrFromAddrPort(peer), net.UDPAddrFromAddrPort(netip.AddrPortFrom(p.AddrA, 51820)))
	})
	netlab.Must(t, err)
	defer c.Close()
	state, err := loadState(filepath.Join(t.TempDir(), "b"), discard)
	netlab.Must(t, err)
	s, _, err := newCiphers(psk, peer, netip.AddrPortFrom(p.AddrA, 51820), state) // B's sealer: the attacker has the key
	netlab.Must(t, err)
	sealed := make([]byte, headerLen+100+tagLen)
	s.seal([][]byte{sealed}, []int{0})
	forged := make([]byte, len(sealed))
	binary.LittleEndian.PutUint32(forged, msgData)
	binary.LittleEndian.PutUint32(forged[4:], 1)
	binary.LittleEndian.PutUint64(forged[8:], 7)
	for _, d := range [][]byte{sealed, sealed, sealed, forged, forged, []byte("not a tunnel datagram, long enough to open")} {
		if _, err := c.Write(d); err != nil {
			t.Fatal(err)
		}
	}
	var st tunnel.Stats
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if st = a.Stats(); st.Receive.Datagrams >= 6 {
			break
		}
	}
	if r := st.Receive; r.Replay != 2 || r.Auth != 2 || r.Malformed != 1 || r.Datagrams != 6 {
		t.Errorf("receive %+v: want 2 replays, 2 bad tags, 1 malformed of 6", r)
	}
	if st.Return.Drops.Total() != 6 { // the accepted one holds no IP packet
		t.Errorf("return path drops %v, want 6", st.Return.Drops)
	}
}

// After either end or both restart, on the same state files, traffic
// both ways resumes within epochPeriod (the receiver that restarted
// refuses its peer's current epoch, which could be replayed, and takes
// the next); nothing is refused but as a replay.
func TestVPNRestart(t *testing.T) {
	p := netlab.NewPairT(t, "vpn")
	dirA, dirB := t.TempDir(), t.TempDir()
	a, stopA := end(t, p.A, dirA, p.AddrA, p.AddrB, innerA)
	b, stopB := end(t, p.B, dirB, p.AddrB, p.AddrA, innerB)
	echoWithin(t, p, 5*time.Second)
	// replaysOnly checks that an end refused nothing but replays.
	replaysOnly := func(restart, name string, tnl *tunnel.Tunnel) {
		if r := tnl.Stats().Receive; r.Refused != r.Replay {
			t.Errorf("restart %s: %s's receive %+v: want replays only refused", restart, name, r)
		}
	}
	for _, restart := range []string{"B", "A", "both"} {
		if restart != "A" {
			replaysOnly(restart, "B", b)
			stopB()
			b, stopB = end(t, p.B, dirB, p.AddrB, p.AddrA, innerB)
		}
		if restart != "B" {
			replaysOnly(restart, "A", a)
			stopA()
			a, stopA = end(t, p.A, dirA, p.AddrA, p.AddrB, innerA)
		}
		took := echoWithin(t, p, epochPeriod+5*time.Second) // the bound, and room for a loaded machine
		t.Logf("restart %s: echo back after %v; A refused %d as replays, B %d", restart, took, a.Stats().Receive.Replay, b.Stats().Receive.Replay)
		replaysOnly(restart, "A", a)
		replaysOnly(restart, "B", b)
	}
}

// echoWithin sends a UDP datagram from A to an echo server on B's inner
// address every 20 ms until one comes back, and returns how long that
// took; it fails the test past wait.
func echoWithin(t *testing.T, p *netlab.Pair, wait time.Duration) time.Duration {
	t.Helper()
	addr := netip.AddrPortFrom(innerB, 7007)
	defer netlab.EchoUDP(t, p.B, addr)()
	var c *net.UDPConn
	var err error
	p.A.Do(t, func() { c, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(addr)) })
	netlab.Must(t, err)
	defer c.Close()
	start := time.Now()
	buf := make([]byte, 64)
	for time.Since(start) < wait {
		c.Write([]byte("echo"))
		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		if k, err := c.Read(buf); err == nil && string(buf[:k]) == "echo" {
			return time.Since(start)
		}
	}
	t.Fatalf("no echo through the tunnel within %v", wait)
	return 0
}
