package pipeline

import (
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// flow is one direction of a TCP connection for the MSS table tests.
type flow struct {
	src, dst netip.Addr
	sp, dp   uint16
}

func flow4(i int) flow {
	return flow{src: netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), dst: netip.MustParseAddr("198.19.0.1"), sp: uint16(40000 + i), dp: 443}
}

func flow6(i int) flow {
	a := netip.MustParseAddr("2001:db8::").As16()
	a[14], a[15] = byte(i>>8), byte(i)
	return flow{src: netip.AddrFrom16(a), dst: netip.MustParseAddr("2001:db8:1::1"), sp: uint16(40000 + i), dp: 443}
}

// back is the same connection in the other direction.
func (f flow) back() flow { return flow{src: f.dst, dst: f.src, sp: f.dp, dp: f.sp} }

// pkt builds a TCP packet of the flow with TCP options opts (a multiple
// of 4 bytes) and a partial checksum, as a Linux sender leaves it for the
// device to complete.
func (f flow) pkt(flags header.TCPFlags, opts []byte, payload int) []byte {
	ipLen := header.IPv4MinimumSize
	if f.src.Is6() {
		ipLen = header.IPv6MinimumSize
	}
	p := make([]byte, ipLen+header.TCPMinimumSize+len(opts)+payload)
	src, dst := tcpip.AddrFromSlice(f.src.AsSlice()), tcpip.AddrFromSlice(f.dst.AsSlice())
	if f.src.Is6() {
		header.IPv6(p).Encode(&header.IPv6Fields{PayloadLength: uint16(len(p) - ipLen), TransportProtocol: header.TCPProtocolNumber,
			HopLimit: 64, SrcAddr: src, DstAddr: dst})
	} else {
		ip := header.IPv4(p)
		ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(p)), TTL: 64, Protocol: uint8(header.TCPProtocolNumber), SrcAddr: src, DstAddr: dst})
		ip.SetChecksum(^ip.CalculateChecksum())
	}
	tcp := header.TCP(p[ipLen:])
	tcp.Encode(&header.TCPFields{SrcPort: f.sp, DstPort: f.dp, SeqNum: 1, AckNum: 1,
		DataOffset: uint8(header.TCPMinimumSize + len(opts)), Flags: flags, WindowSize: 65535})
	copy(tcp[header.TCPMinimumSize:], opts)
	tcp.SetChecksum(header.PseudoHeaderChecksum(header.TCPProtocolNumber, src, dst, uint16(len(tcp))))
	return p
}

func (f flow) syn(m uint16) []byte {
	return f.pkt(header.TCPFlagSyn, []byte{2, 4, byte(m >> 8), byte(m)}, 0)
}

func (f flow) dataBack() []byte { return f.back().pkt(header.TCPFlagAck, nil, 1000) }

// tsOpt is a timestamps option with two NOPs in front.
var tsOpt = []byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2}

// TestMSSTable: the MSS a SYN announces limits the data that flows back
// to its sender, less the data packet's options; a retransmitted SYN-ACK
// replaces it; a RST forgets both directions. What a packet announces
// (defaults, odd options, bad checksums) is segment's TestTCPHandshake.
func TestMSSTable(t *testing.T) {
	for _, mk := range []func(int) flow{flow4, flow6} {
		c := mk(1)    // client → server
		s := c.back() // server → client
		tbl := NewMSSTable(MSSConfig{Flows: 1024})
		data := func(f flow, opts []byte) int { return tbl.MSS(f.pkt(header.TCPFlagAck, opts, 3000)) }
		if got := data(c, nil); got != 0 {
			t.Fatalf("%v: unknown flow: MSS %d, want 0", c.src, got)
		}
		tbl.Observe(c.syn(1000))
		if a, b := data(s, nil), data(c, nil); a != 1000 || b != 0 {
			t.Fatalf("%v: after the SYN: server → client %d, client → server %d; want 1000, 0", c.src, a, b)
		}
		tbl.Observe(s.pkt(header.TCPFlagSyn|header.TCPFlagAck, []byte{2, 4, 0x05, 0xb4}, 0))
		if a, b := data(c, nil), data(c, tsOpt); a != 1460 || b != 1460-12 {
			t.Fatalf("%v: after the SYN-ACK: %d, with timestamps %d; want 1460, 1448", c.src, a, b)
		}
		tbl.Observe(s.syn(1200))
		if got := data(c, nil); got != 1200 {
			t.Fatalf("%v: after a second SYN-ACK: %d, want 1200", c.src, got)
		}
		tbl.Observe(c.pkt(header.TCPFlagRst|header.TCPFlagAck, nil, 0))
		if a, b := data(c, nil), data(s, nil); a != 0 || b != 0 {
			t.Fatalf("%v: after a RST: %d, %d; want 0, 0", c.src, a, b)
		}
	}
	tbl := NewMSSTable(MSSConfig{})
	if tbl.Observe(nil); tbl.MSS(nil) != 0 {
		t.Error("MSS of an empty packet")
	}
}

// fakeClock is a clock for tests.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }
func newFakeClock() *fakeClock               { c := &fakeClock{}; c.ns.Store(1e18); return c }
func (tbl *MSSTable) used() (n int)          { return tbl.count(func(w uint64) bool { return w != 0 }) }
func (tbl *MSSTable) count(f func(uint64) bool) (n int) {
	for i := range tbl.slots {
		if f(tbl.slots[i].Load()) {
			n++
		}
	}
	return n
}

func TestMSSTableIdle(t *testing.T) {
	clk := newFakeClock()
	const idle = 10 * time.Minute
	tbl := NewMSSTable(MSSConfig{Flows: 256, Idle: idle, Now: clk.now})
	a, b := flow4(1), flow4(2)
	tbl.Observe(a.syn(1111))
	tbl.Observe(b.syn(1222))
	step := func(d time.Duration, i int) {
		clk.advance(d)
		tbl.Observe(flow4(100 + i).syn(1000)) // a handshake: sweeps if due
	}
	// Sweeps every Idle/2: a flow looked up stays, the other goes after
	// its third sweep without a lookup.
	for i := range 3 {
		if got := tbl.MSS(a.dataBack()); got != 1111 {
			t.Fatalf("sweep %d: active flow: %d, want 1111", i, got)
		}
		if i < 2 && tbl.used() < 2 {
			t.Fatalf("sweep %d: idle flow forgotten too early", i)
		}
		step(idle/2, i)
	}
	if got := tbl.MSS(b.dataBack()); got != 0 {
		t.Fatalf("idle flow after 1.5×Idle: %d, want 0", got)
	}
	if got := tbl.MSS(a.dataBack()); got != 1111 {
		t.Fatalf("active flow: %d, want 1111", got)
	}
	// No sweep before Idle/2 has passed.
	c := flow4(50)
	tbl.Observe(c.syn(1333))
	for i := range 10 {
		step(idle/2/10-time.Second, 10+i)
	}
	if got := tbl.MSS(c.dataBack()); got != 1333 {
		t.Fatalf("flow forgotten without a sweep: %d", got)
	}
	// A clock that goes back does not sweep.
	clk.advance(-time.Hour)
	tbl.Observe(flow4(60).syn(1000))
	if got := tbl.MSS(c.dataBack()); got != 1333 {
		t.Fatalf("clock went back: %d", got)
	}
}

func TestMSSTableCapacity(t *testing.T) {
	clk := newFakeClock()
	tbl := NewMSSTable(MSSConfig{Flows: 60, Now: clk.now})
	if tbl.Flows() != 64 {
		t.Fatalf("%d slots for 60 flows, want 64", tbl.Flows())
	}
	if n := NewMSSTable(MSSConfig{}).Flows(); n != DefaultMSSFlows {
		t.Fatalf("default table: %d slots", n)
	}
	if n := NewMSSTable(MSSConfig{Flows: 1}).Flows(); n != mssWays {
		t.Fatalf("one flow: %d slots", n)
	}
	for i := range 5000 {
		f := flow4(i)
		if i%2 == 1 {
			f = flow6(i)
		}
		tbl.Observe(f.syn(uint16(600 + i%800)))
		// The flow just recorded is always there.
		if got := tbl.MSS(f.dataBack()); got != 600+i%800 {
			t.Fatalf("flow %d just recorded: %d, want %d", i, got, 600+i%800)
		}
		if i%100 == 0 {
			clk.advance(DefaultMSSIdle / 2)
		}
	}
	if n := tbl.used(); n > 64 || n < 32 {
		t.Fatalf("%d slots used of 64", n)
	}
}

// TestMSSTableConcurrent: two forwarders record and look up at once (run
// with -race): every lookup returns 0 or the MSS of its flow.
func TestMSSTableConcurrent(t *testing.T) {
	tbl := NewMSSTable(MSSConfig{Flows: 512, Idle: time.Millisecond})
	const flows = 2000
	syns, data := make([][]byte, flows), make([][]byte, flows)
	for i := range flows {
		f := flow4(i)
		if i%3 == 0 {
			f = flow6(i)
		}
		syns[i], data[i] = f.syn(uint16(1000+i)), f.dataBack()
	}
	rst := flow4(7).pkt(header.TCPFlagRst, nil, 0)
	var wg sync.WaitGroup
	var bad atomic.Int64
	for g := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 20000 {
				i := r.IntN(flows)
				switch {
				case g < 2:
					tbl.Observe(syns[i])
					tbl.Observe(rst)
				default:
					if m := tbl.MSS(data[i]); m != 0 && m != 1000+i {
						bad.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d lookups returned another flow's MSS", bad.Load())
	}
}

func TestMSSTableAllocs(t *testing.T) {
	tbl := NewMSSTable(MSSConfig{Flows: 1024})
	f := flow4(1)
	syn, ack, data, rst := f.syn(1400), f.pkt(header.TCPFlagAck, nil, 0), f.dataBack(), f.pkt(header.TCPFlagRst, nil, 0)
	for name, fn := range map[string]func(){
		"Observe SYN": func() { tbl.Observe(syn) },
		"Observe ACK": func() { tbl.Observe(ack) },
		"Observe RST": func() { tbl.Observe(rst) },
		"MSS":         func() { tbl.MSS(data) },
	} {
		if n := testing.AllocsPerRun(100, fn); n != 0 {
			t.Errorf("%s: %v allocations", name, n)
		}
	}
}

// BenchmarkMSSTable measures the table's operations: Observe of a packet
// that is not a handshake (every packet pays it), of a SYN (records), MSS
// of a known and of an unknown flow, the same with two goroutines at once
// (one direction records while the other looks up), and a sweep of a
// 64K-slot table holding 32K flows (once per Idle/2).
func BenchmarkMSSTable(b *testing.B) {
	tbl := NewMSSTable(MSSConfig{})
	const flows = 1 << 15
	syns, data := make([][]byte, flows), make([][]byte, flows)
	for i := range flows {
		f := flow4(i)
		syns[i], data[i] = f.syn(uint16(1000+i%400)), f.dataBack()
		tbl.Observe(syns[i])
	}
	// A bucket holds 8 flows: a few of the 32K were evicted. Look up those
	// that are there.
	known := make([][]byte, 0, flows)
	for _, d := range data {
		if tbl.MSS(d) != 0 {
			known = append(known, d)
		}
	}
	for len(known) < flows {
		known = append(known, known[:min(len(known), flows-len(known))]...)
	}
	ack := flow4(1).pkt(header.TCPFlagAck, tsOpt, 1448)
	unknown := flow6(1).dataBack()
	op := func(name string, f func(i int)) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				f(i & (flows - 1))
				i++
			}
		})
	}
	op("Observe-ACK", func(int) { tbl.Observe(ack) })
	op("Observe-SYN", func(i int) { tbl.Observe(syns[i]) })
	b.Run("MSS-known-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				tbl.MSS(known[i&(flows-1)])
			}
		})
	})
	op("MSS-known", func(i int) { tbl.MSS(known[i]) })
	op("MSS-unknown", func(int) { tbl.MSS(unknown) })
	b.Run("MSS-known-parallel-with-Observe-SYN", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(1) // GOMAXPROCS goroutines: one records, the others look up
		var id atomic.Int32
		b.RunParallel(func(pb *testing.PB) {
			me := id.Add(1) - 1
			i := 0
			for pb.Next() {
				if me == 0 {
					tbl.Observe(syns[i&(flows-1)])
				} else {
					tbl.MSS(known[i&(flows-1)])
				}
				i++
			}
		})
	})
	b.Run("sweep-64k", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			for i := range tbl.slots { // every used slot young again
				tbl.slots[i].Store(tbl.slots[i].Load() &^ mssAgeMask)
			}
			b.StartTimer()
			tbl.sweep()
		}
	})
}
