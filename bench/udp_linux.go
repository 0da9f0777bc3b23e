package main

// A netperf-UDP_STREAM-like sender and receiver. The sender, in A, sends
// super-packets with UDP_SEGMENT from a blocking socket with IP_RECVERR, as
// fast as the kernel takes them; every datagram carries a sequence number.
// When the kernel refuses a send with ENOBUFS (the TUN ring is full and the
// TUN device has the noqueue qdisc: that is how backpressure reaches a UDP
// sender, because the TUN driver orphans packets and a send buffer never
// fills), the sender counts a send error, waits briefly and sends the same
// super-packet again, so that nothing is lost on the way in. The receiver,
// in B, counts datagrams with recvmmsg.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// enobufsWait is how long the UDP sender waits after ENOBUFS before it
// sends the refused super-packet again.
const enobufsWait = 100 * time.Microsecond

type udpStream struct {
	tx, rx *net.UDPConn
	size   int // bytes per datagram
	segs   int // datagrams per send

	sent, sendErrors, otherErrors atomic.Uint64 // sends
	rxBytes, rxDgrams             atomic.Uint64
	rxMsgs                        atomic.Uint64 // sends whose every datagram arrived
	perMsg                        []uint8       // datagrams received per send (receiver only)

	stopping atomic.Bool
	wg       sync.WaitGroup
}

// startUDPStream starts a receiver on srv:port in B and a sender in A
// sending segs×size-byte super-packets to it.
func startUDPStream(l *lab, srv netip.Addr, port, segs, size int) (*udpStream, error) {
	if segs*size > 65507 {
		return nil, fmt.Errorf("%d×%d bytes exceed UDP's 65507-byte maximum", segs, size)
	}
	s := &udpStream{size: size, segs: segs}
	dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(srv, uint16(port)))
	err := l.B.Run(func() error {
		var err error
		s.rx, err = net.ListenUDP("udp4", dst)
		if err != nil {
			return fmt.Errorf("listen udp %v: %w", dst, err)
		}
		// A deep receive buffer, so that the receiver is not what drops.
		return setsockopt(s.rx, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20)
	})
	if err == nil {
		err = l.A.Run(func() error {
			var err error
			if s.tx, err = net.DialUDP("udp4", nil, dst); err != nil {
				return fmt.Errorf("dial udp %v: %w", dst, err)
			}
			if err := setsockopt(s.tx, unix.IPPROTO_IP, unix.IP_RECVERR, 1); err != nil {
				return err
			}
			return setsockopt(s.tx, unix.IPPROTO_UDP, unix.UDP_SEGMENT, size)
		})
	}
	if err == nil {
		err = s.probe()
	}
	if err != nil {
		s.close()
		return nil, err
	}
	s.wg.Add(2)
	go s.receive()
	go s.send()
	return s, nil
}

// probe sends short datagrams until one arrives, then drains the late
// ones: the path, the server's next hop at the gateway included, is
// known before the flood. (Backpressure is lossless once it is; while it
// resolves, the gateway queues a bounded number of frames, as the
// kernel's arp_queue, and drops a flood's excess.)
func (s *udpStream) probe() error {
	buf := make([]byte, 2048)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		s.tx.Write([]byte("probe")) // an ICMP error queued meanwhile is no matter: try again
		s.rx.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if _, err := s.rx.Read(buf); err != nil {
			continue
		}
		for {
			s.rx.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			if _, err := s.rx.Read(buf); err != nil {
				return s.rx.SetReadDeadline(time.Time{})
			}
		}
	}
	return errors.New("udp stream: no datagram reached the receiver within 10 s")
}

// send sends until stopped.
func (s *udpStream) send() {
	defer s.wg.Done()
	defer trafficThread()()
	buf := make([]byte, s.segs*s.size)
	var seq uint64
	for !s.stopping.Load() {
		for j := range s.segs {
			binary.BigEndian.PutUint64(buf[j*s.size:], seq+uint64(j))
		}
		for !s.stopping.Load() {
			_, err := s.tx.Write(buf)
			if err == nil {
				s.sent.Add(1)
				seq += uint64(s.segs)
				break
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if errors.Is(err, syscall.ENOBUFS) {
				s.sendErrors.Add(1)
				time.Sleep(enobufsWait)
				continue // the same super-packet again
			}
			s.otherErrors.Add(1) // e.g. an ICMP error queued by IP_RECVERR
			time.Sleep(enobufsWait)
		}
	}
}

// receive counts datagrams until the socket is closed.
func (s *udpStream) receive() {
	defer s.wg.Done()
	defer trafficThread()()
	pc := ipv4.NewPacketConn(s.rx)
	msgs := make([]ipv4.Message, 64)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, 2048)}
	}
	for {
		n, err := pc.ReadBatch(msgs, 0)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		var bytes uint64
		for _, m := range msgs[:n] {
			bytes += uint64(m.N)
			if m.N >= 8 {
				s.count(binary.BigEndian.Uint64(m.Buffers[0]))
			}
		}
		s.rxBytes.Add(bytes)
		s.rxDgrams.Add(uint64(n))
	}
}

// count notes datagram seq and counts its send as received once all of
// its datagrams are in.
func (s *udpStream) count(seq uint64) {
	m := seq / uint64(s.segs)
	if m > s.sent.Load()+1 {
		return // not a sequence number we sent
	}
	for uint64(len(s.perMsg)) <= m {
		s.perMsg = append(s.perMsg, make([]uint8, max(1024, len(s.perMsg)))...)
	}
	s.perMsg[m]++
	if int(s.perMsg[m]) == s.segs {
		s.rxMsgs.Add(1)
	}
}

// counters fills in the sender's and the receiver's side of c.
func (s *udpStream) counters(c *counters) {
	c.Sent, c.SendErrors = s.sent.Load(), s.sendErrors.Load()
	c.RxBytes, c.Received = s.rxBytes.Load(), s.rxDgrams.Load()
	c.RxMessages = s.rxMsgs.Load()
	c.RxMsgBytes = c.RxMessages * uint64(s.segs*s.size)
}

// stop stops the sender, waits until the receiver has seen nothing new
// for 300 ms (at most 3 s: queues drain), closes both sockets and returns
// how many datagrams were sent and never received.
func (s *udpStream) stop() (lost int64) {
	s.stopping.Store(true)
	deadline := time.Now().Add(3 * time.Second)
	last, lastChange := s.rxDgrams.Load(), time.Now()
	for time.Now().Before(deadline) && time.Since(lastChange) < 300*time.Millisecond {
		time.Sleep(20 * time.Millisecond)
		if n := s.rxDgrams.Load(); n != last {
			last, lastChange = n, time.Now()
		}
	}
	s.close()
	s.wg.Wait()
	return int64(s.sent.Load())*int64(s.segs) - int64(s.rxDgrams.Load())
}

func (s *udpStream) close() {
	if s.tx != nil {
		s.tx.Close()
	}
	if s.rx != nil {
		s.rx.Close()
	}
}

// setsockopt sets an integer socket option on a connection.
func setsockopt(c syscall.Conn, level, opt, v int) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), level, opt, v) }); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("setsockopt %d/%d=%d: %w", level, opt, v, serr)
	}
	return nil
}
