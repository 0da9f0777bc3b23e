package main

// Bulk TCP streams from A to B, or from B to A (netperf TCP_STREAM): the
// sender writes 256 KiB at a time as fast as the socket takes it, the
// receiver reads and discards. Retransmits come from the sender socket's
// TCP_INFO.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

const tcpChunk = 256 << 10

type tcpStream struct {
	ln         *net.TCPListener
	conn, peer *net.TCPConn

	sent, rxBytes atomic.Uint64
	retrans       atomic.Uint64 // last TCP_INFO tcpi_total_retrans seen

	stopping atomic.Bool
	wg       sync.WaitGroup
}

// connectTimeout bounds a stream's connection (the wg-device row's
// tunnel has done its handshake before: waitHandshake).
const connectTimeout = 15 * time.Second

// startStream connects from the sender's namespace to dst:port in the
// receiver's and starts the stream.
func startStream(sender, receiver *netlab.NS, dst netip.Addr, port int) (*tcpStream, error) {
	s := &tcpStream{}
	addr := net.TCPAddrFromAddrPort(netip.AddrPortFrom(dst, uint16(port)))
	err := receiver.Run(func() error {
		var err error
		s.ln, err = net.ListenTCP("tcp4", addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen tcp %v: %w", addr, err)
	}
	err = sender.Run(func() error {
		c, err := net.DialTimeout("tcp4", addr.String(), connectTimeout)
		if err == nil {
			s.conn = c.(*net.TCPConn)
		}
		return err
	})
	if err == nil {
		s.ln.SetDeadline(time.Now().Add(connectTimeout))
		s.peer, err = s.ln.AcceptTCP()
	}
	if err != nil {
		s.close()
		return nil, fmt.Errorf("connect tcp %v: %w", addr, err)
	}
	s.wg.Add(2)
	go s.receive()
	go s.send()
	return s, nil
}

func (s *tcpStream) send() {
	defer s.wg.Done()
	defer trafficThread()()
	chunk := make([]byte, tcpChunk)
	for i := range chunk {
		chunk[i] = byte(i*131 + i>>8) // not all zeros, not compressible by anyone on the way
	}
	for !s.stopping.Load() {
		n, err := s.conn.Write(chunk)
		s.sent.Add(uint64(n))
		if err != nil {
			return
		}
	}
}

func (s *tcpStream) receive() {
	defer s.wg.Done()
	defer trafficThread()()
	buf := make([]byte, tcpChunk)
	for {
		n, err := s.peer.Read(buf)
		s.rxBytes.Add(uint64(n))
		if err != nil {
			return
		}
	}
}

// retransmits reads the sender's TCP_INFO; after an error it returns the
// last value read.
func (s *tcpStream) retransmits() uint64 {
	raw, err := s.conn.SyscallConn()
	if err != nil {
		return s.retrans.Load()
	}
	raw.Control(func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			s.retrans.Store(uint64(info.Total_retrans))
		}
	})
	return s.retrans.Load()
}

func (s *tcpStream) counters(c *counters) {
	c.Sent, c.RxBytes = s.sent.Load(), s.rxBytes.Load()
	c.Retrans = s.retransmits()
}

// stop ends the stream and closes the sockets.
func (s *tcpStream) stop() error {
	s.stopping.Store(true)
	s.retransmits()
	s.close()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-time.After(5 * time.Second):
		return errors.New("tcp stream did not stop")
	}
}

func (s *tcpStream) close() {
	if s.conn != nil {
		s.conn.Close()
	}
	if s.peer != nil {
		s.peer.Close()
	}
	if s.ln != nil {
		s.ln.Close()
	}
}

// tcpStreams are several streams measured as one.
type tcpStreams []*tcpStream

// startTCPStreams starts n streams from B to the application in A (toA)
// or from A to the server in B, on consecutive ports from port.
func startTCPStreams(l *lab, n int, toA bool, port int) (tcpStreams, error) {
	var ss tcpStreams
	for i := range n {
		var s *tcpStream
		var err error
		if toA {
			s, err = startStream(l.B, l.A, netlab.App4, port+i)
		} else {
			s, err = startStream(l.A, l.B, srv4, port+i)
		}
		if err != nil {
			return nil, errors.Join(err, ss.stop())
		}
		ss = append(ss, s)
	}
	return ss, nil
}

func (ss tcpStreams) counters(c *counters) {
	for _, s := range ss {
		var one counters
		s.counters(&one)
		c.Sent, c.RxBytes, c.Retrans = c.Sent+one.Sent, c.RxBytes+one.RxBytes, c.Retrans+one.Retrans
	}
}

func (ss tcpStreams) stop() error {
	var errs []error
	for _, s := range ss {
		errs = append(errs, s.stop())
	}
	return errors.Join(errs...)
}
