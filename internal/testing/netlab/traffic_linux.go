package netlab

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// transferTimeout bounds a TCPTransfer.
const transferTimeout = 2 * time.Minute

// TCPTransfer sends size bytes of a deterministic pseudo-random stream
// over one TCP connection between client, which dials addr, and a
// listener on addr in server: from client to server, or back from server
// to client (toClient). It compares the SHA-256 the receiving end
// computes with the sender's and returns how long the transfer took; it
// logs the sender's retransmissions. It fails the test on an error, a
// mismatch, or after two minutes.
func TCPTransfer(t TB, client, server *NS, addr netip.AddrPort, size int64, toClient bool) time.Duration {
	t.Helper()
	return TCPTransferMSS(t, client, server, addr, size, toClient, 0)
}

// TCPTransferMSS is TCPTransfer with both ends' MSS set to mss
// (TCP_MAXSEG, at least 88), if it is not 0: the segments both ways carry
// at most mss bytes, and the super-packets the senders' kernels make
// have as many more segments.
func TCPTransferMSS(t TB, client, server *NS, addr netip.AddrPort, size int64, toClient bool, mss int) time.Duration {
	t.Helper()
	control := func(network, address string, c syscall.RawConn) error {
		var err error
		if mss != 0 {
			c.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG, mss) })
		}
		return err
	}
	var ln net.Listener
	var err error
	server.Do(t, func() {
		ln, err = (&net.ListenConfig{Control: control}).Listen(context.Background(), "tcp", addr.String())
	})
	if err != nil {
		t.Fatalf("listen %v: %v", addr, err)
	}
	defer ln.Close()
	var conn net.Conn
	client.Do(t, func() {
		conn, err = (&net.Dialer{Timeout: 5 * time.Second, Control: control}).Dial("tcp", addr.String())
	})
	if err != nil {
		t.Fatalf("dial %v: %v", addr, err)
	}
	defer conn.Close()
	peer, err := ln.Accept()
	if err != nil {
		t.Fatalf("accept on %v: %v", addr, err)
	}
	defer peer.Close()
	sender, receiver := conn, peer
	if toClient {
		sender, receiver = peer, conn
	}
	type result struct {
		sum [32]byte
		err error
	}
	res := make(chan result, 1)
	start := time.Now()
	go func() {
		h := sha256.New()
		_, err := io.Copy(h, receiver)
		res <- result{[32]byte(h.Sum(nil)), err}
	}()
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], uint64(size))
	h := sha256.New()
	sender.SetDeadline(time.Now().Add(transferTimeout))
	if _, err := io.CopyBuffer(io.MultiWriter(sender, h), io.LimitReader(rand.NewChaCha8(seed), size), make([]byte, 256<<10)); err != nil {
		t.Fatalf("send to %v: %v", addr, err)
	}
	sender.(*net.TCPConn).CloseWrite()
	var r result
	select {
	case r = <-res:
	case <-time.After(transferTimeout):
		t.Fatalf("receiver from %v timed out", addr)
	}
	if r.err != nil || r.sum != [32]byte(h.Sum(nil)) {
		t.Fatalf("receiver from %v: SHA-256 %x, sent %x, err %v", addr, r.sum, h.Sum(nil), r.err)
	}
	d := time.Since(start)
	if info := TCPInfo(sender.(*net.TCPConn)); info != nil && info.Total_retrans > 0 {
		t.Logf("the sender to %v retransmitted %d segments (RTO %v)", addr, info.Total_retrans, time.Duration(info.Rto)*time.Microsecond)
	}
	return d
}

// TCPInfo returns c's TCP_INFO, or nil.
func TCPInfo(c *net.TCPConn) *unix.TCPInfo {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil
	}
	var info *unix.TCPInfo
	raw.Control(func(fd uintptr) { info, _ = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) })
	return info
}

// Echo checks that addr, an address of server's, answers client: a UDP
// datagram to port 7007 and a TCP message to port 7008 come back, from
// echo servers that run for the check, within wait.
func Echo(t TB, server, client *NS, addr netip.Addr, wait time.Duration) {
	t.Helper()
	udpAddr, tcpAddr := netip.AddrPortFrom(addr, 7007), netip.AddrPortFrom(addr, 7008)
	defer EchoUDP(t, server, udpAddr)()
	var c *net.UDPConn
	var err error
	client.Do(t, func() { c, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(udpAddr)) })
	Must(t, err)
	defer c.Close()
	echo(t, c, "UDP", addr, wait)

	var ln net.Listener
	server.Do(t, func() { ln, err = net.Listen("tcp", tcpAddr.String()) })
	Must(t, err)
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			b := make([]byte, 64)
			k, _ := c.Read(b)
			c.Write(b[:k])
			c.Close()
		}
	}()
	var tc net.Conn
	client.Do(t, func() { tc, err = net.DialTimeout("tcp", tcpAddr.String(), wait) })
	if err != nil {
		t.Errorf("TCP connect to %v: %v", tcpAddr, err)
		return
	}
	defer tc.Close()
	echo(t, tc, "TCP", addr, wait)
}

// EchoUDP runs a UDP echo server on addr in ns (small datagrams) until
// the function it returns is called.
func EchoUDP(t TB, ns *NS, addr netip.AddrPort) (stop func()) {
	t.Helper()
	var srv *net.UDPConn
	var err error
	ns.Do(t, func() { srv, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr)) })
	Must(t, err)
	go func() {
		buf := make([]byte, 64)
		for {
			k, from, err := srv.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			srv.WriteToUDPAddrPort(buf[:k], from)
		}
	}()
	return func() { srv.Close() }
}

// echo writes a message to c and checks that it comes back within wait.
func echo(t TB, c net.Conn, proto string, addr netip.Addr, wait time.Duration) {
	t.Helper()
	c.SetDeadline(time.Now().Add(wait))
	msg := "echo " + proto + " " + addr.String()
	buf := make([]byte, 64)
	c.Write([]byte(msg))
	if k, err := c.Read(buf); err != nil || string(buf[:k]) != msg {
		t.Errorf("%s echo from %v: %q, %v", proto, addr, buf[:k], err)
	}
}

// UDPSequence sends count datagrams of size bytes (at least 8), each
// starting with its sequence number, from client to a socket on addr in
// server, at most window ahead of what arrived, and checks that they all
// arrive once and in order. It fails the test on a gap, a duplicate, a
// reordering, or when the datagrams stop coming for two seconds.
func UDPSequence(t TB, client, server *NS, addr netip.AddrPort, count, size, window int) {
	t.Helper()
	var srv, c *net.UDPConn
	var err error
	server.Do(t, func() { srv, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr)) })
	Must(t, err)
	defer srv.Close()
	client.Do(t, func() { c, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(addr)) })
	Must(t, err)
	defer c.Close()
	var got atomic.Int64
	fail := make(chan string, 1)
	go func() {
		buf := make([]byte, size+1)
		for next := uint64(0); next < uint64(count); next++ {
			srv.SetReadDeadline(time.Now().Add(2 * time.Second))
			k, err := srv.Read(buf)
			if err != nil || k != size {
				fail <- fmt.Sprintf("datagram %d: %d bytes, %v", next, k, err)
				return
			}
			if seq := binary.BigEndian.Uint64(buf); seq != next {
				fail <- fmt.Sprintf("datagram %d where %d was due", seq, next)
				return
			}
			got.Add(1)
		}
		fail <- ""
	}()
	buf := make([]byte, size)
	for i := range count {
		for int(got.Load()) < i-window {
			select {
			case f := <-fail:
				t.Fatalf("UDP to %v: %s", addr, f)
			case <-time.After(100 * time.Microsecond):
			}
		}
		binary.BigEndian.PutUint64(buf, uint64(i))
		if _, err := c.Write(buf); err != nil {
			t.Fatalf("UDP to %v: send %d: %v", addr, i, err)
		}
	}
	if f := <-fail; f != "" {
		t.Fatalf("UDP to %v: %s (%d of %d arrived in order)", addr, f, got.Load(), count)
	}
}

// Counters returns ns's protocol counters, /proc/net/netstat's and
// /proc/net/snmp's, each keyed by its group and name ("Udp:InErrors",
// "TcpExt:TCPOFOQueue").
func (ns *NS) Counters(t TB) map[string]int64 {
	t.Helper()
	c := map[string]int64{}
	Must(t, ns.Run(func() error {
		for _, f := range []string{"/proc/thread-self/net/netstat", "/proc/thread-self/net/snmp"} {
			b, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			lines := strings.Split(string(b), "\n")
			for i := 0; i+1 < len(lines); i += 2 {
				names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
				if len(names) == 0 || len(names) != len(values) || names[0] != values[0] {
					continue
				}
				for j := 1; j < len(names); j++ {
					c[names[0]+names[j]], _ = strconv.ParseInt(values[j], 10, 64)
				}
			}
		}
		return nil
	}))
	return c
}
