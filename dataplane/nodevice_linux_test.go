package dataplane

import (
	"bytes"
	"errors"
	"log/slog"
	"net/netip"
	"testing"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// TestNoDevice: a NIC or an ingress device that does not exist fails
// OpenGateway with ErrNoDevice, whatever the port, without a log line
// that blames anything else (PortAuto does not fall back) and without
// leaving a TUN device behind.
func TestNoDevice(t *testing.T) {
	netlab.RequireRoot(t)
	ns := netlab.NewT(t, "nodev")
	routes := []netip.Prefix{netip.MustParsePrefix("198.19.0.0/24")}
	for _, c := range []struct {
		name string
		cfg  GatewayConfig
	}{
		{"auto", GatewayConfig{NIC: "nonexist0", Port: PortAuto}},
		{"xdp", GatewayConfig{NIC: "nonexist0", Port: PortXDP}},
		{"packet", GatewayConfig{NIC: "nonexist0", Port: PortPacket}},
		{"ingress", GatewayConfig{NIC: "nonexist0", Ingress: IngressOptions{Device: "nonexist1", Routes: routes}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs bytes.Buffer
			c.cfg.TUN.Name, c.cfg.Routes, c.cfg.Log = "nodev0", routes, slog.New(slog.NewTextHandler(&logs, nil))
			if err := openRefused(t, ns, c.cfg); !errors.Is(err, ErrNoDevice) {
				t.Errorf("OpenGateway: %v, want ErrNoDevice", err)
			}
			if _, err := ns.Link("nodev0"); err == nil {
				t.Error("TUN device left behind")
			}
			if logs.Len() > 0 {
				t.Errorf("logged before failing:\n%s", logs.String())
			}
		})
	}
}

// openRefused opens a gateway with cfg in ns, which is to fail, and
// returns the error (closing the gateway should it open).
func openRefused(t *testing.T, ns *netlab.NS, cfg GatewayConfig) (err error) {
	t.Helper()
	ns.Do(t, func() {
		var g *Gateway
		if g, err = OpenGateway(cfg); err == nil {
			g.Close()
		}
	})
	return err
}
