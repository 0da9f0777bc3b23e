package vpn

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

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

var (
	testPSK      = bytes.Repeat([]byte{7}, keyLen)
	testA, testB = netip.MustParseAddrPort("198.18.100.1:51820"), netip.MustParseAddrPort("198.18.100.2:51820")
	discard      = slog.New(slog.DiscardHandler)
)

// testEnd is one end's ciphers on its state file, as a (re)start of the
// end makes them; its sealer's clock is the test's.
type testEnd struct {
	s     *sealer
	o     *opener
	clock *time.Time
}

// startEnd starts the end at local (towards peer) on the state file
// path, as Open does, its sealer on the test's clock; it fails the test
// if the state is refused.
func startEnd(t testing.TB, path string, local, peer netip.AddrPort) *testEnd {
	t.Helper()
	st, err := loadState(path, discard)
	if err != nil {
		t.Fatal(err)
	}
	s, o, err := newCiphers(testPSK, local, peer, st)
	if err != nil {
		t.Fatal(err)
	}
	clock := new(time.Time)
	*clock = time.Unix(1e9, 0)
	s.now = func() time.Time { return *clock }
	s.rotateAt = clock.Add(epochPeriod)
	return &testEnd{s: s, o: o, clock: clock}
}

// batch seals n datagrams of size bytes of packet, filled from seed on.
func (e *testEnd) batch(n, size int, seed byte) [][]byte {
	d := make([][]byte, n)
	for i := range d {
		d[i] = make([]byte, headerLen+size+tagLen)
		for j := range size {
			d[i][headerLen+j] = seed + byte(i+j)
		}
	}
	e.s.seal(d, make([]int, n))
	return d
}

// open opens copies of dgrams at e and returns the verdicts.
func (e *testEnd) open(dgrams [][]byte) []udp.Verdict {
	c := make([][]byte, len(dgrams))
	for i, d := range dgrams {
		c[i] = bytes.Clone(d)
	}
	v := make([]udp.Verdict, len(c))
	e.o.open(c, make([]int, len(c)), v)
	return v
}

// nonceOf is the (epoch, counter) a datagram was sealed under.
type nonceOf struct {
	epoch uint32
	ctr   uint64
}

func nonceIn(d []byte) nonceOf {
	return nonceOf{binary.LittleEndian.Uint32(d[4:]), binary.LittleEndian.Uint64(d[8:])}
}

func all(v []udp.Verdict, want udp.Verdict) bool {
	for _, x := range v {
		if x != want {
			return false
		}
	}
	return true
}

// A batch sealed by one end opens at the other; a flipped bit, a replay,
// a datagram that is not a data message or of epoch 0 are dropped for
// their reason; neither direction allocates.
func TestSealOpen(t *testing.T) {
	dir := t.TempDir()
	a := startEnd(t, filepath.Join(dir, "a"), testA, testB)
	b := startEnd(t, filepath.Join(dir, "b"), testB, testA)
	const n, size = 9, 1400
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
	a.s.seal(dgrams, peers)
	replay := bytes.Clone(dgrams[3])
	dgrams[1][headerLen+100] ^= 1                    // a flipped bit: bad tag
	binary.LittleEndian.PutUint32(dgrams[2], 1)      // not a data message
	binary.LittleEndian.PutUint64(dgrams[5][8:], 99) // a forged counter: bad tag
	binary.LittleEndian.PutUint32(dgrams[8][4:], 0)  // epoch 0: never sealed
	b.o.open(dgrams, peers, verdicts)
	want := []udp.Verdict{udp.Accept, udp.DropAuth, udp.DropMalformed, udp.Accept, udp.Accept, udp.DropAuth, udp.Accept, udp.Accept, udp.DropMalformed}
	for i := range n {
		if verdicts[i] != want[i] {
			t.Errorf("datagram %d: verdict %d, want %d", i, verdicts[i], want[i])
		}
		if want[i] == udp.Accept && (dgrams[i][headerLen] != byte(i) || dgrams[i][headerLen+size-1] != byte(i+size-1)) {
			t.Errorf("datagram %d: not decrypted", i)
		}
	}
	if v := b.open([][]byte{replay}); v[0] != udp.DropReplay {
		t.Errorf("a replayed datagram: verdict %d, want DropReplay", v[0])
	}

	a.s.now, a.s.rotateAt = time.Now, time.Now().Add(time.Hour) // the real clock, within an epoch
	allocs := testing.AllocsPerRun(100, func() {
		fill()
		a.s.seal(dgrams, peers)
		b.o.open(dgrams, peers, verdicts)
	})
	if allocs != 0 {
		t.Errorf("seal and open: %.1f allocations per batch, want 0", allocs)
	}
	if !all(verdicts, udp.Accept) {
		t.Errorf("after the rounds, verdicts %v", verdicts)
	}
}

// The sealer takes a new epoch, written to its state file first, every
// period and before its counter runs out; with a state file it cannot
// write it keeps its epoch, and past the last counter it seals nothing:
// nothing of the packet leaves.
func TestSealEpochs(t *testing.T) {
	dir := t.TempDir()
	a := startEnd(t, filepath.Join(dir, "a"), testA, testB)
	b := startEnd(t, filepath.Join(dir, "b"), testB, testA)
	first := nonceIn(a.batch(1, 100, 0)[0])
	*a.clock = a.clock.Add(epochPeriod)
	d := a.batch(2, 100, 0)
	if got := []nonceOf{nonceIn(d[0]), nonceIn(d[1])}; got[0] != (nonceOf{first.epoch + 1, 0}) || got[1] != (nonceOf{first.epoch + 1, 1}) {
		t.Errorf("after a period: nonces %v, want epoch %d from counter 0", got, first.epoch+1)
	}
	if st, err := loadState(filepath.Join(dir, "a"), discard); err != nil || st.next != first.epoch+2 {
		t.Errorf("state file after epoch %d: %+v, %v", first.epoch+1, st, err)
	}
	a.s.counter = maxCounter - 1
	d = a.batch(2, 100, 0)
	if got := nonceIn(d[1]); got != (nonceOf{first.epoch + 2, 1}) {
		t.Errorf("near the last counter: nonce %v, want a new epoch %d", got, first.epoch+2)
	}
	if v := b.open(d); !all(v, udp.Accept) {
		t.Errorf("the new epoch's datagrams: %v", v)
	}

	a.s.state.path = filepath.Join(dir, "gone", "a") // cannot be written
	a.s.counter = maxCounter - 1
	*a.clock = a.clock.Add(epochPeriod)
	d = [][]byte{bytes.Repeat([]byte{0xaa}, headerLen+100+tagLen), bytes.Repeat([]byte{0xaa}, headerLen+100+tagLen)}
	a.s.seal(d, []int{0, 0})
	if got := nonceIn(d[0]); got != (nonceOf{first.epoch + 2, maxCounter - 1}) || bytes.Count(d[0], []byte{0xaa}) > 8 {
		t.Errorf("the last counter's datagram is not sealed under the epoch kept: %x", d[0][:32])
	}
	if !bytes.Equal(d[1], make([]byte, len(d[1]))) {
		t.Errorf("a datagram past the last counter: %x, want zeros", d[1][:32])
	}
}

// A restarted sender never seals under a (key, nonce) of an earlier run,
// even one that crashed after writing its state file and before sealing
// under the epoch it took, or in the middle of writing it.
func TestSenderRestartNoNonceReuse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a")
	seen := map[nonceOf]int{}
	record := func(run int, d [][]byte) {
		for _, x := range d {
			n := nonceIn(x)
			if r, dup := seen[n]; dup {
				t.Fatalf("run %d seals under nonce %+v, as run %d did", run, n, r)
			}
			seen[n] = run
		}
	}
	var taken uint32
	for run := range 4 {
		a := startEnd(t, path, testA, testB)
		if run == 2 && a.s.epoch <= taken {
			t.Errorf("after a crash that took epoch %d, the next run seals under epoch %d", taken, a.s.epoch)
		}
		for range 3 {
			record(run, a.batch(50, 64, byte(run)))
			*a.clock = a.clock.Add(epochPeriod / 2)
		}
		switch run {
		case 1: // a crash after the state file took an epoch, before it was used
			e, err := a.s.state.takeEpoch()
			if err != nil {
				t.Fatal(err)
			}
			taken = e
		case 2: // a crash in the middle of writing the state file
			must(t, os.WriteFile(path+".new", []byte("gsoplane example vpn state: next sen"), 0o600))
		}
	}
	if len(seen) != 4*3*50 {
		t.Errorf("%d nonces", len(seen))
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// After both ends restart, datagrams captured before are refused and
// new ones accepted at once; after the receiver alone restarts, the
// sender's datagrams of its current epoch are refused (they could be
// replays) until its next epoch, at most epochPeriod later; after the
// sender alone restarts its datagrams are accepted at once.
func TestRestarts(t *testing.T) {
	dir := t.TempDir()
	pa, pb := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	a, b := startEnd(t, pa, testA, testB), startEnd(t, pb, testB, testA)
	var captured [][]byte
	for range 3 {
		d := a.batch(20, 200, 1)
		if v := b.open(d); !all(v, udp.Accept) {
			t.Fatalf("before the restarts: %v", v)
		}
		captured = append(captured, d...)
		*a.clock = a.clock.Add(epochPeriod) // three epochs
	}

	// Both ends restart.
	a, b = startEnd(t, pa, testA, testB), startEnd(t, pb, testB, testA)
	if v := b.open(captured); !all(v, udp.DropReplay) {
		t.Errorf("old datagrams after both ends restarted: %v, want all refused as replays", v)
	}
	if v := b.open(a.batch(20, 200, 2)); !all(v, udp.Accept) {
		t.Errorf("new datagrams after both ends restarted: %v", v)
	}

	// The receiver restarts.
	b = startEnd(t, pb, testB, testA)
	if v := b.open(a.batch(20, 200, 3)); !all(v, udp.DropReplay) {
		t.Errorf("the sender's current epoch after the receiver restarted: %v, want refused", v)
	}
	*a.clock = a.clock.Add(epochPeriod)
	if v := b.open(a.batch(20, 200, 4)); !all(v, udp.Accept) {
		t.Errorf("the sender's next epoch, a period later: %v, want accepted", v)
	}
	if v := b.open(captured); !all(v, udp.DropReplay) {
		t.Errorf("old datagrams after the receiver restarted: %v", v)
	}

	// The sender restarts.
	last := a.batch(5, 200, 5)
	a = startEnd(t, pa, testA, testB)
	if v := b.open(a.batch(20, 200, 6)); !all(v, udp.Accept) {
		t.Errorf("after the sender restarted: %v, want accepted at once", v)
	}
	if v := b.open(last); !all(v, udp.Accept) {
		t.Errorf("the previous epoch's late datagrams: %v, want accepted once", v)
	}
	if v := b.open(append(last, captured...)); !all(v, udp.DropReplay) {
		t.Errorf("replays: %v", v)
	}
}

// Around an epoch change the previous epoch's datagrams are still taken
// once each; an older epoch's are not. A forged datagram of a new epoch
// (a bad tag) moves nothing, and the state file is not written.
func TestOpenEpochChange(t *testing.T) {
	dir := t.TempDir()
	a, b := startEnd(t, filepath.Join(dir, "a"), testA, testB), startEnd(t, filepath.Join(dir, "b"), testB, testA)
	var epochs [3][][]byte
	for i := range epochs {
		epochs[i] = a.batch(4, 100, byte(i))
		*a.clock = a.clock.Add(epochPeriod)
	}
	forged := bytes.Clone(epochs[2][0])
	binary.LittleEndian.PutUint32(forged[4:], nonceIn(forged).epoch+100)
	for _, c := range []struct {
		d    [][]byte
		want udp.Verdict
	}{
		{epochs[0][:2], udp.Accept},
		{epochs[1][:2], udp.Accept},
		{epochs[0][2:], udp.Accept}, // late, of the previous epoch
		{[][]byte{forged}, udp.DropAuth},
		{epochs[2][:2], udp.Accept},
		{epochs[1][2:], udp.Accept},     // the previous epoch again
		{epochs[0], udp.DropReplay},     // two epochs back
		{epochs[1][2:], udp.DropReplay}, // seen
	} {
		if v := b.open(c.d); !all(v, c.want) {
			t.Errorf("epoch %d: %v, want %d", nonceIn(c.d[0]).epoch, v, c.want)
		}
	}
	if st, err := loadState(filepath.Join(dir, "b"), discard); err != nil || st.floor != nonceIn(epochs[2][0]).epoch {
		t.Errorf("the receiver's state file: %+v, %v; want the floor at epoch %d", st, err, nonceIn(epochs[2][0]).epoch)
	}
}

// A state file that is not one is refused, not taken for a first start.
func TestStateFile(t *testing.T) {
	dir := t.TempDir()
	for _, body := range []string{"", "garbage", "gsoplane example vpn state: next sending epoch 0, highest epoch received 0\n",
		"gsoplane example vpn state: next sending epoch 3, highest epoch received 2\nmore"} {
		p := filepath.Join(dir, "s")
		must(t, os.WriteFile(p, []byte(body), 0o600))
		if _, err := loadState(p, discard); err == nil {
			t.Errorf("state file %q taken", body)
		}
	}
}

// Fuzzing Open with arbitrary datagrams never panics and accepts none.
func FuzzOpen(f *testing.F) {
	f.Add(make([]byte, headerLen+tagLen))
	f.Add(append(binary.LittleEndian.AppendUint32(nil, msgData), make([]byte, 60)...))
	f.Add(append(binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, msgData), 1), 5), make([]byte, 60)...))
	b := startEnd(f, filepath.Join(f.TempDir(), "b"), testB, testA)
	f.Fuzz(func(t *testing.T, d []byte) {
		if len(d) < headerLen+tagLen {
			return // the Receiver drops these before Open
		}
		if v := b.open([][]byte{d}); v[0] == udp.Accept {
			t.Fatalf("accepted a forged datagram %x", d)
		}
	})
}

// A receiver whose state file cannot be written refuses a new epoch, as
// a replay (after a restart it could not tell it was accepted), goes on
// with the current one, and logs the failure once.
func TestOpenStateUnwritable(t *testing.T) {
	dir := t.TempDir()
	a, b := startEnd(t, filepath.Join(dir, "a"), testA, testB), startEnd(t, filepath.Join(dir, "b"), testB, testA)
	var logs bytes.Buffer
	b.o.state.log = slog.New(slog.NewTextHandler(&logs, nil))
	if v := b.open(a.batch(3, 100, 0)); !all(v, udp.Accept) {
		t.Fatalf("first epoch: %v", v)
	}
	b.o.state.path = filepath.Join(dir, "gone", "b")
	cur := a.batch(3, 100, 1)
	*a.clock = a.clock.Add(epochPeriod)
	next := a.batch(3, 100, 2)
	if v := b.open(next); !all(v, udp.DropReplay) {
		t.Errorf("a new epoch, the state file unwritable: %v, want refused", v)
	}
	if v := b.open(cur); !all(v, udp.Accept) {
		t.Errorf("the current epoch, the state file unwritable: %v, want accepted", v)
	}
	if n := bytes.Count(logs.Bytes(), []byte("level=ERROR")); n != 1 {
		t.Errorf("%d errors logged, want 1:\n%s", n, logs.String())
	}
}
