package xsk

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

func TestBusyPollConfig(t *testing.T) {
	for _, cfg := range []Config{
		{Ifname: "x", BusyPoll: -time.Microsecond},
		{Ifname: "x", BusyPoll: 500 * time.Nanosecond},
		{Ifname: "x", BusyPoll: MaxBusyPoll + time.Microsecond},
		{Ifname: "x", BusyPoll: 50 * time.Microsecond, BusyPollBudget: -1},
		{Ifname: "x", BusyPoll: 50 * time.Microsecond, BusyPollBudget: MaxBusyPollBudget + 1},
		{Ifname: "x", BusyPollBudget: 16}, // without BusyPoll
	} {
		if _, err := Open(cfg); !errors.Is(err, frame.ErrInvalidConfig) {
			t.Errorf("Open(BusyPoll %v, budget %d) = %v, want frame.ErrInvalidConfig", cfg.BusyPoll, cfg.BusyPollBudget, err)
		}
	}
	for _, c := range []struct {
		in, want         time.Duration
		budget, wantBudg int
	}{
		{0, 0, 0, 0},
		{time.Microsecond, time.Microsecond, 0, DefaultBusyPollBudget},
		{50500 * time.Nanosecond, 50 * time.Microsecond, 8, 8},
		{MaxBusyPoll, MaxBusyPoll, MaxBusyPollBudget, MaxBusyPollBudget},
	} {
		got, err := Config{Ifname: "x", BusyPoll: c.in, BusyPollBudget: c.budget}.withDefaults()
		if err != nil || got.BusyPoll != c.want || got.BusyPollBudget != c.wantBudg {
			t.Errorf("BusyPoll %v budget %d: got %v budget %d (%v), want %v budget %d",
				c.in, c.budget, got.BusyPoll, got.BusyPollBudget, err, c.want, c.wantBudg)
		}
	}
}

// sockoptInt reads a SOL_SOCKET option of x's socket.
func sockoptInt(t *testing.T, x *Socket, opt int) (int, error) {
	t.Helper()
	if !x.enter() {
		t.Fatal("socket closed")
	}
	defer x.mu.RUnlock()
	return unix.GetsockoptInt(x.fd, unix.SOL_SOCKET, opt)
}

// TestBusyPollSockopts: the options are set on every socket and read
// back from the kernel; without BusyPoll they stay off.
func TestBusyPollSockopts(t *testing.T) {
	n := newXDPNet(t)
	cfg := xdpTestConfig()
	cfg.BusyPoll, cfg.BusyPollBudget = 50*time.Microsecond+999*time.Nanosecond, 32
	p := n.open(t, cfg)
	for _, x := range p.Sockets() {
		usec, err1 := sockoptInt(t, x, unix.SO_BUSY_POLL)
		prefer, err2 := sockoptInt(t, x, unix.SO_PREFER_BUSY_POLL)
		if usec != 50 || prefer != 1 || err1 != nil || err2 != nil || x.BusyPoll() != 50*time.Microsecond {
			t.Errorf("queue %d: SO_BUSY_POLL %d (%v), SO_PREFER_BUSY_POLL %d (%v), BusyPoll() %v; want 50, 1, 50µs",
				x.queueID, usec, err1, prefer, err2, x.BusyPoll())
		}
		// Linux 6.18 has no getsockopt for the budget; check it if one comes.
		if budget, err := sockoptInt(t, x, unix.SO_BUSY_POLL_BUDGET); err == nil && budget != 32 {
			t.Errorf("queue %d: SO_BUSY_POLL_BUDGET %d, want 32", x.queueID, budget)
		} else if err != nil && !errors.Is(err, unix.ENOPROTOOPT) {
			t.Errorf("queue %d: getsockopt SO_BUSY_POLL_BUDGET: %v", x.queueID, err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = n.open(t, xdpTestConfig())
	for _, x := range p.Sockets() {
		usec, err1 := sockoptInt(t, x, unix.SO_BUSY_POLL)
		prefer, err2 := sockoptInt(t, x, unix.SO_PREFER_BUSY_POLL)
		if usec != 0 || prefer != 0 || err1 != nil || err2 != nil || x.BusyPoll() != 0 {
			t.Errorf("queue %d without busy poll: SO_BUSY_POLL %d (%v), SO_PREFER_BUSY_POLL %d (%v)", x.queueID, usec, err1, prefer, err2)
		}
	}
}

// TestBusyPollRefused: a kernel refusing an option makes Open fail with
// ErrNoBusyPoll and leaves nothing behind.
func TestBusyPollRefused(t *testing.T) {
	n := newXDPNet(t)
	saved := soPreferBusyPoll
	soPreferBusyPoll = 0x7fff // no such option: ENOPROTOOPT, as from a kernel without it
	t.Cleanup(func() { soPreferBusyPoll = saved })
	cfg := xdpTestConfig()
	cfg.BusyPoll = 20 * time.Microsecond
	p, err := n.tryOpen(t, cfg)
	if err == nil {
		p.Close()
		t.Fatal("Open succeeded with a refused busy-poll option")
	}
	if !errors.Is(err, ErrNoBusyPoll) || !errors.Is(err, unix.ENOPROTOOPT) {
		t.Errorf("Open: %v, want ErrNoBusyPoll wrapping ENOPROTOOPT", err)
	}
	t.Logf("Open: %v", err)
	if attached, _ := n.xdpAttached(t); attached {
		t.Error("an XDP program was left on veth-a")
	}
	soPreferBusyPoll = saved
	n.open(t, cfg) // the queues are free again
}

// TestBusyPollTraffic: with busy polling, UDP from the peer reaches the
// sockets through Receiver (whose waits poll, and which StopReceive
// still ends) and frames sent complete through waitCompletions (which
// polls); in native mode the sockets learn the veth's NAPI context, in
// generic mode there is none. The waits do not allocate.
func TestBusyPollTraffic(t *testing.T) {
	for _, c := range []struct {
		mode Mode
		gro  bool
	}{{ModeNative, false}, {ModeNative, true}, {ModeGeneric, false}} {
		mode := c.mode
		t.Run(fmt.Sprintf("%v/gro=%v", mode, c.gro), func(t *testing.T) {
			n := newXDPNet(t)
			netlab.Must(t, n.gw.SetFeatures(xdpIfA, map[string]bool{"gro": c.gro}))
			for file, v := range map[string]string{"napi_defer_hard_irqs": "2", "gro_flush_timeout": "200000"} {
				if err := n.gw.WriteSysfs("/sys/class/net/"+xdpIfA+"/"+file, v); err != nil {
					t.Fatalf("%s: %v", file, err)
				}
			}
			cfg := xdpTestConfig()
			cfg.Mode, cfg.BusyPoll = mode, 50*time.Microsecond
			p := n.open(t, cfg)
			n.echo(t)
			busyPollTransmit(t, n, p)
			busyPollReceive(t, n, p)
			for _, x := range p.Sockets() {
				id, err := x.NAPIID()
				s := x.Stats()
				t.Logf("%v queue %d: NAPI ID %d, %d busy polls, %d kicks, %d received, %d sent", p.Mode(), x.queueID, id, s.BusyPolls, s.Kicks, s.RX, s.TX)
				switch {
				case err != nil:
					t.Errorf("NAPIID: %v", err)
				case s.BusyPolls == 0:
					t.Errorf("queue %d: no busy polls", x.queueID)
				case p.Mode() == ModeGeneric && id != 0:
					t.Errorf("queue %d: NAPI ID %d in generic mode", x.queueID, id)
				case p.Mode() == ModeNative && s.RX > 0 && id == 0:
					// Linux 6.18: a veth's native XDP gives AF_XDP
					// sockets no NAPI ID, so nothing is polled.
					t.Logf("queue %d: no NAPI ID after %d packets in native mode (veth)", x.queueID, s.RX)
				}
			}
			x := p.Sockets()[0]
			waitAllocs := testing.AllocsPerRun(50, func() {
				x.busyPollRX()
				x.busyPollTX(10 * time.Microsecond)
				x.waitCompletions(20 * time.Microsecond)
			})
			if waitAllocs != 0 {
				t.Errorf("busy-poll waits: %v allocations per call", waitAllocs)
			}
		})
	}
}

// busyPollReceive sends UDP from the peer to many destinations and
// receives it through each socket's Receiver, one goroutine per socket,
// until StopReceive.
func busyPollReceive(t *testing.T, n *xdpNet, p *Port) {
	const flows, perFlow = 8, 200
	var conns []*net.UDPConn
	for f := range flows {
		dst := netip.MustParseAddr(fmt.Sprintf("198.18.200.%d", f+1))
		conns = append(conns, xdpDialUDP(t, n.peer, netip.AddrPortFrom(dst, uint16(xdpUDPPort+f))))
	}
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
		bad  []string
		got  atomic.Int64
		wg   sync.WaitGroup
	)
	for _, x := range p.Sockets() {
		wg.Go(func() {
			r := x.Receiver()
			frames := make([][]byte, 64)
			for {
				k, err := r.Receive(frames)
				if err != nil || k == 0 { // stopped (or closed)
					return
				}
				mu.Lock()
				for _, f := range frames[:k] {
					_, payload, ok := xdpParseUDP(f[rxFront:])
					if !ok || seen[string(payload)] {
						bad = append(bad, fmt.Sprintf("%q", payload))
					}
					seen[string(payload)] = true
				}
				mu.Unlock()
				got.Add(int64(k))
			}
		})
	}
	deadline := time.Now().Add(xdpWait)
	for seq := range perFlow {
		for f, c := range conns {
			if _, err := c.Write(fmt.Appendf(nil, "xsk flow %d seq %d", f, seq)); err != nil {
				t.Fatalf("send: %v", err)
			}
		}
		for int64((seq+1)*flows)-got.Load() > xdpRing/2 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Microsecond)
		}
	}
	for got.Load() < flows*perFlow && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	stopped := time.Now()
	p.StopReceive()
	wg.Wait()
	if d := time.Since(stopped); d > time.Second {
		t.Errorf("the receivers took %v to return after StopReceive", d)
	}
	if len(seen) != flows*perFlow || len(bad) > 0 {
		t.Fatalf("received %d distinct datagrams, want %d; bad or repeated: %v", len(seen), flows*perFlow, bad)
	}
}

// busyPollTransmit sends frames to a UDP socket of the peer from each
// socket and waits for their completions through waitCompletions only.
func busyPollTransmit(t *testing.T, n *xdpNet, p *Port) {
	dst := netip.MustParseAddrPort(xdpPeer4 + ":9100")
	xdpListenUDP(t, n.peer, dst)
	src := netip.MustParseAddrPort(xdpGW4 + ":9200")
	addrs, lens := make([]uint64, 64), make([]int, 64)
	for _, x := range p.Sockets() {
		const total = 2000
		sent := 0
		deadline := time.Now().Add(xdpWait)
		for sent < total && time.Now().Before(deadline) {
			k := x.alloc(addrs[:min(len(addrs), total-sent)])
			for i := range k {
				lens[i] = xdpPutUDPFrame(x.frame(addrs[i]), n.macB, n.macA, src, dst, []byte("busy poll"))
			}
			m, err := x.transmit(addrs[:k], lens[:k], nil, false)
			if err != nil {
				t.Fatalf("transmit: %v", err)
			}
			x.free(addrs[m:k])
			sent += m
			if err := x.waitCompletions(time.Millisecond); err != nil {
				t.Fatalf("waitCompletions: %v", err)
			}
			x.complete()
		}
		for x.Stats().Completed < uint64(sent) && time.Now().Before(deadline) {
			if err := x.waitCompletions(time.Millisecond); err != nil {
				t.Fatalf("waitCompletions: %v", err)
			}
			x.complete()
		}
		if s := x.Stats(); sent != total || s.Completed != s.TX || s.KickErrors != 0 {
			t.Fatalf("queue %d: sent %d of %d, %+v", x.queueID, sent, total, s)
		}
	}
}

// TestBusyPollWake: an idle wait polls for its whole time, no longer,
// and waiters in busy-polling waits return at once on Close.
func TestBusyPollWake(t *testing.T) {
	n := newXDPNet(t)
	cfg := xdpTestConfig()
	cfg.BusyPoll = MaxBusyPoll
	p, err := n.tryOpen(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	x := p.Sockets()[0]
	start := time.Now()
	x.busyPollTX(x.BusyPoll())
	if d := time.Since(start); d < x.BusyPoll() || d > 100*x.BusyPoll() {
		t.Errorf("an idle busy poll of %v took %v", x.BusyPoll(), d)
	}
	done := make(chan error, 4*len(p.Sockets()))
	for _, x := range p.Sockets() {
		r := x.Receiver()
		go func() { _, err := r.Receive(make([][]byte, 8)); done <- err }()
		go func() { done <- x.waitCompletions(time.Hour) }()
		go func() { x.busyPollRX(); done <- x.waitRX() }()
		go func() { x.busyPollTX(time.Hour); done <- x.waitCompletions(time.Hour) }()
	}
	time.Sleep(20 * time.Millisecond)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(time.Second)
	for range cap(done) {
		select {
		case err := <-done:
			if !errors.Is(err, ErrClosed) {
				t.Errorf("a wait returned %v after Close, want ErrClosed", err)
			}
		case <-timeout:
			t.Fatal("a busy-polling wait did not return after Close")
		}
	}
}
