package tunnel

import (
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// The socket buffers are forced to the size asked for with CAP_NET_ADMIN;
// without it they are capped by net.core.[rw]mem_max, and a warning names
// the sysctl.
func TestSocketBuffers(t *testing.T) {
	netlab.RequireRoot(t)
	const want = 64 << 20
	for _, sysctl := range []string{"rmem_max", "wmem_max"} {
		b, err := os.ReadFile("/proc/sys/net/core/" + sysctl)
		if n, _ := strconv.Atoi(strings.TrimSpace(string(b))); err != nil || n >= want {
			t.Skipf("net.core.%s is %s: it lets anyone have the buffers", sysctl, b)
		}
	}
	for _, privileged := range []bool{true, false} {
		conn, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9})
		netlab.Must(t, err)
		defer conn.Close()
		logs := new(strings.Builder)
		tn := &Tunnel{cfg: Config{SocketBuffer: want}, conn: conn, log: slog.New(slog.NewTextHandler(logs, nil))}
		if privileged {
			tn.sizeBuffers()
		} else {
			netlab.Must(t, netlab.WithCaps(0, func() error { tn.sizeBuffers(); return nil }))
		}
		for _, b := range []struct {
			opt    int
			sysctl string
		}{{unix.SO_RCVBUF, "net.core.rmem_max"}, {unix.SO_SNDBUF, "net.core.wmem_max"}} {
			var got int
			netlab.Must(t, control(conn, func(fd int) (err error) { got, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, b.opt); return err }))
			warned := strings.Contains(logs.String(), b.sysctl)
			if privileged && (got/2 < want || warned) || !privileged && (got/2 >= want || !warned) {
				t.Errorf("privileged %v: %s buffer %d bytes (want %d), warned %v:\n%s", privileged, b.sysctl, got/2, want, warned, logs)
			}
		}
	}
}
