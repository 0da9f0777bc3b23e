package txqueue

import "testing"

func TestTruesize(t *testing.T) {
	for _, tt := range []struct{ in, want int }{
		{-1, Overhead},
		{0, Overhead},
		{64, 64 + Overhead},
		{2048, 2048 + Overhead},
		{65536, 65536 + Overhead},
	} {
		if got := Truesize(tt.in); got != tt.want {
			t.Errorf("Truesize(%d) = %d, want %d", tt.in, got, tt.want)
		}
	}
}
