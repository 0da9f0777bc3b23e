package afpacket

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/dataplane/tun"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
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

// newSink makes a sink on s (a socket of the open port) in A, closed in
// t.Cleanup, and returns NewSink's error.
func (l *lab) newSink(t testing.TB, s *Socket, gateway netip.Addr, mode GSOMode) (*Sink, error) {
	t.Helper()
	var sink *Sink
	var err error
	l.A.Do(t, func() { sink, err = NewSink(s, l.port.Ifindex(), gateway, mode) })
	if err == nil {
		t.Cleanup(sink.Close)
	}
	return sink, err
}

// recordingReceiver passes a port's receiver on and remembers what it saw
// of the kernel's headers.
type recordingReceiver struct {
	frame.HeaderReceiver
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

// gateway opens the port and a TUN device in A and runs the pipeline
// between them until the test ends.
func (l *lab) gateway(t testing.TB, cfg Config, mode GSOMode) {
	t.Helper()
	l.gatewayWith(t, cfg, mode, func(s *Socket) frame.HeaderReceiver { return s.Receiver() })
}

// gatewayWith is gateway with the receivers newRecv makes.
func (l *lab) gatewayWith(t testing.TB, cfg Config, mode GSOMode, newRecv func(*Socket) frame.HeaderReceiver) {
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
		sink, err := l.newSink(t, s, netip.Addr{}, mode)
		if err != nil {
			t.Fatalf("NewSink: %v", err)
		}
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
func newForwarder(t testing.TB, src frame.Source, hdrSize int, sink *Sink) *pipeline.Forwarder {
	t.Helper()
	size := txqueue.Truesize(sink.FrameSize())
	frames := sink.s.Frames()
	burst := frame.BurstSegments * size
	budget, err := txqueue.NewBudget(txqueue.BudgetConfig{Burst: burst, Limit: max(frames*size, burst)})
	if err != nil {
		t.Fatal(err)
	}
	queue, err := txqueue.NewQueue[frame.Frame](txqueue.QueueConfig{Policy: txqueue.Block, Packets: frames + sink.nLarge, Bytes: frames*size + burst})
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
