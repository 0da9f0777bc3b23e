package vpn

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/gsoplane/gsoplane/dataplane/udp"
)

// The replay window takes each counter once, in any order within the
// window, and refuses what is below it.
func TestWindow(t *testing.T) {
	var w window
	take := func(ctr uint64) bool {
		if !w.fresh(ctr) {
			return false
		}
		w.mark(ctr)
		return true
	}
	steps := []struct {
		ctr  uint64
		want bool
	}{
		{0, true}, {0, false}, {1, true}, {3, true}, {2, true}, {3, false},
		{63, true}, {64, true}, {65, true}, {64, false},
		{5000, true}, {5000 - 1900, true}, {5000 - 1900, false}, {5000 - 2048, false}, {3, false},
		{4999, true}, {10000, true}, {4999, false}, {10001, true},
		{1 << 40, true}, {1<<40 - 1, true}, {1<<40 - 3000, false}, {1<<40 + 64*40, true}, {1 << 40, false},
		{maxCounter, false}, {1<<64 - 1, false},
	}
	for i, s := range steps {
		if got := take(s.ctr); got != s.want {
			t.Errorf("step %d: counter %d taken %v, want %v", i, s.ctr, got, s.want)
		}
	}
}

// Every counter within the window is refused once seen, whatever the
// word boundaries, after the window moved by any amount.
func TestWindowProperty(t *testing.T) {
	var w window
	seen := map[uint64]bool{}
	ctr := uint64(0)
	for i := range 20000 {
		ctr += uint64(i*7919) % 300 // jumps from 0 to 299
		probe := ctr - uint64(i*104729)%1900
		if probe > ctr {
			probe = 0
		}
		for _, c := range []uint64{ctr, probe} {
			if w.fresh(c) == seen[c] && w.top-c <= windowBits-64 {
				t.Fatalf("counter %d (top %d): fresh %v, seen %v", c, w.top, w.fresh(c), seen[c])
			}
			if w.fresh(c) {
				w.mark(c)
				seen[c] = true
			}
		}
	}
}

// A batch sealed by one end opens at the other; a flipped bit, a replay
// and a datagram that is not a data message are dropped for their reason;
// neither direction allocates.
func TestSealOpen(t *testing.T) {
	psk := bytes.Repeat([]byte{7}, keyLen)
	a, b := netip.MustParseAddrPort("198.18.100.1:51820"), netip.MustParseAddrPort("198.18.100.2:51820")
	sa, _, err := newCiphers(psk, a, b)
	if err != nil {
		t.Fatal(err)
	}
	_, ob, err := newCiphers(psk, b, a)
	if err != nil {
		t.Fatal(err)
	}
	const n, size = 8, 1400
	bufs := make([][]byte, n)
	dgrams := make([][]byte, n)
	verdicts := make([]udp.Verdict, n)
	fill := func() {
		for i := range bufs {
			if bufs[i] == nil {
				bufs[i] = make([]byte, headerLen+size+tagLen)
			}
			for j := range size {
				bufs[i][headerLen+j] = byte(i + j)
			}
			dgrams[i] = bufs[i]
			verdicts[i] = udp.Accept
		}
	}
	peers := make([]int, n) // one peer
	fill()
	sa.seal(dgrams, peers)
	replay := bytes.Clone(dgrams[3])
	dgrams[1][headerLen+100] ^= 1                    // a flipped bit: bad tag
	binary.LittleEndian.PutUint32(dgrams[2], 1)      // not a data message
	binary.LittleEndian.PutUint64(dgrams[5][8:], 99) // a forged counter: bad tag
	ob.open(dgrams, peers, verdicts)
	want := []udp.Verdict{udp.Accept, udp.DropAuth, udp.DropMalformed, udp.Accept, udp.Accept, udp.DropAuth, udp.Accept, udp.Accept}
	for i := range n {
		if verdicts[i] != want[i] {
			t.Errorf("datagram %d: verdict %d, want %d", i, verdicts[i], want[i])
		}
		if want[i] == udp.Accept && (dgrams[i][headerLen] != byte(i) || dgrams[i][headerLen+size-1] != byte(i+size-1)) {
			t.Errorf("datagram %d: not decrypted", i)
		}
	}
	v := []udp.Verdict{udp.Accept}
	ob.open([][]byte{replay}, peers[:1], v)
	if v[0] != udp.DropReplay {
		t.Errorf("a replayed datagram: verdict %d, want DropReplay", v[0])
	}

	allocs := testing.AllocsPerRun(100, func() {
		fill()
		sa.seal(dgrams, peers)
		ob.open(dgrams, peers, verdicts)
	})
	if allocs != 0 {
		t.Errorf("seal and open: %.1f allocations per batch, want 0", allocs)
	}
	for i, v := range verdicts {
		if v != udp.Accept {
			t.Errorf("after the rounds, datagram %d: verdict %d", i, v)
		}
	}
}

// Past the last counter nothing is sealed, and nothing of the packet
// leaves.
func TestSealExhausted(t *testing.T) {
	s, _, err := newCiphers(bytes.Repeat([]byte{7}, keyLen), netip.MustParseAddrPort("1.1.1.1:1"), netip.MustParseAddrPort("2.2.2.2:2"))
	if err != nil {
		t.Fatal(err)
	}
	s.counter.Store(maxCounter - 1)
	d := [][]byte{bytes.Repeat([]byte{0xaa}, headerLen+100+tagLen), bytes.Repeat([]byte{0xaa}, headerLen+100+tagLen)}
	s.seal(d, []int{0, 0})
	if binary.LittleEndian.Uint64(d[0][8:]) != maxCounter-1 || bytes.Count(d[0], []byte{0xaa}) > 8 {
		t.Errorf("the last counter's datagram is not sealed: %x", d[0][:32])
	}
	if !bytes.Equal(d[1], make([]byte, len(d[1]))) {
		t.Errorf("a datagram past the last counter: %x, want zeros", d[1][:32])
	}
}

// Fuzzing Open with arbitrary datagrams never panics and accepts none.
func FuzzOpen(f *testing.F) {
	f.Add(make([]byte, headerLen+tagLen))
	f.Add(append(binary.LittleEndian.AppendUint32(nil, msgData), make([]byte, 60)...))
	_, o, err := newCiphers(bytes.Repeat([]byte{1}, keyLen), netip.MustParseAddrPort("1.1.1.1:1"), netip.MustParseAddrPort("2.2.2.2:2"))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, d []byte) {
		if len(d) < headerLen+tagLen {
			return // the Receiver drops these before Open
		}
		v := []udp.Verdict{udp.Accept}
		o.open([][]byte{d}, []int{0}, v)
		if v[0] == udp.Accept {
			t.Fatalf("accepted a forged datagram %x", d)
		}
	})
}
