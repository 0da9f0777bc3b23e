package dataplane

import (
	"errors"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// TestGatewayBusyPoll: a gateway whose AF_XDP sockets busy poll, on a NIC
// with napi_defer_hard_irqs and gro_flush_timeout set as busy polling
// wants, moves SHA-256-checked TCP streams both ways without drops, and
// its sockets did poll.
func TestGatewayBusyPoll(t *testing.T) {
	const busy = 50 * time.Microsecond
	lab := newGwLab(t, GatewayConfig{Port: PortXDP, XDP: XDPOptions{BusyPoll: busy}})
	for file, v := range map[string]string{"napi_defer_hard_irqs": "2", "gro_flush_timeout": "200000"} {
		netlab.Must(t, lab.A.WriteSysfs("/sys/class/net/"+netlab.NICA+"/"+file, v))
	}
	for _, x := range lab.g.XDP().Sockets() {
		if x.BusyPoll() != busy {
			t.Fatalf("socket busy poll %v, want %v", x.BusyPoll(), busy)
		}
	}
	for _, c := range []struct {
		name string
		toA  bool
	}{{"A-to-B", false}, {"B-to-A", true}} {
		t.Run(c.name, func(t *testing.T) {
			const size = 32 << 20
			d := tcpTransfer(t, lab, labSrv4, size, c.toA)
			t.Logf("%d MiB in %v: %.0f Mbit/s", size>>20, d.Round(time.Millisecond), float64(size)*8/d.Seconds()/1e6)
		})
	}
	st := lab.settledStats()
	if lost(st.Forward.Drops) != 0 || st.Return.Drops.Total() != 0 {
		t.Errorf("the gateway dropped: forward %v, return %v", st.Forward.Drops, st.Return.Drops)
	}
	var polls uint64
	for i, s := range st.Port.Sockets {
		t.Logf("socket %d: %d busy polls, %d kicks, %d received, %d sent", i, s.Counter("busy_poll"), s.Counter("kicks"), s.RX, s.TX)
		polls += s.Counter("busy_poll")
	}
	if polls == 0 {
		t.Error("no socket busy polled")
	}
}

// TestGatewayBusyPollPacket: busy polling is refused with an AF_PACKET
// port, before anything is left behind.
func TestGatewayBusyPollPacket(t *testing.T) {
	tp := netlab.NewTopologyT(t, "gw")
	err := openRefused(t, tp.A, GatewayConfig{
		TUN: TUNOptions{Name: labTUN}, NIC: netlab.NICA, Routes: netlab.AppRoutes,
		Port: PortPacket, XDP: XDPOptions{BusyPoll: 50 * time.Microsecond}, DisableBackpressure: true, DisableGRO: true,
	})
	if !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("OpenGateway with an AF_PACKET port and busy polling: %v, want ErrInvalidConfig", err)
	}
}
