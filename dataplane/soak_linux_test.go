package dataplane

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// soakEnv names the soak's duration; without it TestSoak skips. make
// soak sets it.
const soakEnv = "GSOPLANE_SOAK"

// Bounds the soak holds the gateway to, after a warm-up: the process's
// RSS and Go heap may not grow by more than these, nor the goroutines.
const (
	soakRSSGrowth  = 64 << 20
	soakHeapGrowth = 32 << 20
	soakGoroutines = 8
)

// TestSoak runs the gateway for GSOPLANE_SOAK (e.g. 10m) under TCP
// streams both ways, a UDP flood, link flaps every 20 s, neighbour
// churn (datagrams to thousands of addresses on the NIC's link that never
// answer) and an application that stops reading for 5 s every 20 s
// (soakStalled), sampling RSS, heap and goroutines every 10 s; every
// 30 s it stops the gateway cleanly and opens a new one (restart), which
// must leave nothing behind. It fails if the footprint grows beyond the
// bounds above, a restart leaves something, or the gateway stops.
func TestSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv(soakEnv))
	if err != nil || d <= 0 {
		t.Skipf("a soak: set %s=10m (make soak)", soakEnv)
	}
	cfg := GatewayConfig{}
	fds := ownObjects(t)
	lab := newGwLab(t, cfg)
	stop := make(chan struct{})
	var stalls soakStalls
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }() // no load left when the leak check runs
	for _, load := range []func(){
		func() { soakTCP(lab, false, stop) }, func() { soakTCP(lab, true, stop) },
		func() { soakUDP(lab, stop) }, func() { soakFlaps(lab, stop) }, func() { soakChurn(lab, stop) },
		func() { soakStalled(lab, &stalls, stop) }, func() { soakMACChange(lab, stop) },
	} {
		wg.Add(1)
		go func() { defer wg.Done(); load() }()
	}

	var base soakSample
	end := time.Now().Add(d)
	for i := 0; time.Now().Before(end); i++ {
		time.Sleep(10 * time.Second)
		select {
		case err := <-lab.done:
			t.Fatalf("the gateway stopped: %v", err)
		default:
		}
		s := sample()
		st := lab.g.Stats()
		t.Logf("%v: %s; NIC downs %d, MAC changes %d; forward %d segments, drops %v; return %d packets, drops %v",
			time.Since(end.Add(-d)).Round(time.Second), s, st.NIC.Downs, st.NIC.MACChanges, st.Forward.Segments, st.Forward.Drops, st.Return.Packets, st.Return.Drops)
		switch {
		case i == 2: // after 30 s of warm-up
			base = s
		case i > 2:
			if err := s.grewFrom(base); err != nil {
				t.Fatalf("%v (base %s)", err, base)
			}
		}
		if i%3 == 1 { // after the samples at 20 s, 50 s, ...: one before the base, the others after it
			lab.restart(t, cfg, fds)
		}
	}
	t.Log(&stalls)
}

// soakSample is the process's footprint at one moment.
type soakSample struct {
	rss, heap  uint64
	goroutines int
}

func sample() soakSample {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return soakSample{rss: rss(), heap: m.HeapInuse, goroutines: runtime.NumGoroutine()}
}

func (s soakSample) String() string {
	return fmt.Sprintf("RSS %d MiB, heap %d MiB, %d goroutines", s.rss>>20, s.heap>>20, s.goroutines)
}

// grewFrom says how s exceeds the bounds over base.
func (s soakSample) grewFrom(base soakSample) error {
	switch {
	case s.rss > base.rss+soakRSSGrowth:
		return fmt.Errorf("RSS grew to %d MiB", s.rss>>20)
	case s.heap > base.heap+soakHeapGrowth:
		return fmt.Errorf("heap grew to %d MiB", s.heap>>20)
	case s.goroutines > base.goroutines+soakGoroutines:
		return fmt.Errorf("%d goroutines", s.goroutines)
	}
	return nil
}

// rss reads the process's resident set from /proc/self/status.
func rss() uint64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// soakTCP moves TCP streams of 64 MiB, one after the other, until stop.
func soakTCP(lab *gwLab, toA bool, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		tcpTransferQuiet(lab, toA, stop)
	}
}

// tcpTransferQuiet sends 64 MiB over TCP A→B or B→A, ignoring errors
// (a link flap may reset a connection; the soak is about footprint). It
// returns with its sockets closed, at once when stop closes.
func tcpTransferQuiet(lab *gwLab, toA bool, stop <-chan struct{}) {
	var socks closers
	defer socks.closeAll()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-stop:
			socks.closeAll()
		case <-done:
		}
	}()
	srv, cli, addr := lab.B, lab.A, netip.AddrPortFrom(labSrv4, 5301)
	if toA {
		srv, cli, addr = lab.A, lab.B, netip.AddrPortFrom(netlab.App4, 5302)
	}
	var ln net.Listener
	if srv.Run(func() (err error) { ln, err = net.Listen("tcp", addr.String()); return err }) != nil {
		return
	}
	socks.add(ln)
	read := make(chan struct{})
	go func() {
		defer close(read)
		if c, err := ln.Accept(); err == nil {
			socks.add(c)
			c.SetDeadline(time.Now().Add(time.Minute))
			io.Copy(io.Discard, c)
		}
	}()
	defer func() { socks.closeAll(); <-read }()
	var c net.Conn
	if cli.Run(func() (err error) { c, err = net.DialTimeout("tcp", addr.String(), 5*time.Second); return err }) != nil {
		return
	}
	socks.add(c)
	c.SetDeadline(time.Now().Add(time.Minute))
	buf := make([]byte, 1<<20)
	for range 64 {
		if _, err := c.Write(buf); err != nil {
			break
		}
	}
	c.(*net.TCPConn).CloseWrite()
	<-read
}

// closers closes what was added to it, once, from any goroutine.
type closers struct {
	mu     sync.Mutex
	cs     []io.Closer
	closed bool
}

func (c *closers) add(x io.Closer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		x.Close()
		return
	}
	c.cs = append(c.cs, x)
}

func (c *closers) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, x := range c.cs {
		x.Close()
	}
	c.cs = nil
}

// soakUDP floods UDP datagrams of random sizes from A to B until stop.
func soakUDP(lab *gwLab, stop <-chan struct{}) {
	var c net.Conn
	if lab.A.Run(func() (err error) { c, err = net.Dial("udp", netip.AddrPortFrom(labSrv4, 9).String()); return err }) != nil {
		return
	}
	defer c.Close()
	buf := make([]byte, 1400)
	for {
		select {
		case <-stop:
			return
		default:
		}
		c.Write(buf[:1+rand.IntN(len(buf))])
	}
}

// soakFlaps takes the NIC down for a second every 20 s.
func soakFlaps(lab *gwLab, stop <-chan struct{}) {
	every(20*time.Second, stop, func() {
		nic, err := lab.A.Link(netlab.NICA)
		if err != nil {
			return
		}
		lab.A.Netlink().LinkSetDown(nic)
		time.Sleep(time.Second)
		lab.A.Netlink().LinkSetUp(nic)
	})
}

// soakChurn sends datagrams from A to ever new addresses of
// 198.19.128.0/17, which A routes into the TUN and the gateway takes to
// be on the NIC's link, where no host answers: each needs a neighbour
// that never resolves.
func soakChurn(lab *gwLab, stop <-chan struct{}) {
	if lab.A.AddRoute(soakChurnPrefix, labTUN, "") != nil {
		return
	}
	var c *net.UDPConn
	if lab.A.Run(func() (err error) { c, err = net.ListenUDP("udp", nil); return err }) != nil {
		return
	}
	defer c.Close()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		n := 1 + i%32000
		dst := netip.AddrFrom4([4]byte{198, 19, 128 + byte(n>>8), byte(n)})
		c.WriteToUDPAddrPort([]byte("churn"), netip.AddrPortFrom(dst, 9))
		time.Sleep(time.Millisecond)
	}
}
