package vpn

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/tunnel"
	"github.com/gsoplane/gsoplane/internal/netlab"
)

func TestMain(m *testing.M) { os.Exit(netlab.Main(m)) }

var (
	innerA = netip.MustParseAddr("10.0.0.1")
	innerB = netip.MustParseAddr("10.0.0.2")
	psk    = []byte("0123456789abcdef0123456789abcdef")
)

// end opens the example's tunnel in ns, as its flags say, gives the TUN
// device addr/24 and runs it until the test ends.
func end(t *testing.T, ns *netlab.NS, local, peer netip.Addr, addr netip.Addr) *tunnel.Tunnel {
	t.Helper()
	key := filepath.Join(t.TempDir(), "vpn.key")
	netlab.Must(t, os.WriteFile(key, psk, 0o600))
	args := []string{"-key", key, "-local", netip.AddrPortFrom(local, 51820).String(), "-peer", netip.AddrPortFrom(peer, 51820).String()}
	var tnl *tunnel.Tunnel
	var err error
	ns.Do(t, func() { tnl, err = Open(args, io.Discard) })
	netlab.Must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tnl.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		tnl.Close()
	})
	netlab.Must(t, ns.AddAddr("vpn0", addr.String()+"/24"))
	netlab.Must(t, ns.LinkUp("vpn0"))
	return tnl
}

// TCP both ways (SHA-256 compared) and a sequence-checked UDP stream go
// through the encrypted tunnel, in batches, nothing refused.
func TestVPN(t *testing.T) {
	p := netlab.NewPairT(t, "vpn")
	a := end(t, p.A, p.AddrA, p.AddrB, innerA)
	b := end(t, p.B, p.AddrB, p.AddrA, innerB)
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
	a := end(t, p.A, p.AddrA, p.AddrB, innerA)
	peer := netip.AddrPortFrom(p.AddrB, 51820)
	var c *net.UDPConn
	var err error
	p.B.Do(t, func() {
		c, err = net.DialUDP("udp", net.UDPAddrFromAddrPort(peer), net.UDPAddrFromAddrPort(netip.AddrPortFrom(p.AddrA, 51820)))
	})
	netlab.Must(t, err)
	defer c.Close()
	s, _, err := newCiphers(psk, peer, netip.AddrPortFrom(p.AddrA, 51820)) // B's sealer: the attacker has the key
	netlab.Must(t, err)
	sealed := make([]byte, headerLen+100+tagLen)
	s.seal([][]byte{sealed}, []int{0})
	forged := make([]byte, len(sealed))
	binary.LittleEndian.PutUint32(forged, msgData)
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
