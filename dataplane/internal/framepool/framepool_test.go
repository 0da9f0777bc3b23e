package framepool

import (
	"slices"
	"testing"

	"github.com/gsoplane/gsoplane/dataplane/frame"
)

func ids(frames []frame.Frame) []uint64 {
	out := make([]uint64, len(frames))
	for i, f := range frames {
		out[i] = f.ID
	}
	return out
}

// TestAlloc hands out small frames from frame 0 and large frames after
// them, each its own memory of its size, until none is free.
func TestAlloc(t *testing.T) {
	p := New(3, 64, 2, 256)
	frames := make([]frame.Frame, 4)
	if n := p.Alloc(frames); n != 3 || frames[0].ID != 0 || frames[1].ID != 1 || frames[2].ID != 2 {
		t.Fatalf("Alloc: %d frames %v, want 0, 1, 2", n, ids(frames[:n]))
	}
	large := make([]frame.Frame, 0, 3)
	for f, ok := p.AllocLarge(); ok; f, ok = p.AllocLarge() {
		large = append(large, f)
	}
	if len(large) != 2 || large[0].ID != 3 || large[1].ID != 4 {
		t.Fatalf("AllocLarge: %v, want 3, 4", ids(large))
	}
	all := append(frames[:3], large...)
	for i, f := range all {
		want := 64
		if f.ID >= 3 {
			want = 256
		}
		if len(f.Buf) != want || cap(f.Buf) != want {
			t.Errorf("frame %d: %d bytes (cap %d), want %d", f.ID, len(f.Buf), cap(f.Buf), want)
		}
		f.Buf[0], f.Buf[len(f.Buf)-1] = byte(i+1), byte(i+1)
	}
	for i, f := range all {
		if f.Buf[0] != byte(i+1) || f.Buf[len(f.Buf)-1] != byte(i+1) {
			t.Errorf("frame %d overlaps another", f.ID)
		}
	}
	if n := p.Alloc(frames); n != 0 {
		t.Errorf("Alloc with none free: %d", n)
	}
}

// TestFree takes back allocated frames only: not free ones, taken ones or
// foreign IDs.
func TestFree(t *testing.T) {
	p := New(4, 64, 0, 0)
	frames := make([]frame.Frame, 4)
	p.Alloc(frames)
	p.Take(frames[:1])
	p.Free([]frame.Frame{frames[0], frames[1], frames[1], {ID: 99}})
	if n := p.Alloc(frames[:4]); n != 1 || frames[0].ID != 1 {
		t.Fatalf("after Free: Alloc %d frames %v, want frame 1 alone", n, ids(frames[:n]))
	}
	if n := p.Complete(); n != 1 {
		t.Errorf("Complete: %d, want the taken frame", n)
	}
	if n := p.Alloc(frames[1:]); n != 1 || frames[1].ID != 0 {
		t.Errorf("after Complete: Alloc %d frames %v, want frame 0", n, ids(frames[1:1+n]))
	}
}

// TestAllocated accepts allocated frames whose packet fits them behind
// the headroom, and stops at the first that is not.
func TestAllocated(t *testing.T) {
	p := New(2, 64, 1, 256)
	frames := make([]frame.Frame, 2)
	p.Alloc(frames)
	large, _ := p.AllocLarge()
	frames[0].Len, frames[1].Len, large.Len = 54, 1, 246
	for _, c := range []struct {
		name   string
		frames []frame.Frame
		want   int
	}{
		{"allocated", []frame.Frame{frames[0], frames[1], large}, 3},
		{"too long", []frame.Frame{frames[0], {ID: 1, Len: 55}}, 1},
		{"empty", []frame.Frame{{ID: 1}}, 0},
		{"foreign", []frame.Frame{frames[0], {ID: 3, Len: 1}}, 1},
	} {
		if got := p.Allocated(c.frames, 10); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
	p.Take(frames[1:2])
	if got := p.Allocated(frames, 10); got != 1 {
		t.Errorf("a taken frame: %d, want 1", got)
	}
	p.Free(frames[:1])
	if got := p.Allocated(frames, 10); got != 0 {
		t.Errorf("a freed frame: %d, want 0", got)
	}
}

// TestComplete reports the taken frames, a frame taken twice counted
// twice but back in the pool once, and frees them in the order taken.
func TestComplete(t *testing.T) {
	p := New(3, 64, 0, 0)
	frames := make([]frame.Frame, 3)
	p.Alloc(frames)
	p.Take([]frame.Frame{frames[2], frames[0]})
	p.Take(frames[2:])
	if n := p.Taken(); n != 3 {
		t.Errorf("Taken: %d, want 3", n)
	}
	if n := p.Complete(); n != 3 || p.Taken() != 0 {
		t.Errorf("Complete: %d (%d left), want 3 (0)", n, p.Taken())
	}
	if n := p.Complete(); n != 0 {
		t.Errorf("Complete again: %d", n)
	}
	if n := p.Alloc(frames); n != 2 || frames[0].ID != 0 || frames[1].ID != 2 {
		t.Errorf("after Complete: Alloc %d frames %v, want 0, 2 (the last put back first)", n, ids(frames[:n]))
	}
}

// TestAllocs cycles frames through the pool without allocating.
func TestAllocs(t *testing.T) {
	p := New(64, 64, 1, 256)
	frames := make([]frame.Frame, 64)
	allocs := testing.AllocsPerRun(100, func() {
		n := p.Alloc(frames)
		f, _ := p.AllocLarge()
		p.Free(frames[n/2 : n])
		p.Take(frames[:n/2])
		p.Take([]frame.Frame{f})
		p.Allocated(frames[:n/2], 0)
		p.Complete()
	})
	if allocs != 0 {
		t.Errorf("%v allocations per cycle, want 0", allocs)
	}
}

// TestKeep: a kept frame is reported by Complete like a taken one but
// stays out of the pool, which neither Free nor a second Complete
// changes, until Release puts it back; Release ignores frames that are
// not kept. One in share of each size's frames may be kept at once.
func TestKeep(t *testing.T) {
	const share = 4
	p := New(2*share, 64, share, 256)
	frames := make([]frame.Frame, 2)
	p.Alloc(frames)
	if !p.Keep(frames[0], share) {
		t.Fatal("Keep refused the first frame")
	}
	p.Take(frames[1:])
	p.Free(frames[:1])
	if n := p.Complete(); n != 2 {
		t.Errorf("Complete: %d, want the kept frame and the taken one", n)
	}
	p.Release(frames[1:]) // back already
	more := make([]frame.Frame, 2*share)
	if n := p.Alloc(more); n != 2*share-1 || slices.Contains(ids(more[:n]), frames[0].ID) {
		t.Errorf("with a frame kept: Alloc %d frames %v, want all but the kept one", n, ids(more[:n]))
	}
	if !p.Keep(more[0], share) || p.Keep(more[1], share) {
		t.Error("Keep did not take a second small frame of 8, or took a third")
	}
	large, _ := p.AllocLarge()
	if !p.Keep(large, share) {
		t.Error("Keep refused a large frame")
	}
	p.Free(more)
	p.Release([]frame.Frame{frames[0], more[0]})
	p.Release(frames[:1])
	if n := p.Alloc(more); n != 2*share {
		t.Errorf("after Release: Alloc %d frames, want every small one, the kept one once", n)
	}
	if !p.Keep(more[0], share) || !p.Keep(more[1], share) {
		t.Error("Keep refused small frames after Release")
	}
}
