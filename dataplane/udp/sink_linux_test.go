package udp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/dataplane/tun"
	"github.com/gsoplane/gsoplane/internal/testing/dirtybuf"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
	"github.com/gsoplane/gsoplane/txqueue"
)

func TestMain(m *testing.M) { os.Exit(netlab.Main(m)) }

// Tunnel test topology: netns A and B joined by a veth pair, A's end
// 198.18.100.1/24 and B's 198.18.100.2/24. A's Sink sends to B's
// tunnel socket on port uskPort.
const (
	uskPort   = 51820
	uskAddrA  = "198.18.100.1"
	uskAddrB  = "198.18.100.2"
	uskHdrLen = 16     // a WireGuard-style data header: type, receiver index, counter
	uskType   = 4      // WireGuard's transport data message type
	uskIndex  = 0x1234 // the receiver index the test's encapsulation writes
	uskTUNMTU = 1440   // inner MTU: 1440 + 16 + 16 (the trailer) + 28 fits the veth's 1500
	uskWait   = 5 * time.Second
)

type uskNet struct {
	a, b *netlab.NS
}

func newUskNet(t *testing.T) *uskNet {
	t.Helper()
	n := &uskNet{a: netlab.NewT(t, "udp"), b: netlab.NewT(t, "udp")}
	netlab.Must(t, netlab.AddVeth(n.a, "usk-a", n.b, "usk-b", 0))
	netlab.Must(t, n.a.AddAddr("usk-a", uskAddrA+"/24"))
	netlab.Must(t, n.b.AddAddr("usk-b", uskAddrB+"/24"))
	return n
}

// uskDial returns a UDP socket in ns connected to raddr, closed in cleanup.
func uskDial(t *testing.T, ns *netlab.NS, raddr string) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	var err error
	ns.Do(t, func() { c, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(uskAddrPort(raddr))) })
	if err != nil {
		t.Fatalf("dial %s: %v", raddr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// uskDialFrom returns a UDP socket in ns bound to port on uskAddrA and
// connected to uskAddrB's uskPort, closed in cleanup.
func uskDialFrom(t *testing.T, ns *netlab.NS, port int) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	var err error
	ns.Do(t, func() {
		c, err = net.DialUDP("udp4", net.UDPAddrFromAddrPort(uskAddrPort(uskAP(uskAddrA, port))), net.UDPAddrFromAddrPort(uskAddrPort(uskAP(uskAddrB, uskPort))))
	})
	netlab.Must(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// uskListen returns a UDP socket in ns bound to laddr, closed in cleanup.
func uskListen(t *testing.T, ns *netlab.NS, laddr string) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	var err error
	ns.Do(t, func() { c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(uskAddrPort(laddr))) })
	if err != nil {
		t.Fatalf("listen %s: %v", laddr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func uskAddrPort(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func uskAP(addr string, port int) string { return net.JoinHostPort(addr, strconv.Itoa(port)) }

// uskSockopt sets an integer socket option on c.
func uskSockopt(t *testing.T, c syscall.Conn, level, opt, v int) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), level, opt, v) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatalf("setsockopt %d/%d=%d: %v", level, opt, v, serr)
	}
}

// uskSeal returns a SealFunc that writes a WireGuard-style data header
// with a counter that counts up from 0, one per datagram, and a copy of
// the header as the trailer in the last tail bytes.
func uskSeal(tail int) SealFunc {
	var ctr uint64
	return func(dgrams [][]byte, _ []int) {
		for _, d := range dgrams {
			binary.LittleEndian.PutUint32(d[0:], uskType)
			binary.LittleEndian.PutUint32(d[4:], uskIndex)
			binary.LittleEndian.PutUint64(d[8:], ctr)
			copy(d[len(d)-tail:], d[:tail])
			ctr++
		}
	}
}

// uskFrames allocates one frame per length and fills packet i with its
// sequence number (from *seq on) and a pattern.
func uskFrames(t *testing.T, s *Sink, lens []int, seq *uint32) []frame.Frame {
	t.Helper()
	frames := make([]frame.Frame, len(lens))
	if n := s.Alloc(frames); n != len(frames) {
		t.Fatalf("Alloc: %d frames, want %d", n, len(frames))
	}
	for i, l := range lens {
		p := frames[i].Buf[s.Headroom() : s.Headroom()+l]
		binary.BigEndian.PutUint32(p, *seq)
		for j := 4; j < l; j++ {
			p[j] = byte(*seq) + byte(j)
		}
		frames[i].Len = l
		*seq++
	}
	return frames
}

// uskTransmit transmits frames, which must all be taken, and completes them.
func uskTransmit(t *testing.T, s *Sink, frames []frame.Frame) {
	t.Helper()
	n, err := s.Transmit(frames)
	if n != len(frames) || err != nil {
		t.Fatalf("Transmit(%d frames) = %d, %v", len(frames), n, err)
	}
	if err := s.Wait(time.Second); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if c, err := s.Complete(); c != n || err != nil {
		t.Fatalf("Complete = %d, %v; want %d", c, err, n)
	}
	if c, _ := s.Complete(); c != 0 {
		t.Fatalf("second Complete = %d, want 0", c)
	}
}

// uskExpect reads one datagram per length from c and checks its size, its
// encapsulation header (counter from *ctr on) and its packet (sequence
// number from *seq on).
func uskExpect(t *testing.T, c *net.UDPConn, headroom int, lens []int, seq *uint32, ctr *uint64) {
	t.Helper()
	buf := make([]byte, 65536)
	c.SetReadDeadline(time.Now().Add(uskWait))
	for i, l := range lens {
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("datagram %d of %d: %v", i, len(lens), err)
		}
		d := buf[:n]
		if n != headroom+l {
			t.Fatalf("datagram %d: %d bytes, want %d", i, n, headroom+l)
		}
		if headroom == uskHdrLen {
			typ, idx, got := binary.LittleEndian.Uint32(d), binary.LittleEndian.Uint32(d[4:]), binary.LittleEndian.Uint64(d[8:])
			if typ != uskType || idx != uskIndex || got != *ctr {
				t.Fatalf("datagram %d: header type %d index %#x counter %d, want %d %#x %d", i, typ, idx, got, uskType, uskIndex, *ctr)
			}
			*ctr++
		}
		p := d[headroom:]
		if got := binary.BigEndian.Uint32(p); got != *seq {
			t.Fatalf("datagram %d: sequence %d, want %d", i, got, *seq)
		}
		for j := 4; j < l; j++ {
			if p[j] != byte(*seq)+byte(j) {
				t.Fatalf("datagram %d: byte %d is %#x, want %#x", i, j, p[j], byte(*seq)+byte(j))
			}
		}
		*seq++
	}
}

// newUskSink opens a tunnel A → B and a Sink on it.
func newUskSink(t *testing.T, n *uskNet, port int, cfg SinkConfig) (*Sink, *net.UDPConn, *net.UDPConn) {
	t.Helper()
	rx := uskListen(t, n.b, uskAP(uskAddrB, port))
	tx := uskDial(t, n.a, uskAP(uskAddrB, port))
	s, err := NewSink(tx, cfg)
	if err != nil {
		t.Fatalf("NewSink: %v", err)
	}
	return s, tx, rx
}

func TestUDPSinkConfig(t *testing.T) {
	n := newUskNet(t)
	tx := uskDial(t, n.a, uskAP(uskAddrB, uskPort))
	for _, cfg := range []SinkConfig{
		{Frames: -1},
		{Headroom: -1},
		{FrameSize: 16, Headroom: 16},
		{FrameSize: 1 << 17},
	} {
		if _, err := NewSink(tx, cfg); err == nil {
			t.Errorf("NewSink(%+v) succeeded", cfg)
		}
	}
	unconnected := uskListen(t, n.a, uskAddrA+":0")
	if _, err := NewSink(unconnected, SinkConfig{}); err == nil {
		t.Error("NewSink on an unconnected socket succeeded")
	}
	// With Peers: unconnected, and of the endpoints' family (IPv4 ones on
	// an IPv6 socket that takes both).
	v4, _ := NewPeers([]Peer{{Endpoint: uskAddrPort(uskAP(uskAddrB, uskPort))}})
	v6, _ := NewPeers([]Peer{{Endpoint: netip.MustParseAddrPort("[2001:db8::1]:1")}})
	listen := func(network, addr string) *net.UDPConn {
		var c *net.UDPConn
		var err error
		n.a.Do(t, func() { c, err = net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr))) })
		netlab.Must(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	dual, only6, mapped := listen("udp", "[::]:0"), listen("udp6", "[::]:0"), listen("udp", "[::ffff:"+uskAddrA+"]:0") // Go makes the last IPv4
	for _, c := range []struct {
		conn  *net.UDPConn
		peers *Peers
		ok    bool
	}{
		{tx, v4, false}, {unconnected, v4, true}, {unconnected, v6, false},
		{dual, v4, true}, {dual, v6, true}, {only6, v4, false}, {only6, v6, true}, {mapped, v4, true}, {mapped, v6, false},
	} {
		_, err := NewSink(c.conn, SinkConfig{Peers: c.peers})
		if (err == nil) != c.ok {
			t.Errorf("NewSink on %v (connected %v) to %v: %v", c.conn.LocalAddr(), c.conn.RemoteAddr() != nil, c.peers.Peer(0).Endpoint, err)
		} else if err != nil {
			t.Logf("%v", err)
		}
	}
	s, err := NewSink(tx, SinkConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Frames() != DefaultSinkFrames || s.FrameSize() != DefaultSinkFrameSize || s.Headroom() != 0 || !s.Stats().GSO {
		t.Errorf("defaults: %d frames of %d, headroom %d, stats %+v", s.Frames(), s.FrameSize(), s.Headroom(), s.Stats())
	}
	// A frame from elsewhere is refused, and the frames before it are sent.
	var seq uint32
	frames := uskFrames(t, s, []int{100, 100}, &seq)
	frames = append(frames, frame.Frame{Buf: make([]byte, 2048), ID: 5, Len: 100})
	if k, err := s.Transmit(frames); k != 2 || err == nil {
		t.Errorf("Transmit with a foreign frame = %d, %v; want 2 and an error", k, err)
	}
	if c, _ := s.Complete(); c != 2 {
		t.Errorf("Complete = %d, want 2", c)
	}
}

// TestUDPSinkCoalescing checks how Transmit lays frames out as messages,
// and that every datagram arrives whole, in order, encapsulated once.
func TestUDPSinkCoalescing(t *testing.T) {
	n := newUskNet(t)
	s, _, rx := newUskSink(t, n, uskPort, SinkConfig{Frames: 256, Headroom: uskHdrLen, Seal: uskSeal(0)})
	var seq, rseq uint32
	var ctr uint64

	// 100 equal frames: 64 in one UDP_SEGMENT message, 36 in the next.
	lens := make([]int, 100)
	for i := range lens {
		lens[i] = 1000
	}
	uskTransmit(t, s, uskFrames(t, s, lens, &seq))
	uskExpect(t, rx, uskHdrLen, lens, &rseq, &ctr)
	st := s.Stats()
	if st.Datagrams != 100 || st.Messages != 2 || st.GSOMessages != 2 || st.Bytes != 100*(1000+uskHdrLen) {
		t.Errorf("100 equal frames: %+v, want 100 datagrams in 2 GSO messages", st)
	}

	// Runs end at a longer frame, after a shorter one, or alone.
	lens = []int{1000, 1000, 500, 1000, 1000, 1000, 800, 1200, 1200, 300, 700, 1300, 64}
	uskTransmit(t, s, uskFrames(t, s, lens, &seq))
	uskExpect(t, rx, uskHdrLen, lens, &rseq, &ctr)
	st2 := s.Stats()
	if d, m, g := st2.Datagrams-st.Datagrams, st2.Messages-st.Messages, st2.GSOMessages-st.GSOMessages; d != 13 || m != 5 || g != 4 {
		t.Errorf("mixed frames: %d datagrams in %d messages, %d GSO; want 13 in 5, 4 GSO", d, m, g)
	}
	if st2.Dropped != 0 || st2.Syscalls < 2 {
		t.Errorf("stats %+v: want no drops, a sendmmsg call per Transmit", st2)
	}
	// Every frame is back in the pool.
	all := make([]frame.Frame, s.Frames()+1)
	if k := s.Alloc(all); k != s.Frames() {
		t.Errorf("Alloc after Complete: %d frames, want %d", k, s.Frames())
	}
}

// TestUDPSinkDirtyFrames: the datagrams are the same whatever the frames
// held before (stale: longer datagrams sent from them): the headroom and
// tailroom go out as zeroes where no Seal writes (here, none; then one
// that writes only the first header byte).
func TestUDPSinkDirtyFrames(t *testing.T) {
	n := newUskNet(t)
	typeOnly := func(dgrams [][]byte, _ []int) {
		for _, d := range dgrams {
			d[0] = uskType
		}
	}
	for i, seal := range []SealFunc{nil, typeOnly} {
		t.Run(fmt.Sprintf("seal=%v", seal != nil), func(t *testing.T) {
			s, _, rx := newUskSink(t, n, uskPort+i, SinkConfig{Frames: 8, FrameSize: 2048, Headroom: uskHdrLen, Tailroom: 16, Seal: seal})
			var mem [][]byte // every frame, whole
			for id := range s.Frames() {
				mem = append(mem, s.pool.Frame(uint32(id)))
			}
			send := func(lens []int, fill byte) [][]byte {
				frames := make([]frame.Frame, len(lens))
				if k := s.Alloc(frames); k != len(frames) {
					t.Fatalf("Alloc: %d frames, want %d", k, len(frames))
				}
				for i, l := range lens {
					p := frames[i].Buf[uskHdrLen : uskHdrLen+l]
					for j := range p {
						p[j] = fill + byte(i+j)
					}
					frames[i].Len = l
				}
				uskTransmit(t, s, frames)
				got := make([][]byte, len(lens))
				rx.SetReadDeadline(time.Now().Add(uskWait))
				for i := range got {
					got[i] = make([]byte, 2048)
					k, err := rx.Read(got[i])
					if err != nil {
						t.Fatalf("datagram %d of %d: %v", i, len(lens), err)
					}
					got[i] = got[i][:k]
				}
				return got
			}
			longer := func([][]byte) [][]byte { return send([]int{1500, 1500, 1500, 1500, 1500, 1500, 1500, 1500}, 0x5a) }
			out := dirtybuf.Check(t, mem, longer, func([][]byte) [][]byte { return send([]int{100, 100, 100, 60, 1000}, 0) })
			want := make([]byte, uskHdrLen)
			if seal != nil {
				want[0] = uskType
			}
			if h := out[3][:uskHdrLen]; !bytes.Equal(h, want) {
				t.Errorf("headroom % x, want % x", h, want)
			}
			if tail := out[3][uskHdrLen+60:]; !bytes.Equal(tail, make([]byte, 16)) {
				t.Errorf("tailroom % x", tail)
			}
		})
	}
}

// TestUDPSinkGSORefused: on a socket with SO_NO_CHECK the kernel refuses
// UDP_SEGMENT with EINVAL; the sink falls back to single datagrams (for
// a second), without losing a frame or encapsulating one twice.
func TestUDPSinkGSORefused(t *testing.T) {
	n := newUskNet(t)
	s, tx, rx := newUskSink(t, n, uskPort, SinkConfig{Frames: 64, Headroom: uskHdrLen, Seal: uskSeal(0)})
	uskSockopt(t, tx, unix.SOL_SOCKET, unix.SO_NO_CHECK, 1)
	var seq, rseq uint32
	var ctr uint64
	lens := []int{1200, 1200, 1200, 1200, 600}
	for range 2 {
		uskTransmit(t, s, uskFrames(t, s, lens, &seq))
		uskExpect(t, rx, uskHdrLen, lens, &rseq, &ctr)
	}
	st := s.Stats()
	if st.GSORefused != 1 || !st.GSO || st.GSOMessages != 0 || st.Datagrams != 10 || st.Messages != 10 || st.Dropped != 0 {
		t.Errorf("stats %+v: want GSO refused once, then 10 single datagrams", st)
	}
}

// TestUDPSinkMsgSize: datagrams over the path MTU cannot go in a
// UDP_SEGMENT message (EMSGSIZE); the sink sends them one by one, which
// the kernel fragments, and does not try GSO again for that size (for a
// second: TestUDPSinkPathMTUPerPeer).
func TestUDPSinkMsgSize(t *testing.T) {
	n := newUskNet(t)
	s, _, rx := newUskSink(t, n, uskPort, SinkConfig{Frames: 64})
	var seq, rseq uint32
	var ctr uint64
	big := []int{1480, 1480, 1480, 1480} // 1508 bytes of IP, veth MTU 1500
	small := []int{1000, 1000, 1000}
	for range 2 {
		uskTransmit(t, s, uskFrames(t, s, big, &seq))
		uskExpect(t, rx, 0, big, &rseq, &ctr)
		uskTransmit(t, s, uskFrames(t, s, small, &seq))
		uskExpect(t, rx, 0, small, &rseq, &ctr)
	}
	st := s.Stats()
	if st.MsgSize != 1 || !st.GSO || st.GSOMessages != 2 || st.Datagrams != 14 || st.Dropped != 0 {
		t.Errorf("stats %+v: want one EMSGSIZE, 8 single datagrams and 2 GSO messages", st)
	}
}

// TestUDPSinkRefused: once the peer's port is unreachable, the kernel
// reports the ICMP error on a later send (ECONNREFUSED); the sink counts
// it and completes the frames as dropped, without an error.
func TestUDPSinkRefused(t *testing.T) {
	n := newUskNet(t)
	tx := uskDial(t, n.a, uskAP(uskAddrB, uskPort+1)) // nobody listens
	s, err := NewSink(tx, SinkConfig{Frames: 16})
	if err != nil {
		t.Fatal(err)
	}
	var seq uint32
	deadline := time.Now().Add(uskWait)
	sent := 0
	for s.Stats().Refused == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no ECONNREFUSED after %d frames: %+v", sent, s.Stats())
		}
		uskTransmit(t, s, uskFrames(t, s, []int{100, 100}, &seq))
		sent += 2
		time.Sleep(5 * time.Millisecond)
	}
	st := s.Stats()
	if st.Dropped == 0 || st.Datagrams+st.Dropped != uint64(sent) {
		t.Errorf("stats %+v after %d frames: want the refused message dropped, the rest sent", st, sent)
	}
	t.Logf("%d frames: %+v", sent, st)
}

// TestUDPSinkBlocks: behind a slow qdisc, a tiny send buffer fills and the
// kernel pushes back (sendmmsg sends part of a batch, then EAGAIN);
// Transmit waits for the socket through the runtime poller and loses
// nothing.
func TestUDPSinkBlocks(t *testing.T) {
	n := newUskNet(t)
	const rate = 25e6 // bytes per second
	tbf := &netlink.Tbf{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: n.a.LinkT(t, "usk-a").Attrs().Index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT},
		Rate:       rate, Limit: 8 << 20, Buffer: netlink.Xmittime(rate, 128<<10),
	}
	if err := n.a.Netlink().QdiscAdd(tbf); err != nil {
		t.Fatalf("tbf: %v", err)
	}
	s, tx, rx := newUskSink(t, n, uskPort, SinkConfig{Frames: 256, Headroom: uskHdrLen, Seal: uskSeal(0)})
	uskSockopt(t, tx, unix.SOL_SOCKET, unix.SO_SNDBUF, 4096) // the kernel's minimum: one message at a time
	uskSockopt(t, rx, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20)
	var seq, rseq uint32
	var ctr uint64
	const rounds = 20
	lens := make([]int, 200) // 5 GSO messages of 46, 46, 46, 46 and 16 each time
	for i := range lens {
		lens[i] = 1400
	}
	for range rounds {
		uskTransmit(t, s, uskFrames(t, s, lens, &seq))
	}
	for range rounds {
		uskExpect(t, rx, uskHdrLen, lens, &rseq, &ctr)
	}
	st := s.Stats()
	if st.Datagrams != rounds*200 || st.Dropped != 0 || st.Messages != rounds*5 || st.GSOMessages != st.Messages {
		t.Errorf("stats %+v: want %d datagrams in %d GSO messages, none dropped", st, rounds*200, rounds*5)
	}
	if st.Syscalls <= rounds {
		t.Errorf("%d sendmmsg calls for %d batches: the send buffer never filled", st.Syscalls, rounds)
	}
	t.Logf("%d sendmmsg calls for %d batches of 5 messages", st.Syscalls, rounds)
}

// TestUDPSinkNoBufs: a qdisc that is full drops the message; with
// IP_RECVERR the kernel says so (ENOBUFS) instead of hiding it. Transmit
// stops there and the sink loop offers the rest again after Wait, so
// nothing is lost.
func TestUDPSinkNoBufs(t *testing.T) {
	n := newUskNet(t)
	const rate = 2e6     // bytes per second: slow enough that even an emulated machine fills it
	tbf := &netlink.Tbf{ // room for one UDP_SEGMENT message, not two
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: n.a.LinkT(t, "usk-a").Attrs().Index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT},
		Rate:       rate, Limit: 100 << 10, Buffer: netlink.Xmittime(rate, 128<<10),
	}
	if err := n.a.Netlink().QdiscAdd(tbf); err != nil {
		t.Fatalf("tbf: %v", err)
	}
	s, tx, rx := newUskSink(t, n, uskPort, SinkConfig{Frames: 512, Headroom: uskHdrLen, Seal: uskSeal(0)})
	uskSockopt(t, tx, unix.SOL_IP, unix.IP_RECVERR, 1)
	uskSockopt(t, rx, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20)
	var seq, rseq uint32
	var ctr uint64
	lens := make([]int, 460) // 10 messages of 46
	for i := range lens {
		lens[i] = 1400
	}
	pending := uskFrames(t, s, lens, &seq)
	for deadline := time.Now().Add(uskWait); len(pending) > 0; { // the forwarder's sink loop
		if time.Now().After(deadline) {
			t.Fatalf("%d frames left: %+v", len(pending), s.Stats())
		}
		k, err := s.Transmit(pending)
		if err != nil {
			t.Fatalf("Transmit: %v", err)
		}
		pending = pending[k:]
		if c, _ := s.Complete(); c != k {
			t.Fatalf("Complete = %d after Transmit took %d", c, k)
		}
		if k == 0 {
			s.Wait(time.Millisecond)
		}
	}
	uskExpect(t, rx, uskHdrLen, lens, &rseq, &ctr)
	st := s.Stats()
	if st.NoBufs == 0 || st.Dropped != 0 || st.Datagrams != uint64(len(lens)) {
		t.Errorf("stats %+v: want ENOBUFS seen, %d datagrams sent, none dropped", st, len(lens))
	}
	t.Logf("%+v", st)
}

// Alloc, Transmit and Complete allocate nothing, on a connected socket
// and with Peers (two of them, each frame's destination routed and the
// message's address set).
func TestUDPSinkAllocs(t *testing.T) { // not parallel: AllocsPerRun refuses
	n := newUskNet(t)
	s, _, rx := newUskSink(t, n, uskPort, SinkConfig{Frames: 64, Headroom: uskHdrLen, Tailroom: 16, Seal: uskSeal(16)})
	peers := uskTwoPeers(t)
	rx0, rx1 := uskListen(t, n.b, uskAP(uskAddrB, uskPort+1)), uskListen(t, n.b, uskAP(uskAddrB, uskPort+2))
	sp, err := NewSink(uskListen(t, n.a, uskAP(uskAddrA, 0)), SinkConfig{Frames: 64, Headroom: uskHdrLen, Tailroom: 16, Seal: uskSeal(16), Peers: peers})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*net.UDPConn{rx, rx0, rx1} {
		uskSockopt(t, c, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20)
	}
	for _, c := range []struct {
		name string
		s    *Sink
	}{{"connected", s}, {"peers", sp}} {
		frames := make([]frame.Frame, 40)
		allocs := testing.AllocsPerRun(100, func() {
			k := c.s.Alloc(frames)
			for i := range frames[:k] {
				frames[i].Len = 1400 - i/39*1000                                           // 39 equal, a short one last
				uskIPFrame(frames[i].Buf[uskHdrLen:], uskPeerDst[min(i/20, 1)], uint32(i)) // 20 to each peer
			}
			if m, err := c.s.Transmit(frames[:k]); m != k || err != nil {
				panic(fmt.Sprint("Transmit: ", m, err))
			}
			c.s.Complete()
		})
		switch {
		case uskRace():
			t.Logf("%s: %.1f allocations per run: not checked under the race detector (it empties x/net's sync.Pool)", c.name, allocs)
		case allocs != 0:
			t.Errorf("%s: Alloc+Transmit+Complete: %.1f allocations per run, want 0", c.name, allocs)
		default:
			t.Logf("%s: %.1f allocations per run of 40 frames", c.name, allocs)
		}
		if st := c.s.Stats(); st.GSOMessages != st.Messages || st.Dropped != 0 {
			t.Errorf("%s: stats %+v: want every message GSO", c.name, st)
		}
	}
	if ps := peers.Stats(); ps[0].SentDatagrams == 0 || ps[0].SentDatagrams != ps[1].SentDatagrams {
		t.Errorf("per-peer stats %+v: want as many datagrams to each", ps)
	}
}

// uskPeerDst are inner destinations: one routed to each of uskTwoPeers,
// and one routed to neither.
var uskPeerDst = []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.1.1"), netip.MustParseAddr("10.0.9.9")}

// uskTwoPeers are two peers on B, ports uskPort+1 and uskPort+2, with an
// IPv4 /24 and an IPv6 /64 each.
func uskTwoPeers(t *testing.T) *Peers {
	t.Helper()
	peers, err := NewPeers([]Peer{
		{Endpoint: uskAddrPort(uskAP(uskAddrB, uskPort+1)), Allowed: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("fd00::/64")}},
		{Endpoint: uskAddrPort(uskAP(uskAddrB, uskPort+2)), Allowed: []netip.Prefix{netip.MustParsePrefix("10.0.1.0/24"), netip.MustParsePrefix("fd00:0:0:1::/64")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return peers
}

// uskIPFrame writes into p, a packet of at least 40 bytes, the start of
// an IP header (its version, its source and destination dst, the other
// fields left as they are) and, behind the IPv6 header's room, seq.
func uskIPFrame(p []byte, dst netip.Addr, seq uint32) {
	if dst.Is4() {
		p[0] = 0x45
		copy(p[12:16], []byte{10, 0, 0, 99})
		a := dst.As4()
		copy(p[16:20], a[:])
	} else {
		p[0] = 0x60
		copy(p[8:24], netip.MustParseAddr("fd00::99").AsSlice())
		a := dst.As16()
		copy(p[24:40], a[:])
	}
	binary.BigEndian.PutUint32(p[40:], seq)
}

// With Peers, the sink sends each frame to the peer its inner destination
// routes to, IPv4 or IPv6, in UDP_SEGMENT runs that break where the peer
// changes; it drops and counts a frame without a peer (a destination no
// prefix covers, a packet that is not IP) without sealing it; Seal learns
// each datagram's peer; each peer's counters add up.
func TestUDPSinkPeers(t *testing.T) {
	n := newUskNet(t)
	peers := uskTwoPeers(t)
	rx := []*net.UDPConn{uskListen(t, n.b, uskAP(uskAddrB, uskPort+1)), uskListen(t, n.b, uskAP(uskAddrB, uskPort+2))}
	var sealed []int // the peers Seal was told, in order
	seal := func(dgrams [][]byte, peers []int) {
		for i, d := range dgrams {
			binary.BigEndian.PutUint32(d, uint32(peers[i])) // the header: the peer
		}
		sealed = append(sealed, peers...)
	}
	s, err := NewSink(uskListen(t, n.a, uskAP(uskAddrA, 0)), SinkConfig{Frames: 64, Headroom: uskHdrLen, Seal: seal, Peers: peers})
	if err != nil {
		t.Fatal(err)
	}
	v6a, v6b := netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00:0:0:2::1")
	runs := []struct {
		dst  netip.Addr // the zero Addr: not an IP packet
		n    int
		peer int // -1: none
	}{
		{uskPeerDst[0], 5, 0}, {uskPeerDst[1], 3, 1}, {uskPeerDst[2], 1, -1}, {uskPeerDst[0], 2, 0},
		{netip.Addr{}, 1, -1}, {v6a, 2, 0}, {v6b, 1, -1}, {uskPeerDst[1], 1, 1},
	}
	var frames []frame.Frame
	var want [2][]uint32 // the sequence numbers each peer gets
	var wantSealed []int
	for _, r := range runs {
		f := make([]frame.Frame, r.n)
		if k := s.Alloc(f); k != r.n {
			t.Fatalf("Alloc: %d", k)
		}
		for i := range f {
			seq := uint32(len(frames) + i)
			f[i].Len = 1000
			if r.dst.IsValid() {
				uskIPFrame(f[i].Buf[uskHdrLen:], r.dst, seq)
			} else {
				f[i].Buf[uskHdrLen] = 0
			}
			if r.peer >= 0 {
				want[r.peer] = append(want[r.peer], seq)
				wantSealed = append(wantSealed, r.peer)
			}
		}
		frames = append(frames, f...)
	}
	uskTransmit(t, s, frames)
	buf := make([]byte, 2048)
	for p, c := range rx {
		c.SetReadDeadline(time.Now().Add(uskWait))
		for _, seq := range want[p] {
			k, err := c.Read(buf)
			if err != nil {
				t.Fatalf("peer %d: %v", p, err)
			}
			if got, gotSeq := binary.BigEndian.Uint32(buf), binary.BigEndian.Uint32(buf[uskHdrLen+40:]); k != uskHdrLen+1000 || got != uint32(p) || gotSeq != seq {
				t.Fatalf("peer %d: %d bytes sealed for peer %d, sequence %d; want frame %d", p, k, got, gotSeq, seq)
			}
		}
	}
	if !slices.Equal(sealed, wantSealed) {
		t.Errorf("Seal was told peers %v, want %v", sealed, wantSealed)
	}
	st := s.Stats()
	if st.Datagrams != 13 || st.Dropped != 3 || st.NoPeer != 3 || st.Messages != 5 || st.GSOMessages != 4 {
		t.Errorf("stats %+v: want 13 datagrams in 5 messages (4 UDP_SEGMENT), 3 frames dropped for want of a peer", st)
	}
	for p, ps := range peers.Stats() {
		if n := uint64(len(want[p])); ps.SentDatagrams != n || ps.SentBytes != n*(uskHdrLen+1000) || ps.ReceivedDatagrams != 0 {
			t.Errorf("peer %d: %+v, want %d datagrams sent", p, ps, n)
		}
	}
}

// TestUDPSinkPathMTUPerPeer: a hub with two peers, the route to one of
// them with a small MTU (as a "fragmentation needed" the kernel took
// would leave it): that peer's UDP_SEGMENT messages are refused
// (EMSGSIZE) and its datagrams go one by one, fragmented, re-probed
// every second; the other peer's keep UDP_SEGMENT. Once the route
// recovers, the first peer gets UDP_SEGMENT back at the next re-probe.
func TestUDPSinkPathMTUPerPeer(t *testing.T) {
	n := newUskNet(t)
	const addrC = "198.18.100.3" // peer 1's address, on B too
	netlab.Must(t, n.b.AddAddr("usk-b", addrC+"/24"))
	peers, err := NewPeers([]Peer{
		{Endpoint: uskAddrPort(uskAP(uskAddrB, uskPort+1)), Allowed: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}},
		{Endpoint: uskAddrPort(uskAP(addrC, uskPort+2)), Allowed: []netip.Prefix{netip.MustParsePrefix("10.0.1.0/24")}},
	})
	netlab.Must(t, err)
	for p, a := range []string{uskAddrB, addrC} {
		uskSockopt(t, uskListen(t, n.b, uskAP(a, uskPort+1+p)), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20)
	}
	s, err := NewSink(uskListen(t, n.a, uskAP(uskAddrA, 0)), SinkConfig{Frames: 64, Headroom: uskHdrLen, Peers: peers})
	netlab.Must(t, err)
	// send transmits 8 frames of 1400 bytes (1444 of IP) to each peer
	// given, and returns how many UDP_SEGMENT messages went out.
	send := func(to ...int) uint64 {
		t.Helper()
		before := s.Stats().GSOMessages
		var frames []frame.Frame
		for _, p := range to {
			f := make([]frame.Frame, 8)
			if k := s.Alloc(f); k != len(f) {
				t.Fatalf("Alloc: %d", k)
			}
			for i := range f {
				f[i].Len = 1400
				uskIPFrame(f[i].Buf[uskHdrLen:], uskPeerDst[p], uint32(i))
			}
			frames = append(frames, f...)
		}
		uskTransmit(t, s, frames)
		return s.Stats().GSOMessages - before
	}
	// waitFor transmits to peer 0 every 20 ms until cond holds.
	waitFor := func(what string, cond func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for deadline := start.Add(3 * gsoRetry); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v: %+v, peers %+v", what, 3*gsoRetry, s.Stats(), peers.Stats())
			}
			send(0)
		}
		return time.Since(start)
	}
	if g := send(0, 1); g != 2 {
		t.Fatalf("%d UDP_SEGMENT messages before the MTU drop, want 2", g)
	}
	route := &netlink.Route{LinkIndex: n.a.LinkT(t, "usk-a").Attrs().Index, Dst: &net.IPNet{IP: net.ParseIP(uskAddrB).To4(), Mask: net.CIDRMask(32, 32)},
		Scope: netlink.SCOPE_LINK, MTU: 1200}
	netlab.Must(t, n.a.Netlink().RouteAdd(route))
	if g := send(0, 1); g != 1 {
		t.Errorf("%d UDP_SEGMENT messages after peer 0's MTU drop, want peer 1's only", g)
	}
	for range 3 {
		if g := send(1); g != 1 {
			t.Errorf("peer 1: %d UDP_SEGMENT messages, want 1: another peer's path MTU took it off", g)
		}
	}
	// Re-probed while the MTU is still low: refused again, nothing lost.
	waitFor("a re-probe", func() bool { return s.Stats().Reprobes > 0 })
	netlab.Must(t, n.a.Netlink().RouteDel(route))
	took := waitFor("UDP_SEGMENT to peer 0 again", func() bool { return send(0) == 1 })
	st, ps := s.Stats(), peers.Stats()
	t.Logf("UDP_SEGMENT back %v after the route recovered; %+v; peers %+v", took, st, ps)
	if st.MsgSize < 2 || st.Reprobes < 2 || st.Dropped != 0 || st.Datagrams != ps[0].SentDatagrams+ps[1].SentDatagrams {
		t.Errorf("stats %+v: want EMSGSIZE at least twice, as many re-probes, nothing dropped", st)
	}
	if ps[0].GSORefused != st.MsgSize || ps[0].Reprobes != st.Reprobes || ps[1].GSORefused != 0 || ps[1].Reprobes != 0 {
		t.Errorf("peers %+v: want peer 0's refusals and re-probes only", ps)
	}
}

// uskRace reports whether the test binary was built with -race.
func uskRace() bool {
	bi, ok := debug.ReadBuildInfo()
	return ok && slices.Contains(bi.Settings, debug.BuildSetting{Key: "-race", Value: "true"})
}

// TestTunnel builds a whole VPN tunnel from the two halves, as an
// embedder would, between netns A and B, both ways:
//
//	TUN → Forwarder → Sink ==== UDP ==== Receiver → ReturnPath (GRO) → TUN
//
// Each side's Open checks every datagram: the tunnel header, trailer and
// counter (nothing lost or reordered), the inner IPv4 and transport
// checksums, and the sequence numbers of a UDP stream. UDP_SEGMENT
// super-packets go from A to B, and a TCP stream each way, SHA-256
// compared.
func TestTunnel(t *testing.T) {
	const (
		udpSends  = 150  // super-packets of
		udpSegs   = 40   // datagrams of
		udpSize   = 1400 // bytes each
		udpWindow = 16 * udpSegs
		tcpBytes  = 32 << 20
		udpPort   = 9
		tcpPort   = 5001
		peerAddr  = "198.19.0.2"
		tunAddrA  = "198.18.0.1"
	)
	n := newUskNet(t)
	for _, ns := range []*netlab.NS{n.a, n.b} { // no IPv6 chatter in the tunnel
		netlab.Must(t, ns.Sysctl("net/ipv6/conf/all/disable_ipv6", "1"))
		netlab.Must(t, ns.Sysctl("net/ipv6/conf/default/disable_ipv6", "1"))
	}
	a := newTunnelEnd(t, n.a, "usk-tun-a", tunAddrA+"/24", "198.19.0.0/24", uskAP(uskAddrA, uskPort), uskAP(uskAddrB, uskPort), udpPort)
	b := newTunnelEnd(t, n.b, "usk-tun-b", peerAddr+"/24", "198.18.0.0/24", uskAP(uskAddrB, uskPort), uskAP(uskAddrA, uskPort), udpPort)
	a.start(t)
	b.start(t)
	var sink net.PacketConn // B's application takes the datagrams: no ICMP back
	var err error
	n.b.Do(t, func() { sink, err = net.ListenPacket("udp4", uskAP(peerAddr, udpPort)) })
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	go io.Copy(io.Discard, readerOf(sink))

	// UDP_SEGMENT super-packets with sequence numbers, a window of them in
	// flight so that B's socket never overflows.
	var sender *net.UDPConn
	n.a.Do(t, func() { sender, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(tunAddrA)}) })
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close()
	sends, segs, window := udpSends, udpSegs, udpWindow
	uso := netlab.Lacks(t, netlab.VirtioNetUSO)
	if uso != nil {
		// Without USO the kernel cuts a UDP_SEGMENT send before the
		// TUN, and the drops of its segments on a full TUN ring do not
		// reach the sender: single datagrams, each an skb in the TUN's
		// queue, with a window that fits in it (500 packets).
		t.Logf("one datagram per send: %v", uso)
		sends, segs, window = udpSends*udpSegs, 1, 4*udpSegs
		uskSockopt(t, sender, unix.SOL_IP, unix.IP_RECVERR, 1)
	} else {
		uskSockopt(t, sender, unix.SOL_UDP, unix.UDP_SEGMENT, udpSize)
	}
	dst := &net.UDPAddr{IP: net.ParseIP(peerAddr), Port: udpPort}
	buf := make([]byte, segs*udpSize)
	start := time.Now()
	deadline := start.Add(3 * uskWait)
	for i := range sends {
		for j := range segs {
			binary.BigEndian.PutUint32(buf[j*udpSize:], uint32(i*segs+j))
		}
		for int(b.dec.udp.Load()) < (i*segs)-window && time.Now().Before(deadline) {
			time.Sleep(100 * time.Microsecond)
		}
		for {
			_, err := sender.WriteToUDP(buf, dst)
			if err == nil {
				break
			}
			if !errors.Is(err, unix.ENOBUFS) || time.Now().After(deadline) { // a full TUN ring: try again
				t.Fatalf("send %d: %v", i, err)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	for int(b.dec.udp.Load()) < udpSends*udpSegs && time.Now().Before(deadline) && b.dec.failure() == "" {
		time.Sleep(time.Millisecond)
	}
	t.Logf("UDP: %d of %d datagrams through the tunnel in %v", b.dec.udp.Load(), udpSends*udpSegs, time.Since(start).Round(time.Millisecond))

	tunnelTCP(t, n.a, n.b, peerAddr, tcpPort, tcpBytes)   // A to B
	tunnelTCP(t, n.b, n.a, tunAddrA, tcpPort+1, tcpBytes) // B to A

	a.halt(t)
	b.halt(t)
	for _, e := range []*tunnelEnd{a, b} {
		e.check(t, uso == nil)
	}
	if got := b.dec.udp.Load(); got != udpSends*udpSegs {
		t.Errorf("UDP: %d datagrams in order, want %d", got, udpSends*udpSegs)
	}
}

// readerOf reads a packet socket as a stream of datagrams.
func readerOf(pc net.PacketConn) io.Reader {
	return readerFunc(func(b []byte) (int, error) { n, _, err := pc.ReadFrom(b); return n, err })
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(b []byte) (int, error) { return f(b) }

// tunnelEnd is one side of the test tunnel: its TUN device, the socket to
// the other side, and the two halves.
type tunnelEnd struct {
	name   string
	dev    *tun.Device
	conn   *net.UDPConn
	sink   *Sink
	recv   *Receiver
	dec    *uskDecap
	budget *txqueue.Budget
	queue  *txqueue.Queue[frame.Frame]
	fwd    *pipeline.Forwarder
	ret    *pipeline.ReturnPath
	cancel context.CancelFunc
	done   chan error
}

// newTunnelEnd opens the TUN device (with offloads) and a UDP socket from
// local to remote in ns, and wires the two halves to them.
func newTunnelEnd(t *testing.T, ns *netlab.NS, tunName, addr, route, local, remote string, udpPort uint16) *tunnelEnd {
	t.Helper()
	e := &tunnelEnd{name: ns.Name, dev: uskTUN(t, ns, tunName, true, addr, route), dec: &uskDecap{udpPort: udpPort}, done: make(chan error, 2)}
	var err error
	ns.Do(t, func() {
		e.conn, err = net.DialUDP("udp4", net.UDPAddrFromAddrPort(uskAddrPort(local)), net.UDPAddrFromAddrPort(uskAddrPort(remote)))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.conn.Close() })
	uskSockopt(t, e.conn, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 32<<20)
	if e.sink, err = NewSink(e.conn, SinkConfig{Frames: 2048, FrameSize: 2048, Headroom: uskHdrLen, Tailroom: uskHdrLen, Seal: uskSeal(uskHdrLen)}); err != nil {
		t.Fatal(err)
	}
	if e.recv, err = NewReceiver(e.conn, ReceiverConfig{Headroom: uskHdrLen, Tailroom: uskHdrLen, Open: e.dec.open}); err != nil {
		t.Fatal(err)
	}
	size := txqueue.Truesize(e.sink.FrameSize())
	if e.budget, err = txqueue.NewBudget(txqueue.BudgetConfig{Burst: 64 * size, Limit: 1024 * size}); err != nil {
		t.Fatal(err)
	}
	if e.queue, err = txqueue.NewQueue[frame.Frame](txqueue.QueueConfig{Policy: txqueue.Block, Packets: 2048, Bytes: 2048 * size}); err != nil {
		t.Fatal(err)
	}
	q := e.dev.Queues()[0]
	if e.fwd, err = pipeline.NewForwarder(pipeline.ForwarderConfig{
		Source: q, HeaderSize: e.dev.HeaderSize(), Sink: e.sink, FrameSize: e.sink.FrameSize(), Budget: e.budget, Queue: e.queue,
	}); err != nil {
		t.Fatal(err)
	}
	if e.ret, err = pipeline.NewReturnPath(pipeline.ReturnConfig{
		Receiver: e.recv, Writer: q, HeaderSize: e.dev.HeaderSize(), TCP: true, UDP: true,
	}); err != nil {
		t.Fatal(err)
	}
	return e
}

// start runs both halves; stop ends them in t.Cleanup unless called.
func (e *tunnelEnd) start(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go func() { e.done <- e.fwd.Run(ctx) }()
	go func() { e.done <- e.ret.Run(ctx) }()
	t.Cleanup(func() { e.stop(t) })
}

// halt cancels both halves, which return on their own (the TUN queue and
// the receiver are ReadDeadliners), the forwarder once it has sent what
// it queued, and waits for them. The TUN device and the socket stay open
// until the test's cleanup (stop): closing them first could leave a frame
// charged that the forwarder was still to send, and closing one end's
// socket while the other still sends would make the other's sends fail.
func (e *tunnelEnd) halt(t *testing.T) {
	if e.cancel == nil {
		return
	}
	e.cancel()
	e.cancel = nil
	for range 2 {
		select {
		case err := <-e.done:
			if err != nil && !errors.Is(err, pipeline.ErrSourceClosed) {
				t.Errorf("%s: %v", e.name, err)
			}
		case <-time.After(uskWait):
			t.Errorf("%s: the tunnel did not stop", e.name)
			return
		}
	}
}

// stop halts the tunnel end and closes its TUN device and socket.
func (e *tunnelEnd) stop(t *testing.T) {
	e.halt(t)
	e.dev.Close()
	e.conn.Close()
}

// check compares the counters of both halves after the run. Where the
// TUN has no USO (uso false) the return path writes UDP datagrams one
// by one, and only needs to have merged something (TCP).
func (e *tunnelEnd) check(t *testing.T, uso bool) {
	t.Helper()
	fs, ss, rs, ret := e.fwd.Stats(), e.sink.Stats(), e.recv.Stats(), e.ret.Stats()
	inGSO := ss.Datagrams - (ss.Messages - ss.GSOMessages)
	t.Logf("%s: sink %d datagrams in %d messages (%d UDP_SEGMENT, %d sendmmsg); receiver %d datagrams in %d messages (%d UDP_GRO, %d recvmmsg); return path %d packets in %d writes (%d super-packets); decap %d UDP, %d TCP",
		e.name, ss.Datagrams, ss.Messages, ss.GSOMessages, ss.Syscalls, rs.Datagrams, rs.Messages, rs.GROMessages, rs.Syscalls,
		ret.Packets, ret.Writes, ret.SuperPackets, e.dec.udp.Load(), e.dec.tcp.Load())
	if f := e.dec.failure(); f != "" {
		t.Errorf("%s: decapsulation: %s", e.name, f)
	}
	if fs.Drops.Total() != 0 || ret.Drops.Total() != 0 || ss.Dropped != 0 || rs.Refused+rs.Short+rs.Truncated != 0 {
		t.Errorf("%s: drops: forwarder %v, sink %d, receiver %+v, return path %v", e.name, fs.Drops, ss.Dropped, rs, ret.Drops)
	}
	if bs, qs := e.budget.Stats(), e.queue.Stats(); bs.InFlight != 0 || qs.InFlight != 0 {
		t.Errorf("%s: still charged after Run: budget %d bytes, queue %d in flight", e.name, bs.InFlight, qs.InFlight)
	}
	if ss.Datagrams != fs.Transmitted || fs.Transmitted != fs.Completed || fs.Completed != fs.Segments {
		t.Errorf("%s: sink sent %d; forwarder queued %d, transmitted %d, completed %d", e.name, ss.Datagrams, fs.Segments, fs.Transmitted, fs.Completed)
	}
	if 2*inGSO < ss.Datagrams {
		t.Errorf("%s: only %d of %d datagrams went in UDP_SEGMENT messages", e.name, inGSO, ss.Datagrams)
	}
	if !rs.GRO || rs.GROMessages == 0 || uso && 2*ret.Writes > ret.Packets || !uso && ret.SuperPackets == 0 {
		t.Errorf("%s: receive side did not coalesce: %+v, %d writes for %d packets", e.name, rs, ret.Writes, ret.Packets)
	}
}

// tunnelTCP sends size pseudo-random bytes over TCP from ns from to a
// listener at addr:port in ns to, through the tunnel, and compares the
// SHA-256 of both ends.
func tunnelTCP(t *testing.T, from, to *netlab.NS, addr string, port int, size int64) {
	t.Helper()
	el := netlab.TCPTransfer(t, from, to, netip.AddrPortFrom(netip.MustParseAddr(addr), uint16(port)), size, false)
	t.Logf("TCP to %s: %d MiB in %v, %.0f Mbit/s", addr, size>>20, el.Round(time.Millisecond), float64(size*8)/el.Seconds()/1e6)
}

// uskTUN opens a TUN in ns with the inner MTU, brings it up, gives it
// addr and routes route through it.
func uskTUN(t *testing.T, ns *netlab.NS, name string, offload bool, addr, route string) *tun.Device {
	t.Helper()
	var dev *tun.Device
	var err error
	ns.Do(t, func() { dev, err = tun.Open(tun.Config{Name: name, MTU: uskTUNMTU, Offload: offload}) })
	if err != nil {
		t.Fatalf("tun.Open %s: %v", name, err)
	}
	t.Cleanup(func() { dev.Close() })
	netlab.Must(t, ns.LinkUp(name))
	netlab.Must(t, ns.AddAddr(name, addr))
	netlab.Must(t, ns.AddRoute(route, name, ""))
	return dev
}

// uskDecap is a tunnel end's Decap: it checks every datagram and counts
// what it carries. It runs on the return path's goroutine; udp and tcp
// are read from others.
type uskDecap struct {
	udpPort uint16

	udp, tcp atomic.Int64 // UDP datagrams in sequence; TCP segments
	next     uint32       // next UDP sequence number
	ctr      uint64       // next tunnel counter

	mu   sync.Mutex
	fail string // the first problem
}

func (d *uskDecap) failf(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fail == "" {
		d.fail = fmt.Sprintf(format, args...)
	}
}

func (d *uskDecap) failure() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.fail
}

// open checks a batch of datagrams: each trailer is a copy of its
// header (uskSeal), and decap checks the rest.
func (d *uskDecap) open(dgrams [][]byte, _ []int, verdicts []Verdict) {
	for i, dg := range dgrams {
		tail := dg[len(dg)-uskHdrLen:]
		switch {
		case !bytes.Equal(tail, dg[:uskHdrLen]):
			d.failf("datagram %d: trailer %x, header %x", d.ctr, tail, dg[:uskHdrLen])
			verdicts[i] = DropAuth
		case !d.decap(dg[:uskHdrLen], dg[uskHdrLen:len(dg)-uskHdrLen]):
			verdicts[i] = DropMalformed
		}
	}
}

// decap checks the tunnel header and its counter, and the inner packet's
// checksums and UDP sequence numbers; it refuses what is not a tunnel
// data message.
func (d *uskDecap) decap(hdr, pkt []byte) bool {
	if binary.LittleEndian.Uint32(hdr) != uskType || binary.LittleEndian.Uint32(hdr[4:]) != uskIndex {
		d.failf("datagram %d: not a tunnel data message", d.ctr)
		return false
	}
	if ctr := binary.LittleEndian.Uint64(hdr[8:]); ctr != d.ctr {
		d.failf("tunnel counter %d, want %d (lost or reordered)", ctr, d.ctr)
		d.ctr = ctr
	}
	d.ctr++
	proto, err := uskCheckIPv4(pkt)
	if err != nil {
		d.failf("datagram %d: %v", d.ctr-1, err)
		return true // the kernel drops it; the test has failed already
	}
	switch proto {
	case header.UDPProtocolNumber:
		u := header.UDP(header.IPv4(pkt).Payload())
		if u.DestinationPort() != d.udpPort || len(u.Payload()) < 4 {
			d.failf("unexpected UDP datagram to port %d", u.DestinationPort())
			break
		}
		if seq := binary.BigEndian.Uint32(u.Payload()); seq != d.next {
			d.failf("UDP sequence %d, want %d", seq, d.next)
			d.next = seq
		}
		d.next++
		d.udp.Add(1)
	case header.TCPProtocolNumber:
		d.tcp.Add(1)
	}
	return true
}

// uskCheckIPv4 checks an IPv4 packet, its header checksum and its UDP or
// TCP checksum, and returns its transport protocol.
func uskCheckIPv4(pkt []byte) (tcpip.TransportProtocolNumber, error) {
	ip := header.IPv4(pkt)
	if !ip.IsValid(len(pkt)) || int(ip.TotalLength()) != len(pkt) {
		return 0, fmt.Errorf("not a whole IPv4 packet (%d bytes)", len(pkt))
	}
	if !ip.IsChecksumValid() {
		return 0, fmt.Errorf("bad IPv4 header checksum")
	}
	src, dst, l4 := ip.SourceAddress(), ip.DestinationAddress(), ip.Payload()
	switch p := ip.TransportProtocol(); p {
	case header.UDPProtocolNumber:
		u := header.UDP(l4)
		if len(l4) < header.UDPMinimumSize || int(u.Length()) != len(l4) {
			return 0, fmt.Errorf("bad UDP length")
		}
		if !u.IsChecksumValid(src, dst, checksum.Checksum(u.Payload(), 0)) {
			return 0, fmt.Errorf("bad UDP checksum")
		}
		return p, nil
	case header.TCPProtocolNumber:
		tcp := header.TCP(l4)
		if len(l4) < header.TCPMinimumSize || int(tcp.DataOffset()) > len(l4) {
			return 0, fmt.Errorf("bad TCP header")
		}
		if !tcp.IsChecksumValid(src, dst, checksum.Checksum(tcp.Payload(), 0), uint16(len(tcp.Payload()))) {
			return 0, fmt.Errorf("bad TCP checksum")
		}
		return p, nil
	default:
		return 0, fmt.Errorf("unexpected protocol %d", p)
	}
}
