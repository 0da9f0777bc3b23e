package copycount

import "testing"

// TestAdd: Add counts a copy, not a packet left where it was.
func TestAdd(t *testing.T) {
	buf, other := make([]byte, 100), make([]byte, 40)
	before := Bytes()
	Add(other, buf)      // a copy
	Add(buf[:50], buf)   // in place: no copy
	Add(buf[10:20], buf) // a move within one buffer is a copy
	want := uint64(0)
	if Enabled {
		want = 50
	}
	if got := Bytes() - before; got != want {
		t.Errorf("%d bytes counted, want %d (Enabled %v)", got, want, Enabled)
	}
}
