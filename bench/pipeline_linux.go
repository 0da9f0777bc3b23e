package main

// A forwarder built by hand from the dataplane's exported parts, so that
// the "peers" scenario can swap the source (the TUN reader and the
// segmenter) while keeping the TX path of OpenGateway: the same AF_XDP
// port and XDP program on gw-a, the same XSKSink, budget and queue
// (dataplane.NewAccounting), and a return path from every socket into the
// TUN device.

import (
	"context"
	"errors"
	"github.com/gsoplane/gsoplane/internal/netnsutil"
	"net/netip"
	"sync"

	"github.com/gsoplane/gsoplane/dataplane"
	"github.com/gsoplane/gsoplane/txqueue"
)

// pipelineConfig says what feeds the pipeline and where returning packets
// go.
type pipelineConfig struct {
	source     dataplane.Source
	headerSize int
	batch      int          // packets per Source.Read; 0: the forwarder's default
	closeSrc   func() error // unblocks a Source.Read in progress
	// ret returns the loop that moves packets one socket receives into
	// the TUN device.
	ret func(x *dataplane.XSK) func(context.Context) error
}

type pipeline struct {
	xdp    *dataplane.XDPPort
	sink   *dataplane.XSKSink
	budget *txqueue.Budget
	queue  *txqueue.Queue[dataplane.Frame]
	fwd    *dataplane.Forwarder
	cfg    pipelineConfig

	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
}

// startPipeline opens the AF_XDP port on gw-a in A and runs a forwarder
// from cfg.source to it, and the return loops.
func startPipeline(l *lab, cfg pipelineConfig) (*pipeline, error) {
	p := &pipeline{cfg: cfg}
	err := netnsutil.Run(l.a, func() error {
		var err error
		if p.xdp, err = dataplane.OpenXDP(dataplane.XDPConfig{Ifname: nicA, Redirect: aRoutes}); err != nil {
			return err
		}
		x := p.xdp.Sockets()[0]
		if p.sink, err = dataplane.NewXSKSink(x, p.xdp.Ifindex(), netip.Addr{}); err != nil {
			return err
		}
		if p.budget, p.queue, err = dataplane.NewAccounting(dataplane.GatewayConfig{Backpressure: true}, x); err != nil {
			return err
		}
		p.fwd, err = dataplane.NewForwarder(dataplane.ForwarderConfig{
			Source: cfg.source, HeaderSize: cfg.headerSize, Sink: p.sink, FrameSize: x.FrameSize(),
			Budget: p.budget, Queue: p.queue, Batch: cfg.batch,
		})
		return err
	})
	if err != nil {
		return nil, errors.Join(err, p.close())
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	p.spawn(ctx, p.fwd.Run)
	for _, x := range p.xdp.Sockets() {
		p.spawn(ctx, cfg.ret(x))
	}
	return p, nil
}

func (p *pipeline) spawn(ctx context.Context, run func(context.Context) error) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if err := run(ctx); err != nil && ctx.Err() == nil {
			p.mu.Lock()
			p.errs = append(p.errs, err)
			p.mu.Unlock()
		}
	}()
}

func (p *pipeline) counters(c *counters) {
	st := p.fwd.Stats()
	c.Segments, c.Reads, c.Drops = st.Transmitted, st.SuperPackets, st.Dropped()+p.sink.Unresolved()
	b := p.budget.Stats()
	c.BudgetInFlight, c.BudgetLimit = b.InFlight, b.Limit
}

// extra are the forwarder's whole-run waits.
func (p *pipeline) extra() map[string]float64 {
	return waits(p.fwd.Stats(), p.budget.Stats(), p.queue.Stats())
}

// stop stops the loops (closing the source wakes the forwarder) and
// closes everything.
func (p *pipeline) stop() error {
	p.cancel()
	err := p.cfg.closeSrc()
	p.wg.Wait()
	p.mu.Lock()
	errs := append(p.errs, err)
	p.mu.Unlock()
	return errors.Join(append(errs, p.close())...)
}

func (p *pipeline) close() error {
	if p.queue != nil {
		p.queue.Close()
	}
	if p.sink != nil {
		p.sink.Close()
	}
	if p.xdp != nil {
		return p.xdp.Close()
	}
	return nil
}
