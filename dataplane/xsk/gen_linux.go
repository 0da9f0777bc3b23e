package xsk

// A traffic generator on an AF_XDP socket, pktgen's role in userspace:
// prebuilt frames are copied into the UMEM once, and each Send puts a
// batch of them on the TX ring with at most one wake-up of the kernel,
// so that sending costs no system call per packet. The socket has no XDP
// program and receives nothing.

import (
	"errors"
	"fmt"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/internal/port"
)

// Generator sends prebuilt frames from an AF_XDP socket as fast as the
// kernel takes them. Open it with OpenGenerator; Send and Wait run on one
// goroutine at a time, Stats and Close on any, at any time.
type Generator struct {
	x      *Socket
	frames []int    // length of the frame each TX frame holds, by TX frame index
	addrs  []uint64 // one batch
	lens   []int
}

// OpenGenerator opens an AF_XDP socket on cfg.Queue of cfg.Ifname, with
// no XDP program, and copies cfg.Frames into its TX frames. Call it in
// the interface's network namespace; it needs CAP_NET_ADMIN and
// CAP_NET_RAW. Close it when done.
func OpenGenerator(cfg GeneratorConfig) (*Generator, error) {
	xcfg, err := Config{
		Ifname: cfg.Ifname, Queues: []int{cfg.Queue}, ZeroCopy: cfg.ZeroCopy, MultiBuffer: MultiBufferOff, DisableTXChecksum: true,
		FrameSize: cfg.FrameSize, NumFrames: cfg.NumFrames, RingSize: cfg.RingSize,
	}.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := checkGenerator(cfg, xcfg); err != nil {
		return nil, err
	}
	link, err := port.Interface("xsk: generator", cfg.Ifname)
	if err != nil {
		return nil, err
	}
	if _, err := xdpQueues(link, xcfg.Queues); err != nil {
		return nil, err
	}
	x, err := newXSK(cfg.Ifname, link.Attrs().Index, cfg.Queue, xcfg, false)
	if err != nil {
		return nil, err
	}
	batch := cfg.Batch
	if batch == 0 {
		batch = min(x.TxBudget(), xcfg.RingSize)
	}
	g := &Generator{x: x, addrs: make([]uint64, batch), lens: make([]int, batch)}
	if err := g.load(cfg.Frames); err != nil {
		return nil, errors.Join(err, x.close())
	}
	return g, nil
}

// checkGenerator checks what Config.withDefaults does not.
func checkGenerator(cfg GeneratorConfig, xcfg Config) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("xsk: generator: %w: %s", frame.ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	if len(cfg.Frames) == 0 {
		return bad("no frames")
	}
	for i, f := range cfg.Frames {
		if len(f) < ethHdrLen || len(f) > xcfg.FrameSize {
			return bad("frame %d is %d bytes: want %d..%d", i, len(f), ethHdrLen, xcfg.FrameSize)
		}
	}
	if cfg.Batch < 0 || cfg.Batch > xcfg.RingSize {
		return bad("batch %d: want 1..%d (the ring size), or 0", cfg.Batch, xcfg.RingSize)
	}
	return nil
}

// load copies the frames into every TX frame of the UMEM, in turn.
func (g *Generator) load(frames [][]byte) error {
	x := g.x
	all := make([]uint64, x.txFreeCount())
	n := x.alloc(all)
	g.frames = make([]int, n)
	for _, a := range all[:n] {
		i := int(a>>x.frameShift) - int(x.rxFrames)
		buf := x.frame(a)
		if buf == nil {
			return ErrClosed
		}
		g.frames[i] = copy(buf, frames[i%len(frames)])
	}
	x.free(all[:n])
	return nil
}

// Send reclaims the frames the kernel has sent and puts up to a batch of
// frames on the TX ring, waking the kernel once if it asks to be woken
// (in copy mode it transmits them during that call). It returns how many
// it put on the ring: 0 when every TX frame is still in flight (Wait for
// completions). A wake-up the kernel refuses with EAGAIN, EBUSY,
// ENOBUFS, EINTR or ENETDOWN is counted (Stats.KickRetries) and retried
// by the next Send; other errors are returned. After Close it returns
// ErrClosed.
func (g *Generator) Send() (int, error) {
	x := g.x
	x.complete()
	n := x.alloc(g.addrs)
	for i, a := range g.addrs[:n] {
		g.lens[i] = g.frames[int(a>>x.frameShift)-int(x.rxFrames)]
	}
	k, err := x.transmit(g.addrs[:n], g.lens[:n], nil, false)
	if k < n {
		x.free(g.addrs[k:n])
	}
	return k, err
}

// Wait waits up to d until the kernel has sent frames (Send then has
// free ones again). It returns ErrClosed once the generator is closed.
func (g *Generator) Wait(d time.Duration) error { return g.x.waitCompletions(d) }

// Stats returns the socket's counters: TX counts the frames put on the
// TX ring, Completed those the kernel has sent.
func (g *Generator) Stats() Stats { return g.x.Stats() }

// Close closes the socket; idempotent. A Wait in progress returns, and
// Send and Wait return ErrClosed from then on.
func (g *Generator) Close() error {
	if err := g.x.close(); err != nil {
		return fmt.Errorf("xsk: close generator: %w", err)
	}
	return nil
}
