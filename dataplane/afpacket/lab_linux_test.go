package afpacket

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/dataplane/tun"
	"github.com/gsoplane/gsoplane/internal/netlab"
	"github.com/gsoplane/gsoplane/segment"
	"github.com/gsoplane/gsoplane/txqueue"
)

func TestMain(m *testing.M) { os.Exit(netlab.Main(m)) }

const (
	labTUN  = "tun-afp"
	labWait = 5 * time.Second
)

// lab is the reference topology (netlab) with, optionally, a small
// gateway in A: a TUN device whose queues feed forwarders into the
// port's sinks, and return paths from the port's receivers into the TUN.
type lab struct {
	*netlab.Topology
	port  *Port
	tun   *tun.Device
	sinks []*Sink
	recvs []*recordingReceiver
	fwds  []*pipeline.Forwarder
	rets  []*pipeline.ReturnPath
	stop  func()
}

// newLab builds the topology; gro switches GRO on gw-a (the port's NIC).
func newLab(t testing.TB, gro bool) *lab {
	t.Helper()
	l := &lab{Topology: netlab.NewTopologyT(t, "afp")}
	if gro {
		netlab.Must(t, l.A.SetFeatures(netlab.NICA, map[string]bool{"gro": true}))
	}
	return l
}

// open opens a port on gw-a in A, closed in t.Cleanup.
func (l *lab) open(t testing.TB, cfg Config) *Port {
	t.Helper()
	if cfg.Ifname == "" {
		cfg.Ifname = netlab.NICA
	}
	if cfg.Redirect == nil {
		cfg.Redirect = netlab.AppRoutes
	}
	var err error
	l.A.Do(t, func() { l.port, err = Open(cfg) })
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	p := l.port
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// recordingReceiver passes a port's receiver on and remembers what it saw
// of the kernel's headers.
type recordingReceiver struct {
	pipeline.HeaderReceiver
	mu        sync.Mutex
	gsoTypes  map[segment.GSOType]int
	maxSize   int
	gsoFrames int
	bad       []string // super-packets whose header the TUN could not use
}

func (r *recordingReceiver) Receive(frames [][]byte) (int, error) {
	n, err := r.HeaderReceiver.Receive(frames)
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range n {
		h := r.Header(i)
		r.gsoTypes[h.GSOType]++
		if h.GSOType != segment.GSONone {
			r.gsoFrames++
			pkt := frames[i][Headroom:]
			r.maxSize = max(r.maxSize, len(pkt))
			l3 := 20
			if len(pkt) > 0 && pkt[0]>>4 == 6 {
				l3 = 40
			}
			if !h.NeedsCsum() || int(h.CsumStart) != l3 || h.CsumOffset != 16 || h.GSOSize == 0 || int(h.HdrLen) > len(pkt) {
				r.bad = append(r.bad, fmt.Sprintf("%+v", h))
			}
		}
	}
	return n, err
}

func (r *recordingReceiver) superFrames() (int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gsoFrames, r.maxSize
}

// gateway opens the port and a TUN device in A and runs the pipeline
// between them until the test ends.
func (l *lab) gateway(t testing.TB, cfg Config, mode GSOMode) {
	t.Helper()
	l.gatewayWith(t, cfg, mode, func(s *Socket) pipeline.HeaderReceiver { return s.Receiver() })
}

// gatewayWith is gateway with the receivers newRecv makes.
func (l *lab) gatewayWith(t testing.TB, cfg Config, mode GSOMode, newRecv func(*Socket) pipeline.HeaderReceiver) {
	t.Helper()
	l.open(t, cfg)
	l.A.Do(t, func() {
		var err error
		l.tun, err = tun.Open(tun.Config{Name: labTUN, Offload: true, NoQueue: true})
		if err != nil {
			t.Fatalf("tun: %v", err)
		}
	})
	t.Cleanup(func() { l.tun.Close() })
	netlab.Must(t, l.TUNUp(labTUN))
	socks := l.port.Sockets()
	q := l.tun.Queues()[0]
	for i, s := range socks {
		var sink *Sink
		var err error
		l.A.Do(t, func() { sink, err = NewSink(s, l.port.Ifindex(), netip.Addr{}, mode) })
		if err != nil {
			t.Fatalf("NewSink: %v", err)
		}
		t.Cleanup(sink.Close)
		l.sinks = append(l.sinks, sink)
		if i == 0 { // one TUN queue: one forwarder
			l.fwds = append(l.fwds, newForwarder(t, q, l.tun.HeaderSize(), sink))
		}
		rec := &recordingReceiver{HeaderReceiver: newRecv(s), gsoTypes: map[segment.GSOType]int{}}
		l.recvs = append(l.recvs, rec)
		r, err := pipeline.NewReturnPath(pipeline.ReturnConfig{Receiver: rec, Writer: q, HeaderSize: l.tun.HeaderSize(), TCP: true})
		if err != nil {
			t.Fatal(err)
		}
		l.rets = append(l.rets, r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, len(l.fwds)+len(l.rets))
	for _, f := range l.fwds {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- f.Run(ctx) }()
	}
	for _, r := range l.rets {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- r.Run(ctx) }()
	}
	stopped := false
	l.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		l.tun.Close()
		l.port.StopReceive()
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil && !errors.Is(err, pipeline.ErrSourceClosed) {
				t.Errorf("pipeline: %v", err)
			}
		}
	}
	t.Cleanup(l.stop)
}

// newForwarder makes a forwarder from a TUN queue into sink with
// backpressure, sized from the sink's frames.
func newForwarder(t testing.TB, src pipeline.Source, hdrSize int, sink *Sink) *pipeline.Forwarder {
	t.Helper()
	size := txqueue.Truesize(sink.FrameSize())
	frames := sink.s.Frames()
	burst := segment.DefaultMaxSegments * size
	budget, err := txqueue.NewBudget(txqueue.BudgetConfig{Burst: burst, Limit: max(frames*size, burst)})
	if err != nil {
		t.Fatal(err)
	}
	queue, err := txqueue.NewQueue[pipeline.Frame](txqueue.QueueConfig{Policy: txqueue.Block, Packets: frames + sink.nLarge, Bytes: frames*size + burst})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { queue.Close() })
	f, err := pipeline.NewForwarder(pipeline.ForwarderConfig{
		Source: src, HeaderSize: hdrSize, Sink: sink, FrameSize: sink.FrameSize(), Budget: budget, Queue: queue,
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// stream is a deterministic pseudo-random byte stream of n bytes.
type stream struct {
	r *rand.PCG
	n int64
}

func (s *stream) Read(p []byte) (int, error) {
	if s.n <= 0 {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), s.n)&^7]
	if len(p) == 0 {
		return 0, io.ErrShortBuffer
	}
	for i := 0; i < len(p); i += 8 {
		binary.LittleEndian.PutUint64(p[i:], s.r.Uint64())
	}
	s.n -= int64(len(p))
	return len(p), nil
}

// tcpTransfer sends size bytes of a deterministic stream between the
// application in A and the server in B (toA: from B to A) and checks the
// SHA-256 at the receiver.
func (l *lab) tcpTransfer(t testing.TB, srv netip.Addr, size int64, toA bool) time.Duration {
	t.Helper()
	addr := netip.AddrPortFrom(srv, 5201).String()
	var ln net.Listener
	l.B.Do(t, func() {
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			t.Fatalf("listen %s: %v", addr, err)
		}
	})
	defer ln.Close()
	var conn net.Conn
	l.A.Do(t, func() {
		var err error
		if conn, err = net.DialTimeout("tcp", addr, labWait); err != nil {
			t.Fatalf("dial %s: %v", addr, err)
		}
	})
	defer conn.Close()
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	sender, receiver := conn, peer
	if toA {
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
	h := sha256.New()
	src := &stream{r: rand.NewPCG(uint64(size), 7), n: size}
	sender.SetDeadline(time.Now().Add(2 * time.Minute))
	if _, err := io.CopyBuffer(io.MultiWriter(sender, h), src, make([]byte, 256<<10)); err != nil {
		t.Fatalf("send: %v", err)
	}
	sender.(*net.TCPConn).CloseWrite()
	var r result
	select {
	case r = <-res:
	case <-time.After(2 * time.Minute):
		t.Fatal("receiver timed out")
	}
	if r.err != nil || r.sum != [32]byte(h.Sum(nil)) {
		t.Fatalf("receiver: SHA-256 %x, sent %x, err %v", r.sum, h.Sum(nil), r.err)
	}
	return time.Since(start)
}

// sumStats adds up the port's sockets' counters.
func (l *lab) sumStats() Stats {
	var s Stats
	for _, sock := range l.port.Sockets() {
		o := sock.Stats()
		s.RX += o.RX
		s.RXBytes += o.RXBytes
		s.RXCalls += o.RXCalls
		s.RXSuper += o.RXSuper
		s.TX += o.TX
		s.TXBytes += o.TXBytes
		s.TXCalls += o.TXCalls
		s.TXSuper += o.TXSuper
		s.TXPartial += o.TXPartial
		s.TXBusy += o.TXBusy
		s.KernelPackets += o.KernelPackets
		s.Drops.Invalid += o.Drops.Invalid
		s.Drops.Truncated += o.Drops.Truncated
		s.Drops.Header += o.Drops.Header
		s.Drops.Unresolved += o.Drops.Unresolved
		s.Drops.Refused += o.Drops.Refused
		s.Drops.Kernel += o.Drops.Kernel
	}
	return s
}
