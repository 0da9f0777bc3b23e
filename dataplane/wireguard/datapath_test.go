package wireguard

import (
	"sync"
	"testing"
)

// batch returns n buffers for Seal to p, inner packets of different
// sizes, with room for padding and tag.
func batch(p *Peer, n int) []Packet {
	pkts := make([]Packet, n)
	for i := range pkts {
		pkts[i] = Packet{Buf: datagram(ipv4(20+i*23%1400, byte(i))), Peer: p}
	}
	return pkts
}

// TestDataPathAllocs: Seal and Open of a batch allocate nothing.
func TestDataPathAllocs(t *testing.T) {
	s := newPair(t, Key{}, nil)
	s.handshake(t)
	openOne(s.b, sealOne(t, s.a, s.pa, nil), addrA)
	pkts := batch(s.pa, 64)
	lens := make([]int, len(pkts))
	for i := range pkts {
		lens[i] = len(pkts[i].Buf)
	}
	allocs := testing.AllocsPerRun(100, func() {
		for i := range pkts {
			pkts[i].Buf = pkts[i].Buf[:lens[i]]
			pkts[i].Peer = s.pa
		}
		s.a.Seal(pkts)
		for i := range pkts {
			pkts[i].Addr = addrA
		}
		s.b.Open(pkts)
		for i := range pkts {
			if pkts[i].Reason != OK || pkts[i].Peer != s.pb {
				t.Fatalf("packet %d: %v", i, pkts[i].Reason)
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per batch of %d", allocs, len(pkts))
	}
}

// TestConcurrentSealOpen: several goroutines seal to one peer and
// several open what they sealed, in batches that mix the current and a
// replayed message: every message opens exactly once.
func TestConcurrentSealOpen(t *testing.T) {
	s := newPair(t, Key{}, nil)
	s.handshake(t)
	openOne(s.b, sealOne(t, s.a, s.pa, nil), addrA)
	const workers, batches, size = 4, 50, 16
	sealed := make(chan []Packet, workers*batches)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range batches {
				pkts := batch(s.pa, size)
				s.a.Seal(pkts)
				sealed <- pkts
			}
		})
	}
	var mu sync.Mutex
	counts := map[uint64]int{}
	var readers sync.WaitGroup
	for range workers {
		readers.Go(func() {
			for pkts := range sealed {
				// Each message twice: the copy is refused as a replay.
				double := make([]Packet, 0, 2*len(pkts))
				for _, p := range pkts {
					double = append(double, Packet{Buf: p.Buf, Addr: addrA}, Packet{Buf: append([]byte(nil), p.Buf...), Addr: addrA})
				}
				counters := make([]uint64, len(double))
				for i, p := range double {
					counters[i] = uint64(p.Buf[offCounter]) | uint64(p.Buf[offCounter+1])<<8
				}
				s.b.Open(double)
				mu.Lock()
				for i, p := range double {
					switch p.Reason {
					case OK:
						counts[counters[i]]++
					case Replay:
					default:
						t.Errorf("open: %v", p.Reason)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(sealed)
	readers.Wait()
	if len(counts) != workers*batches*size {
		t.Fatalf("%d messages opened, want %d", len(counts), workers*batches*size)
	}
	for c, n := range counts {
		if n != 1 {
			t.Fatalf("counter %d opened %d times", c, n)
		}
	}
}

// BenchmarkSealOpen seals and opens batches of 64 packets of 1,420 bytes.
func BenchmarkSealOpen(b *testing.B) {
	s := newPair(b, Key{}, nil)
	s.handshake(b)
	openOne(s.b, sealOne(b, s.a, s.pa, nil), addrA)
	pkts := make([]Packet, 64)
	for i := range pkts {
		pkts[i] = Packet{Buf: datagram(ipv4(1420, byte(i))), Peer: s.pa}
	}
	b.SetBytes(int64(len(pkts) * 1420))
	b.ReportAllocs()
	for b.Loop() {
		for i := range pkts {
			pkts[i].Buf, pkts[i].Peer = pkts[i].Buf[:HeaderLen+1420], s.pa
		}
		s.a.Seal(pkts)
		s.b.Open(pkts)
	}
}
