package tunnel_test

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/tunnel"
	"github.com/gsoplane/gsoplane/dataplane/udp"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// flowOrder is a Seal and an Open hook for a plaintext tunnel: Seal
// numbers each inner flow's datagrams in the header, as a VPN numbers a
// peer's, and Open counts those whose number is below one it saw
// before, a replay window of width 0 per flow: what the way between
// took out of order.
type flowOrder struct {
	mu                sync.Mutex
	sealed, opened    map[flowKey]uint64 // per flow: the next number, the highest seen plus one
	reordered, passed atomic.Uint64
	// The same per peer, to see how a VPN's one counter per peer fares:
	// the peer's datagrams numbered across flows and queues, those below
	// the highest seen and those below it by more than a replay window
	// of 2048.
	peerSealed, peerTop uint64
	peerBelow, peerLate atomic.Uint64
}

// flowKey is an inner IPv4 packet's flow, its direction included.
type flowKey struct {
	src, dst     [4]byte
	proto        byte
	sport, dport uint16
}

func newFlowOrder() *flowOrder {
	return &flowOrder{sealed: map[flowKey]uint64{}, opened: map[flowKey]uint64{}}
}

// key reads the flow of the inner packet of datagram d (behind the
// default headroom); ok is false for anything but IPv4 TCP or UDP.
func (*flowOrder) key(d []byte) (k flowKey, ok bool) {
	p := d[tunnel.DefaultHeadroom:]
	if len(p) < 20 || p[0]>>4 != 4 {
		return k, false
	}
	ihl := int(p[0]&15) * 4
	if p[9] != 6 && p[9] != 17 || len(p) < ihl+4 {
		return k, false
	}
	k.src, k.dst, k.proto = [4]byte(p[12:16]), [4]byte(p[16:20]), p[9]
	k.sport, k.dport = binary.BigEndian.Uint16(p[ihl:]), binary.BigEndian.Uint16(p[ihl+2:])
	return k, true
}

func (f *flowOrder) seal(dgrams [][]byte, _ []int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, d := range dgrams {
		if k, ok := f.key(d); ok {
			binary.LittleEndian.PutUint32(d, uint32(f.sealed[k]))
			f.sealed[k]++
		}
		binary.LittleEndian.PutUint64(d[8:], f.peerSealed)
		f.peerSealed++
	}
}

func (f *flowOrder) open(dgrams [][]byte, _ []int, _ []udp.Verdict) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, d := range dgrams {
		switch c := binary.LittleEndian.Uint64(d[8:]); {
		case c+2048 < f.peerTop:
			f.peerLate.Add(1)
			f.peerBelow.Add(1)
		case c < f.peerTop:
			f.peerBelow.Add(1)
		default:
			f.peerTop = c + 1
		}
		k, ok := f.key(d)
		if !ok {
			continue
		}
		f.passed.Add(1)
		switch n := uint64(binary.LittleEndian.Uint32(d)); {
		case n < f.opened[k]:
			f.reordered.Add(1)
		default:
			f.opened[k] = n + 1
		}
	}
}

// streamStats are what the TCP stacks saw of streams: the senders'
// retransmissions and the segments the receivers took out of order (a
// hole before them: one lost or reordered on the way).
type streamStats struct{ retrans, outOfOrder uint32 }

// tcpStreams runs n TCP streams of size bytes at once through the
// tunnel, every other one from B to A, SHA-256 checked.
func tcpStreams(t *testing.T, p *netlab.Pair, n int, size int64) (sum streamStats) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for i := range n {
		client, server, addr := p.A, p.B, netip.AddrPortFrom(innerB, uint16(5100+i))
		if i%2 == 1 {
			client, server, addr = p.B, p.A, netip.AddrPortFrom(innerA, uint16(5100+i))
		}
		var ln net.Listener
		var err error
		server.Do(t, func() { ln, err = net.Listen("tcp", addr.String()) })
		netlab.Must(t, err)
		defer ln.Close()
		var c net.Conn
		client.Do(t, func() { c, err = net.DialTimeout("tcp", addr.String(), 5*time.Second) })
		netlab.Must(t, err)
		defer c.Close()
		s, err := ln.Accept()
		netlab.Must(t, err)
		defer s.Close()
		wg.Go(func() {
			st, err := stream(c.(*net.TCPConn), s.(*net.TCPConn), size)
			mu.Lock()
			defer mu.Unlock()
			sum.retrans += st.retrans
			sum.outOfOrder += st.outOfOrder
			if err != nil {
				errs = append(errs, fmt.Errorf("stream to %v: %w", addr, err))
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	return sum
}

// stream sends size pseudo-random bytes from c to s and compares their
// SHA-256.
func stream(c, s *net.TCPConn, size int64) (st streamStats, err error) {
	got := make(chan [32]byte, 1)
	go func() {
		h := sha256.New()
		io.Copy(h, s)
		got <- [32]byte(h.Sum(nil))
	}()
	deadline := time.Now().Add(2 * time.Minute)
	c.SetDeadline(deadline)
	s.SetDeadline(deadline)
	h := sha256.New()
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], uint64(size))
	if _, err := io.CopyBuffer(io.MultiWriter(c, h), io.LimitReader(rand.NewChaCha8(seed), size), make([]byte, 256<<10)); err != nil {
		return st, err
	}
	c.CloseWrite()
	if sum := <-got; sum != [32]byte(h.Sum(nil)) {
		return st, fmt.Errorf("SHA-256 %x, sent %x", sum, h.Sum(nil))
	}
	if info := netlab.TCPInfo(c); info != nil {
		st.retrans = info.Total_retrans
	}
	if info := netlab.TCPInfo(s); info != nil {
		st.outOfOrder = info.Rcv_ooopack
	}
	return st, nil
}

// A tunnel with two queues keeps each flow in order end to end: with
// several TCP streams both ways at once, not one datagram of a flow is
// opened after a later one of the same flow, and the receiving TCP
// stacks see no segment out of order (a hole before it) unless
// something was dropped on the way. The senders' retransmissions are
// logged, not checked: on a loaded machine a timer may fire early.
func TestTunnelQueuesOrder(t *testing.T) {
	p := netlab.NewPairT(t, "tunnel")
	ab, ba := newFlowOrder(), newFlowOrder() // the two directions
	a := openEnd(t, p.A, p.AddrA, p.AddrB, innerA, tunnel.Config{Queues: 2, Seal: ab.seal, Open: ba.open})
	b := openEnd(t, p.B, p.AddrB, p.AddrA, innerB, tunnel.Config{Queues: 2, Seal: ba.seal, Open: ab.open})
	a.start()
	b.start()
	before := dropped(t, a) + dropped(t, b)
	st := tcpStreams(t, p, 4, 16<<20)
	drops := dropped(t, a) + dropped(t, b) - before
	t.Logf("%d retransmissions, %d segments out of order, %d dropped", st.retrans, st.outOfOrder, drops)
	for _, o := range []*flowOrder{ab, ba} {
		t.Logf("%d of %d datagrams of a flow out of order; of the peer's, %d below the highest seen, %d more than 2048 below",
			o.reordered.Load(), o.passed.Load(), o.peerBelow.Load(), o.peerLate.Load())
		if o.reordered.Load() != 0 {
			t.Errorf("%d of %d datagrams of a flow opened after a later one", o.reordered.Load(), o.passed.Load())
		}
	}
	if st.outOfOrder != 0 && drops == 0 {
		t.Errorf("%d segments out of order at the receivers, nothing dropped", st.outOfOrder)
	}
}

// dropped sums what e's tunnel and its TUN device dropped so far.
func dropped(t *testing.T, e *end) uint64 {
	st := e.tnl.Stats()
	return st.Forward.Drops.Total() + st.Return.Drops.Total() + st.Send.Dropped + st.Receive.Refused + e.ns.LinkDrops(t, tunName)
}
