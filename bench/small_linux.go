package main

// A small-packet flood, our stand-in for pktgen (this kernel has none):
// many UDP flows (one connected socket each, so each has its own source
// port) from A to the discard port in B, sent in sendmmsg batches. Sockets
// have IP_RECVERR, so a full TUN ring answers ENOBUFS; the sender counts it
// and yields briefly, which keeps the gateway saturated without the sender
// burning the CPU the gateway needs.

import (
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

const (
	smallBatch = 64 // datagrams per sendmmsg
	smallPause = 20 * time.Microsecond
)

type smallFlood struct {
	conns []*net.UDPConn

	sent, sendErrors atomic.Uint64 // datagrams
	stopping         atomic.Bool
	wg               sync.WaitGroup
}

// startSmallFlood opens flows sockets in A and starts senders goroutines
// sending payload-byte datagrams to dst.
func startSmallFlood(l *lab, dst netip.AddrPort, flows, senders, payload int) (*smallFlood, error) {
	f := &smallFlood{}
	err := l.A.Run(func() error {
		for range flows {
			c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(dst))
			if err != nil {
				return fmt.Errorf("dial udp %v: %w", dst, err)
			}
			f.conns = append(f.conns, c)
			if err := setsockopt(c, unix.IPPROTO_IP, unix.IP_RECVERR, 1); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		f.close()
		return nil, err
	}
	senders = max(1, min(senders, flows))
	for i := range senders {
		var mine []*net.UDPConn
		for j := i; j < len(f.conns); j += senders {
			mine = append(mine, f.conns[j])
		}
		f.wg.Add(1)
		go f.send(mine, payload)
	}
	return f, nil
}

func (f *smallFlood) send(conns []*net.UDPConn, payload int) {
	defer f.wg.Done()
	defer trafficThread()()
	buf := make([]byte, payload)
	for i := range buf {
		buf[i] = byte(i)
	}
	msgs := make([]ipv4.Message, smallBatch)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{buf}
	}
	pcs := make([]*ipv4.PacketConn, len(conns))
	for i, c := range conns {
		pcs[i] = ipv4.NewPacketConn(c)
	}
	for !f.stopping.Load() {
		for _, pc := range pcs {
			n, err := pc.WriteBatch(msgs, 0)
			f.sent.Add(uint64(max(n, 0)))
			if err == nil {
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if errors.Is(err, syscall.ENOBUFS) {
				f.sendErrors.Add(1)
			}
			time.Sleep(smallPause)
		}
	}
}

func (f *smallFlood) counters(c *counters) {
	c.Sent, c.SendErrors = f.sent.Load(), f.sendErrors.Load()
}

func (f *smallFlood) stop() {
	f.stopping.Store(true)
	f.wg.Wait()
	f.close()
}

func (f *smallFlood) close() {
	for _, c := range f.conns {
		c.Close()
	}
}
