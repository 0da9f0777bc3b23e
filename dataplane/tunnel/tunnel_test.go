package tunnel_test

import (
	"testing"

	"github.com/gsoplane/gsoplane/dataplane/tunnel"
)

// The inner MTU leaves room for the outer IPv4 (20) or IPv6 (40) header,
// UDP (8) and the framing.
func TestInnerMTU(t *testing.T) {
	for _, c := range []struct {
		path int
		v6   bool
		head int
		tail int
		want int
	}{
		{1500, false, 16, 16, 1440},
		{1500, true, 16, 16, 1420}, // WireGuard's default
		{1500, false, 16, 0, 1456},
		{1500, true, 16, 0, 1436},
		{9000, false, 12, 0, 8960},
		{1280, true, 16, 16, 1200},
	} {
		if got := tunnel.InnerMTU(c.path, c.v6, c.head, c.tail); got != c.want {
			t.Errorf("InnerMTU(%d, v6 %v, %d, %d) = %d, want %d", c.path, c.v6, c.head, c.tail, got, c.want)
		}
	}
}
