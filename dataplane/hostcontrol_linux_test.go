package dataplane

import (
	"net"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/pipeline"
)

// TestGatewayHostControl: the host's own signalling into the TUN (the
// MLD and IGMP reports its kernel sends when a socket joins a group on
// the TUN, and the router solicitations it sends by itself) is counted
// as host control, not as a drop; an application's datagrams to a
// multicast group are dropped as not routed, each of them once.
func TestGatewayHostControl(t *testing.T) { forPorts(t, gatewayHostControl) }

func gatewayHostControl(t *testing.T, port labPort) {
	lab := newGwLab(t, port.config(GatewayConfig{}))
	var tun *net.Interface
	var err error
	lab.A.Do(t, func() { tun, err = net.InterfaceByName(labTUN) })
	if err != nil {
		t.Fatal(err)
	}
	groups := []*net.UDPAddr{{IP: net.ParseIP("ff02::1:2345"), Port: 9, Zone: labTUN}, {IP: net.ParseIP("239.1.2.3"), Port: 9}}
	for _, g := range groups {
		lab.A.Do(t, func() {
			network := "udp4"
			if g.IP.To4() == nil {
				network = "udp6"
			}
			c, err := net.ListenMulticastUDP(network, tun, g) // the kernel reports the membership
			if err != nil {
				t.Fatalf("join %v on %s: %v", g.IP, labTUN, err)
			}
			t.Cleanup(func() { c.Close() })
			if _, err := c.WriteToUDP([]byte("to the group"), g); err != nil {
				t.Fatalf("send to %v: %v", g.IP, err)
			}
		})
	}
	var f pipeline.Stats
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if f = lab.g.Stats().Forward; f.HostControl >= 2 && f.Drops[frame.DropNotRouted] >= 2 {
			break
		}
	}
	if f.HostControl < 2 || f.Drops[frame.DropNotRouted] != uint64(len(groups)) || f.Drops.Total() != f.Drops[frame.DropNotRouted] {
		t.Errorf("host control %d, drops %v; want the MLD and IGMP reports as host control (2 or more) and the %d datagrams alone dropped, as not routed",
			f.HostControl, f.Drops, len(groups))
	}
}
