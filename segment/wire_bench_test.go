package segment

import (
	"fmt"
	"sync/atomic"
	"testing"
)

// BenchmarkForWire measures ForWire on the packets a wire port sees, side
// by side with Validate of the header it returns (what the forwarder does
// next anyway) and with Split, the work the header leads to: a 64 KiB TCP
// super-packet from a TSO peer (partial checksum: no pass over the
// payload), the same with a complete checksum (one verifying pass), a
// 9000-byte jumbo segment, a 64 KiB UDP datagram for UFO and small
// packets that fit.
func BenchmarkForWire(b *testing.B) {
	const mtu = 1500
	shapes := []struct {
		name string
		spec superSpec
	}{
		{"tcp4-64k-partial", superSpec{proto: tcp, payload: 65535 - 40, needsCsum: true, df: true, seed: 1}},
		{"tcp4-64k-complete", superSpec{proto: tcp, payload: 65535 - 40, df: true, seed: 1}},
		{"tcp6-64k-partial", superSpec{v6: true, proto: tcp, payload: 65535 - 20, needsCsum: true, seed: 2}},
		{"tcp4-9k-complete", superSpec{proto: tcp, payload: 9000 - 52, tcpOpts: tsOpt, df: true, seed: 3}},
		{"udp4-64k-partial", superSpec{proto: udp, payload: 65535 - 28, needsCsum: true, seed: 4}},
		{"tcp4-1500-complete", superSpec{proto: tcp, payload: 1460, df: true, seed: 5}},
		{"udp4-64B-complete", superSpec{proto: udp, payload: 64 - 28, seed: 6}},
		{"udp4-64B-partial", superSpec{proto: udp, payload: 64 - 28, needsCsum: true, seed: 6}},
		{"udp6-64B-complete", superSpec{v6: true, proto: udp, payload: 64 - 48, seed: 7}},
	}
	for _, sh := range shapes {
		pkt := wirePacket(sh.spec)
		h, _, err := ForWire(pkt, mtu, 0)
		if err != nil {
			b.Fatal(err)
		}
		l, err := Validate(pkt, h)
		if err != nil {
			b.Fatal(err)
		}
		bufs := make([][]byte, l.Segments())
		for i := range bufs {
			bufs[i] = make([]byte, l.MaxSegLen())
		}
		sizes := make([]int, len(bufs))
		run := func(what string, f func() error) {
			b.Run(fmt.Sprintf("%s/%s", sh.name, what), func(b *testing.B) {
				b.SetBytes(int64(len(pkt)))
				b.ReportAllocs()
				for b.Loop() {
					if err := f(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		run("ForWire", func() error { _, _, err := ForWire(pkt, mtu, 0); return err })
		run("Validate", func() error { _, err := Validate(pkt, h); return err })
		run("ForWire+Validate+Split", func() error {
			h, _, err := ForWire(pkt, mtu, 0)
			if err != nil {
				return err
			}
			l, err := Validate(pkt, h)
			if err != nil {
				return err
			}
			_, err = std.Split(pkt, l, bufs, sizes, 0)
			return err
		})
	}
}

// BenchmarkMSSTable measures the table's operations: Observe of a packet
// that is not a handshake (every packet pays it), of a SYN (records), MSS
// of a known and of an unknown flow, the same with two goroutines at once
// (one direction records while the other looks up), Clamp, and a sweep of
// a 64K-slot table holding 32K flows (once per Idle/2).
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
	ack := flow4(1).pkt(flagACK, tsOpt, 1448)
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
	syn := flow4(1).syn(8960)
	op("Clamp", func(int) { syn[20+22], syn[20+23] = 0x23, 0x00; Clamp(syn, 1500) })
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
