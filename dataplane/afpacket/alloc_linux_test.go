package afpacket

import (
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// TestAllocs: a batch through the sink (Alloc, Transmit, Complete), to a
// next hop resolved or one being resolved (queued, the oldest dropped),
// and a Receive, busy or idle, allocate nothing.
func TestAllocs(t *testing.T) {
	l := newLab(t, false)
	p := l.open(t, Config{Queues: 1})
	s := p.Sockets()[0]
	sink, err := l.newSink(t, s, netlab.NICB4, GSOModeAuto)
	netlab.Must(t, err)
	dead, err := l.newSink(t, s, netip.MustParseAddr("198.18.100.77"), GSOModeAuto) // on gw-a's subnet, no host
	netlab.Must(t, err)
	gwA, gwB := l.A.LinkT(t, netlab.NICA), l.B.LinkT(t, netlab.NICB)
	// UDP to B's discard port; B answers nothing (its ICMP errors are
	// rate limited, and the receiver below takes only what it sent).
	pkt := udpFrame(gwB.Attrs().HardwareAddr, gwA.Attrs().HardwareAddr,
		netip.AddrPortFrom(netlab.NICA4, 1000), netip.AddrPortFrom(netlab.NICB4, 9), 600)[Headroom:]
	frames := make([]frame.Frame, 32)
	batchTo := func(sink *Sink) {
		n := sink.Alloc(frames)
		for i := range frames[:n] {
			frames[i].Len = copy(frames[i].Buf[Headroom:], pkt)
		}
		for k := 0; k < n; {
			m, err := sink.Transmit(frames[k:n])
			if err != nil {
				t.Fatal(err)
			}
			if k += m; k < n {
				sink.Wait(time.Millisecond)
			}
		}
		sink.Complete()
	}
	batch := func() { batchTo(sink) }
	batch() // resolves the next hop, and sends the batch then
	for b := sink.Backlog(); b != nil; b = sink.Backlog() {
		<-b
		sink.Transmit(nil)
	}
	if a := leastAllocs(100, batch); a != 0 {
		t.Errorf("sink batch: %v allocations", a)
	}
	if st := s.Stats(); st.TX < 100*32 || st.Drops.Total() != 0 {
		t.Errorf("sink stats %+v", st)
	}
	batchTo(dead) // starts the resolution
	if a := leastAllocs(20, func() { batchTo(dead) }); a != 0 {
		t.Errorf("sink batch to a next hop being resolved: %v allocations", a)
	}
	if d := dead.Drops(); d[frame.DropUnresolved] == 0 {
		t.Errorf("drops %v: want frames dropped from the full queue", d)
	}

	r := s.Receiver()
	in := make([][]byte, rxBatch)
	frame := udpFrame(gwA.Attrs().HardwareAddr, gwB.Attrs().HardwareAddr,
		netip.AddrPortFrom(netlab.Srv4, 1000), netip.AddrPortFrom(netlab.App4, 9), 300)
	var fd int
	l.B.Do(t, func() { fd = rawTXSocket(t, gwB.Attrs().Index) })
	busy := func() {
		for range 8 {
			if _, err := unix.Write(fd, frame); err != nil {
				t.Fatal(err)
			}
		}
		for got := 0; got < 8; {
			n, err := r.Receive(in)
			if err != nil || n == 0 {
				t.Fatalf("Receive: %d, %v", n, err)
			}
			got += n
		}
	}
	busy()
	if a := testing.AllocsPerRun(50, busy); a != 0 {
		t.Errorf("Receive with frames: %v allocations", a)
	}
	if a := testing.AllocsPerRun(3, func() { r.Receive(in) }); a != 0 {
		t.Errorf("idle Receive: %v allocations", a)
	}
}

// leastAllocs is testing.AllocsPerRun's count, the least of three tries:
// it counts every goroutine's allocations, and the resolver's goroutine
// may handle a neighbour message during one try (a full run on a busy
// machine saw 2); an allocation of f's own shows in every try.
func leastAllocs(runs int, f func()) float64 {
	least := testing.AllocsPerRun(runs, f)
	for range 2 {
		least = min(least, testing.AllocsPerRun(runs, f))
	}
	return least
}
