package xsk

// The XDP program's rules on the wire: frames from a peer through a veth
// into a real port, native and generic mode, what the sockets get, what
// the kernel gets, and the counters.

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// progPump receives from every socket of p on one goroutine until the
// test ends, calling fn with each frame (valid only during the call).
func progPump(t *testing.T, p *Port, fn func(frame []byte)) {
	t.Helper()
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		socks := p.Sockets()
		bufs, addrs := make([][]byte, 32), make([]uint64, 32)
		for {
			select {
			case <-stop:
				return
			default:
			}
			idle := true
			for _, x := range socks {
				k, m := x.receive(bufs, addrs, 0)
				for _, f := range bufs[:k] {
					fn(f)
				}
				x.recycle(addrs[:m])
				idle = idle && k == 0
			}
			if idle {
				time.Sleep(100 * time.Microsecond)
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}

// progFrames collects copies of the frames a pump hands it.
type progFrames struct {
	mu     sync.Mutex
	frames [][]byte
}

func (c *progFrames) add(f []byte) {
	c.mu.Lock()
	c.frames = append(c.frames, bytes.Clone(f))
	c.mu.Unlock()
}

// with returns the frames whose payload contains marker.
func (c *progFrames) with(marker string) [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out [][]byte
	for _, f := range c.frames {
		if bytes.Contains(f, []byte(marker)) {
			out = append(out, f)
		}
	}
	return out
}

// sendRaw sends Ethernet frames from the peer's end of the veth with an
// AF_PACKET socket.
func (l *progLab) sendRaw(t *testing.T, frames ...[]byte) {
	t.Helper()
	fd := l.peer.SocketT(t, unix.AF_PACKET, unix.SOCK_RAW)
	sa := &unix.SockaddrLinklayer{Ifindex: l.peer.LinkT(t, progIfB).Attrs().Index, Halen: 6}
	for _, f := range frames {
		copy(sa.Addr[:], f[:6])
		netlab.Must(t, unix.Sendto(fd, f, 0, sa))
	}
}

// programStats sums the port's program counters over its queues.
func programStats(t *testing.T, p *Port) Stats {
	t.Helper()
	var sum Stats
	for _, x := range p.Sockets() {
		s, err := p.ProgramStats(x.queueID)
		netlab.Must(t, err)
		sum.Oversize += s.Oversize
		sum.OtherHost += s.OtherHost
		sum.NotUnicast += s.NotUnicast
		sum.VersionMismatch += s.VersionMismatch
	}
	return sum
}

// waitStats waits until the port's program counters are want.
func waitStats(t *testing.T, p *Port, want Stats) {
	t.Helper()
	var got Stats
	for deadline := time.Now().Add(xdpWait); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if got = programStats(t, p); got == want {
			return
		}
	}
	t.Errorf("program counters %+v, want %+v", got, want)
}

// TestXDPWireRules sends frames for the redirect prefixes from the peer
// that are not the gateway's to take (another host's MAC, broadcast and
// multicast MACs, an IP version that is not the EtherType's) between
// frames that are, in native and generic mode: the sockets get exactly
// the gateway's, and the program counts the others by reason.
func TestXDPWireRules(t *testing.T) {
	for _, mode := range []Mode{ModeNative, ModeGeneric} {
		t.Run(mode.String(), func(t *testing.T) {
			l := newProgLab(t)
			p := l.open(t, Config{Mode: mode, NumFrames: 256, RingSize: 64, Redirect: progRedirect})
			var got progFrames
			progPump(t, p, got.add)
			other := net.HardwareAddr{0x02, 0x00, 0x5e, 0x00, 0x53, 0x99}
			bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
			mcast6 := net.HardwareAddr{0x33, 0x33, 0, 0, 0, 9}
			frame := func(to net.HardwareAddr, src, dst netip.AddrPort, marker string) []byte {
				return progUDP(to, l.macB, src, dst, 64, []byte(marker))
			}
			badVersion := frame(l.macA, progSrc4, progDst4, "xdp-wire-bad")
			badVersion[xdpEthLen] = 0x65
			l.sendRaw(t,
				frame(l.macA, progSrc4, progDst4, "xdp-wire-ours"),
				frame(other, progSrc4, progDst4, "xdp-wire-bad"),
				frame(bcast, progSrc4, progDst4, "xdp-wire-bad"),
				frame(other, progSrc6, progDst6, "xdp-wire-bad"),
				frame(mcast6, progSrc6, progDst6, "xdp-wire-bad"),
				badVersion,
				frame(l.macA, progSrc6, progDst6, "xdp-wire-ours"),
			)
			waitStats(t, p, Stats{OtherHost: 2, NotUnicast: 2, VersionMismatch: 1})
			for deadline := time.Now().Add(xdpWait); len(got.with("xdp-wire-ours")) < 2 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(20 * time.Millisecond) // anything late would come now
			if ours, bad := got.with("xdp-wire-ours"), got.with("xdp-wire-bad"); len(ours) != 2 || len(bad) != 0 {
				t.Errorf("%v: the sockets got %d of our 2 frames and %d of the 5 others", p.Mode(), len(ours), len(bad))
			}
		})
	}
}

// TestXDPOversize: in generic mode with a 9000-byte MTU, IP packets for
// the redirect prefixes up to what a socket takes reach the socket;
// longer ones reach the kernel, which delivers them (here to a local
// address inside the prefix), and are counted (Oversize), instead of
// vanishing as the socket's rx_dropped. Single-buffer, a socket takes a
// UMEM frame less XDP_PACKET_HEADROOM (4096 - 256 - 14 = 3826 bytes of
// IP packet); multi-buffer, MaxChain such frames (here 2: 7666 bytes).
func TestXDPOversize(t *testing.T) {
	for _, c := range []struct {
		name  string
		multi MultiBuffer
		chain int
	}{{"single-buffer", MultiBufferOff, 1}, {"multi-buffer", MultiBufferOn, 2}} {
		t.Run(c.name, func(t *testing.T) {
			if c.multi == MultiBufferOn {
				netlab.SkipWithout(t, netlab.AFXDPMultiBuffer)
			}
			l := newJumboLab(t)
			p := l.open(t, Config{Mode: ModeGeneric, NumFrames: 256, RingSize: 64, Redirect: progRedirect,
				MultiBuffer: c.multi, MaxChain: 2}) // MaxChain is ignored with multi-buffer off
			fit := c.chain*rxFrameLen(DefaultFrameSize) - xdpEthLen // largest IP packet a socket takes
			progCheckOversize(t, l, p, []int{1500, fit, fit + 1, 8500})
		})
	}
}

// newJumboLab is a prog lab with a 9000-byte MTU on both ends, and the
// first addresses of the redirect prefixes on the gateway's loopback.
func newJumboLab(t *testing.T) *progLab {
	l := newProgLab(t)
	for _, ns := range []*netlab.NS{l.gw, l.peer} {
		name := map[*netlab.NS]string{l.gw: progIfA, l.peer: progIfB}[ns]
		netlab.Must(t, ns.Netlink().LinkSetMTU(ns.LinkT(t, name), 9000))
	}
	netlab.Must(t, l.gw.AddAddr("lo", progLocal4.String()+"/32"))
	netlab.Must(t, l.gw.AddAddr("lo", progLocal6.String()+"/128"))
	return l
}

// The gateway's local addresses inside the redirect prefixes (newJumboLab).
var (
	progLocal4 = netip.MustParseAddr("198.18.200.1")
	progLocal6 = netip.MustParseAddr("2001:2:0:200::1")
)

// progCheckOversize sends UDP from the peer to the gateway's local
// addresses in IP packets of the given sizes, of which the first two fit
// the socket and the last two do not, and checks that the socket gets
// the first two, whole, and the kernel (and the Oversize counter) the
// others.
func progCheckOversize(t *testing.T, l *progLab, p *Port, sizes []int) {
	var got progFrames
	progPump(t, p, got.add)
	var wantStats Stats
	for _, dst := range []netip.Addr{progLocal4, progLocal6} {
		addr := netip.AddrPortFrom(dst, 7100)
		ln := l.gw.ListenUDP(t, addr)
		c := progDialUDP(t, l.peer, addr)
		hdr := header.IPv4MinimumSize + header.UDPMinimumSize
		if dst.Is6() {
			hdr = header.IPv6MinimumSize + header.UDPMinimumSize
		}
		for _, size := range sizes {
			payload := make([]byte, size-hdr)
			binary.BigEndian.PutUint32(payload, uint32(size))
			copy(payload[4:], "xdp-oversize")
			if _, err := c.Write(payload); err != nil {
				t.Fatalf("send %d bytes to %v: %v", size, addr, err)
			}
		}
		kernel := progReadSizes(t, ln, 2)
		wantStats.Oversize += 2
		waitStats(t, p, wantStats)
		var socket []int
		for deadline := time.Now().Add(xdpWait); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			socket = socket[:0]
			for _, f := range got.with("xdp-oversize") {
				if f[xdpEthLen]>>4 == map[bool]byte{false: 4, true: 6}[dst.Is6()] {
					socket = append(socket, len(f)-xdpEthLen)
				}
			}
			if len(socket) >= 2 {
				break
			}
		}
		t.Logf("%v: IP packets of %v bytes: the socket got %v, the kernel %v", dst, sizes, socket, kernel)
		if !slices.Equal(socket, sizes[:2]) {
			t.Errorf("%v: the socket got IP packets of %v bytes, want %v", dst, socket, sizes[:2])
		}
		if !slices.Equal(kernel, sizes[2:]) {
			t.Errorf("%v: the kernel got IP packets of %v bytes, want %v", dst, kernel, sizes[2:])
		}
	}
	for _, x := range p.Sockets() {
		if s := x.Stats(); s.RXDropped != 0 {
			t.Errorf("queue %d: the socket dropped %d frames", x.queueID, s.RXDropped)
		}
	}
}

// progDialUDP opens a UDP socket in ns connected to addr.
func progDialUDP(t *testing.T, ns *netlab.NS, addr netip.AddrPort) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	var err error
	ns.Do(t, func() { c, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(addr)) })
	netlab.Must(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// progReadSizes reads n datagrams from c and returns the IP packet size
// each was sent in (the first 4 bytes of the payload).
func progReadSizes(t *testing.T, c *net.UDPConn, n int) []int {
	t.Helper()
	var sizes []int
	buf := make([]byte, 9000)
	c.SetReadDeadline(time.Now().Add(xdpWait))
	for len(sizes) < n {
		k, err := c.Read(buf)
		if err != nil {
			t.Errorf("read: %v (got %v)", err, sizes)
			break
		}
		sizes = append(sizes, int(binary.BigEndian.Uint32(buf[:k])))
	}
	return sizes
}

// TestXDPMACChange: the program takes frames for the MAC address the NIC
// had when it was attached. After the address changes, frames for the
// new one are passed to the kernel and counted (OtherHost) until
// Port.Reattach loads the program again for the new address.
func TestXDPMACChange(t *testing.T) {
	l := newProgLab(t)
	p := l.open(t, Config{NumFrames: 256, RingSize: 64, Redirect: progRedirect})
	var got progFrames
	progPump(t, p, got.add)
	newMAC := net.HardwareAddr{0x02, 0x00, 0x5e, 0x00, 0x53, 0x0c}
	netlab.Must(t, l.gw.Netlink().LinkSetHardwareAddr(l.gw.LinkT(t, progIfA), newMAC))
	l.sendRaw(t, progUDP(newMAC, l.macB, progSrc4, progDst4, 64, []byte("xdp-mac-before")))
	waitStats(t, p, Stats{OtherHost: 1})
	netlab.Must(t, p.Reattach())
	l.sendRaw(t, progUDP(newMAC, l.macB, progSrc4, progDst4, 64, []byte("xdp-mac-after")),
		progUDP(l.macA, l.macB, progSrc4, progDst4, 64, []byte("xdp-mac-old")))
	waitStats(t, p, Stats{OtherHost: 2})
	for deadline := time.Now().Add(xdpWait); len(got.with("xdp-mac-after")) == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if n, m := len(got.with("xdp-mac-after")), len(got.with("xdp-mac-")); n != 1 || m != 1 {
		t.Errorf("after Reattach the socket got %d frames for the new MAC address and %d in all, want 1 and 1", n, m)
	}
}
