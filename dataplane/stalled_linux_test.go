package dataplane

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// TestGatewayStalledReader stops the application in A reading while the
// server in B sends hard, behind each port: a TCP connection whose
// receiver in A never calls Read (its window closes, the sender in B
// waits with data unsent), and a UDP socket in A that is never read,
// flooded from B (A's kernel drops at the socket). Meanwhile a TCP
// stream each way goes through intact; the return path keeps writing
// into the TUN (the drops are A's kernel's, counted by it, none the
// gateway's); the gateway's heap stays within floodHeapGrowth and its
// goroutines come back; and once the receiver reads again, every byte
// the stalled connection's sender wrote arrives.
func TestGatewayStalledReader(t *testing.T) { forPorts(t, gatewayStalledReader) }

func gatewayStalledReader(t *testing.T, port labPort) {
	lab := newGwLab(t, port.config(GatewayConfig{}))
	tcpTransfer(t, lab, labSrv4, 4<<20, false)
	tcpTransfer(t, lab, labSrv4, 4<<20, true)
	base := settledFootprint(0)
	st0 := lab.g.Stats()
	drops0 := udpRcvbufErrors(t, lab.A)

	stalled := startStalledTCP(t, lab)
	udpStop, udpSent := floodUnread(t, lab)
	stalled.waitClosed(t)
	waitFor(t, "A's kernel dropping at the unread UDP socket", func() bool { return udpRcvbufErrors(t, lab.A) > drops0 })

	// With both stalls in place, other flows go on.
	tcpTransfer(t, lab, labSrv4, 8<<20, false)
	tcpTransfer(t, lab, labSrv4, 8<<20, true)
	during := sample()
	stalled.checkStillClosed(t)
	close(udpStop)
	sent := <-udpSent
	// A's kernel counts a datagram after the gateway's return path has
	// counted and written it: read the kernel's counters first.
	dropped := udpRcvbufErrors(t, lab.A) - drops0
	passed := lab.g.Stats().Return.Packets - st0.Return.Packets

	stalled.resume(t)
	after := settledFootprint(base.goroutines + floodGoroutines)
	st := lab.settledStats()
	t.Logf("unread UDP socket: %d datagrams sent from B, %d dropped by A's kernel at the socket; the return path passed %d packets meanwhile (the TCP streams' too), drops %v",
		sent, dropped, passed, st.Return.Drops)
	t.Logf("stalled TCP: %d bytes written by B, all received after the stall", stalled.written.Load())
	t.Logf("footprint: before %s; during the stall %s; after %s; heap in use %+d KiB, %+d KiB",
		base, during, after, (int64(during.heap)-int64(base.heap))>>10, (int64(after.heap)-int64(base.heap))>>10)
	if dropped == 0 || passed < dropped {
		t.Errorf("A's kernel dropped %d datagrams at the socket, the return path passed %d packets: want drops by the kernel of datagrams the gateway wrote", dropped, passed)
	}
	if lost(st.Forward.Drops) != 0 || st.Return.Drops.Total() != 0 {
		t.Errorf("the gateway dropped: forward %v, return %v", st.Forward.Drops, st.Return.Drops)
	}
	if during.heap > base.heap+floodHeapGrowth { // the test's own goroutines still run
		t.Errorf("during the stall: heap in use grew from %d KiB to %d KiB (bound +%d KiB)", base.heap>>10, during.heap>>10, floodHeapGrowth>>10)
	}
	if err := after.exceeds(base, floodHeapGrowth, floodGoroutines); err != nil {
		t.Errorf("after the stall: %v", err)
	}
}

// waitFor waits up to 20 s for cond, failing the test then.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 20 s", what)
		}
	}
}

// stalledTCP is a TCP connection from B to the application in A whose
// receiver does not read until resume.
type stalledTCP struct {
	recv, send *net.TCPConn // in A, in B
	written    atomic.Int64 // bytes B's writer has written
	stop       atomic.Bool  // B's writer stops at its next write
	sent       chan [32]byte
}

// startStalledTCP connects B to a listener in A and starts writing a
// pseudo-random stream from B, as fast as the connection takes it.
func startStalledTCP(t *testing.T, lab *gwLab) *stalledTCP {
	t.Helper()
	addr := netip.AddrPortFrom(netlab.App4, 5401).String()
	var ln net.Listener
	lab.A.Do(t, func() {
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			t.Fatal(err)
		}
	})
	defer ln.Close()
	s := &stalledTCP{sent: make(chan [32]byte, 1)}
	lab.B.Do(t, func() {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		s.send = c.(*net.TCPConn)
	})
	c, err := ln.Accept()
	netlab.Must(t, err)
	s.recv = c.(*net.TCPConn)
	t.Cleanup(func() { s.send.Close(); s.recv.Close() })
	go func() {
		h := sha256.New()
		src := rand.NewChaCha8([32]byte{5, 4, 0, 1})
		buf := make([]byte, 256<<10)
		for !s.stop.Load() {
			src.Read(buf)
			n, err := s.send.Write(buf)
			h.Write(buf[:n])
			s.written.Add(int64(n))
			if err != nil {
				break
			}
		}
		s.send.CloseWrite()
		s.sent <- [32]byte(h.Sum(nil))
	}()
	return s
}

// closed reports whether the receiver's window is closed with data
// waiting at the sender: the sender sees a zero window and has bytes
// it cannot send.
func (s *stalledTCP) closed() (bool, string) {
	info := netlab.TCPInfo(s.send)
	if info == nil {
		return false, "no TCP_INFO"
	}
	return info.Snd_wnd == 0 && info.Notsent_bytes > 0,
		fmt.Sprintf("send window %d, %d bytes not sent, %d written", info.Snd_wnd, info.Notsent_bytes, s.written.Load())
}

// waitClosed waits for the receiver's window to close.
func (s *stalledTCP) waitClosed(t *testing.T) {
	t.Helper()
	waitFor(t, "zero window at the stalled TCP connection's sender", func() bool { ok, _ := s.closed(); return ok })
}

// checkStillClosed checks that the window is still closed: nothing read
// the receiver's data meanwhile.
func (s *stalledTCP) checkStillClosed(t *testing.T) {
	t.Helper()
	if ok, why := s.closed(); !ok {
		t.Errorf("the stalled TCP connection's window opened: %s", why)
	}
}

// resume stops the writer at its next write, reads everything from the
// receiver and compares it with what was written.
func (s *stalledTCP) resume(t *testing.T) {
	t.Helper()
	s.stop.Store(true)
	s.recv.SetReadDeadline(time.Now().Add(time.Minute))
	h := sha256.New()
	n, err := io.Copy(h, s.recv)
	if err != nil {
		t.Fatalf("reading the stalled connection after %d bytes: %v", n, err)
	}
	if sent := <-s.sent; n != s.written.Load() || sent != [32]byte(h.Sum(nil)) {
		t.Errorf("the stalled connection delivered %d bytes (SHA-256 %x), the sender wrote %d (%x)", n, h.Sum(nil), s.written.Load(), sent)
	}
}

// floodUnread opens a UDP socket on the application's address in A that
// nothing reads and floods it from B with 1400-byte datagrams, as fast
// as B's kernel takes them, until stop closes; sent then gives the
// datagrams sent.
func floodUnread(t *testing.T, lab *gwLab) (stop chan struct{}, sent chan int) {
	t.Helper()
	addr := netip.AddrPortFrom(netlab.App4, 9401).String()
	var pc net.PacketConn
	lab.A.Do(t, func() {
		var err error
		if pc, err = net.ListenPacket("udp", addr); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { pc.Close() })
	var c net.Conn
	lab.B.Do(t, func() {
		var err error
		if c, err = net.Dial("udp", addr); err != nil {
			t.Fatal(err)
		}
	})
	stop, sent = make(chan struct{}), make(chan int, 1)
	go func() {
		defer c.Close()
		buf := make([]byte, 1400)
		n := 0
		for {
			select {
			case <-stop:
				sent <- n
				return
			default:
			}
			if _, err := c.Write(buf); err == nil {
				n++
			} else if !errors.Is(err, unix.ENOBUFS) {
				sent <- n
				return
			}
			if n%floodPace == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	return stop, sent
}

// floodPace is how many datagrams floodUnread sends per millisecond at
// most (about 180 Mbit/s): a few milliseconds fill the unread socket's
// buffer, and an unpaced flood on a slow machine (an emulated guest)
// starves the TCP streams that go through the same return path.
const floodPace = 16

// udpRcvbufErrors reads the UDP datagrams ns's kernel dropped for a
// full socket receive buffer (Udp: RcvbufErrors in /proc/net/snmp).
func udpRcvbufErrors(t *testing.T, ns *netlab.NS) uint64 {
	t.Helper()
	var b []byte
	netlab.Must(t, ns.Run(func() (err error) { b, err = os.ReadFile("/proc/thread-self/net/snmp"); return err }))
	var names []string
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "Udp: ")
		if !ok {
			continue
		}
		if names == nil {
			names = strings.Fields(rest)
			continue
		}
		for i, v := range strings.Fields(rest) {
			if i < len(names) && names[i] == "RcvbufErrors" {
				n, err := strconv.ParseUint(v, 10, 64)
				netlab.Must(t, err)
				return n
			}
		}
	}
	t.Fatalf("no Udp RcvbufErrors in /proc/net/snmp:\n%s", b)
	return 0
}
