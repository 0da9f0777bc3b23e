package dataplane

import (
	"math"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/xsk"
	"github.com/gsoplane/gsoplane/internal/copycount"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// TestCopies counts the copies user space makes of each super-packet on
// each of the gateway's paths, in a build that counts them (-tags
// copycount; internal/copycount): the bytes the data path copied from one
// buffer into another, per byte a TCP stream moved through the path. The
// count is an invariant of the path, not a speed: a copy added to a path
// (or a packet no longer left where it was read) fails it. The kernel's
// copies (a TUN read or write, a packet socket's send or receive, an
// AF_XDP copy-mode receive or transmit) are not user space's and not
// counted here (docs/bench-json.md counts them too).
//
//	TUN → AF_PACKET, whole super-packets  0: read straight into the frame sent (Stats.InPlace)
//	TUN → AF_XDP                          1: the cut into TX frames
//	TUN → either, single datagrams        1: the copy into a TX frame
//	NIC → TUN (GRO), either port          0: GRO merges with one vectored write
//	AF_PACKET ingress → AF_PACKET         0: received straight into the frame sent (frame.IntoReceiver)
//	AF_XDP ingress → AF_XDP               2: the wire source's copy, then the cut into TX frames
//	the same, multi-buffer (generic XDP)  3: the chain gathered into one buffer, the wire source's copy, the cut
//	ingress, single datagrams, AF_PACKET  1: received into a large frame, then the copy into a TX frame
//	ingress, single datagrams, AF_XDP     2: the wire source's copy, then the copy into a TX frame
func TestCopies(t *testing.T) {
	netlab.RequireRoot(t)
	if !copycount.Enabled {
		t.Skip("counts copies only when built with -tags copycount (make test runs it so)")
	}
	const size = 16 << 20
	srv := netip.AddrPortFrom(netlab.Srv4, 5201)
	for _, c := range []struct {
		name            string
		port            labPort
		nicGRO          bool
		fwd, ret, small int // user-space copies A→B, B→A, and of small datagrams A→B
	}{
		{name: "packet", port: portPacket, nicGRO: true, fwd: 0, ret: 0, small: 1},
		{name: "xdp", port: portXDP, fwd: 1, ret: 0, small: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			lab := newGwLab(t, c.port.config(GatewayConfig{}))
			if c.nicGRO {
				netlab.Must(t, lab.A.SetFeatures(netlab.NICA, map[string]bool{"gro": true}))
			}
			checkCopies(t, "A→B", c.fwd, size, func() { netlab.TCPTransfer(t, lab.A, lab.B, srv, size, false) })
			checkCopies(t, "B→A", c.ret, size, func() { netlab.TCPTransfer(t, lab.A, lab.B, srv, size, true) })
			checkCopies(t, "A→B, 64-byte datagrams", c.small, smallBytes, func() { smallDatagrams(t, lab.A, netlab.Srv4) })
			st := lab.settledStats()
			t.Logf("forward: %d super-packets read, %d offloaded, %d of them in place, %d cut", st.Forward.SuperPackets, st.Forward.Offloaded, st.Forward.InPlace, st.Forward.Cut)
		})
	}
	for _, c := range []struct {
		name       string
		cfg        GatewayConfig
		fwd, small int
	}{
		{"packet", portPacket.config(GatewayConfig{}), 0, 1},
		{"xdp", portXDP.config(GatewayConfig{}), 2, 2},
		{"xdp-generic", portXDP.config(GatewayConfig{XDP: XDPOptions{Mode: xsk.ModeGeneric}}), 3, 2},
	} {
		t.Run("ingress/"+c.name, func(t *testing.T) {
			tp := newIngressTopology(t, 2, 2)
			g, _ := startIngressWith(t, tp, c.cfg)
			checkCopies(t, "C→B", c.fwd, size, func() { netlab.TCPTransfer(t, tp.C, tp.B, srv, size, false) })
			checkCopies(t, "C→B, 64-byte datagrams", c.small, smallBytes, func() { smallDatagrams(t, tp.C, netlab.Srv4) })
			st := g.Stats().Forward
			t.Logf("forward: %d super-packets read, %d segments, %d offloaded, %d of them in place, %d cut", st.SuperPackets, st.Segments, st.Offloaded, st.InPlace, st.Cut)
		})
	}
}

// smallBytes is the IP bytes smallDatagrams sends.
const smallBytes = smallCount * (64 + 8 + 20)

const smallCount = 2000

// smallDatagrams sends smallCount 64-byte UDP datagrams from ns to dst
// (nobody listens: B answers with ICMP errors, rate-limited, which the
// return path takes) and waits a moment for the gateway to forward them.
func smallDatagrams(t *testing.T, ns *netlab.NS, dst netip.Addr) {
	t.Helper()
	var c net.Conn
	ns.Do(t, func() {
		var err error
		c, err = net.Dial("udp", netip.AddrPortFrom(dst, 9).String())
		netlab.Must(t, err)
	})
	defer c.Close()
	payload := make([]byte, 64)
	for i := range smallCount {
		c.Write(payload)
		if i%64 == 63 {
			time.Sleep(time.Millisecond) // within the rings
		}
	}
	time.Sleep(100 * time.Millisecond)
}

// checkCopies runs move, which moves size bytes of TCP payload through a
// path, and checks that user space copied them want times: the bytes
// copied per byte moved, rounded (the segments' headers, a copy's own
// in each, and the other direction's acknowledgements add a few
// percent).
func checkCopies(t *testing.T, dir string, want int, size int64, move func()) {
	t.Helper()
	before := settledCopies()
	move()
	per := float64(copycount.Bytes()-before) / float64(size)
	t.Logf("%s: %.3f bytes copied by user space per byte moved", dir, per)
	if got := int(math.Round(per)); got != want || math.Abs(per-float64(got)) > 0.2 {
		t.Errorf("%s: user space copies each byte %.3f times, want %d", dir, per, want)
	}
}

// settledCopies waits until no copy was counted for 200 ms (up to 5 s:
// the last segments of the stream before, retransmitted late on a busy
// machine, are not the next measurement's) and returns the count.
func settledCopies() uint64 {
	n := copycount.Bytes()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		m := copycount.Bytes()
		if m == n {
			break
		}
		n = m
	}
	return n
}
