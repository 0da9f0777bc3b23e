package dataplane

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/gsoplane/gsoplane/dataplane/afpacket"
	"github.com/gsoplane/gsoplane/dataplane/tun"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
	"github.com/gsoplane/gsoplane/segment"
)

// Overlay addresses of TestGatewayVXLAN: a VXLAN device in A over the
// TUN's address, its peer in B over the server's.
var (
	ovlA = netip.MustParseAddr("198.18.201.1")
	ovlB = netip.MustParseAddr("198.18.201.2")
)

// TestGatewayVXLAN moves SHA-256-checked TCP streams both ways through a
// VXLAN overlay whose underlay is the gateway (every port: AF_PACKET in
// each GSO mode, AF_XDP with and without TX checksum offload, and the
// default): with the TUN's UDP-tunnel offloads (Linux 6.17) the kernel
// hands the gateway whole VXLAN super-packets, which it cuts, with no
// drops.
func TestGatewayVXLAN(t *testing.T) {
	netlab.SkipWithout(t, netlab.VirtioNetTunnel)
	ports := []struct {
		name string
		cfg  GatewayConfig
	}{
		{"auto", GatewayConfig{}},
		{"xdp", GatewayConfig{Port: PortXDP}},
		{"xdp/no-csum", GatewayConfig{Port: PortXDP, XDP: XDPOptions{DisableTXChecksum: true}}},
	}
	for _, mode := range []afpacket.GSOMode{afpacket.GSOModeOffload, afpacket.GSOModePartial, afpacket.GSOModeFull} {
		port := labPort{kind: PortPacket, gso: mode}
		ports = append(ports, struct {
			name string
			cfg  GatewayConfig
		}{"packet/" + mode.String(), port.config(GatewayConfig{})})
	}
	for _, port := range ports {
		t.Run(port.name, func(t *testing.T) {
			lab := newGwLab(t, port.cfg)
			if o, h := lab.g.tun.Offloads(), lab.g.tun.HeaderSize(); !o.Has(tun.OffloadUDPTunnel|tun.OffloadUDPTunnelCsum) || h != segment.HeaderSizeTunnel {
				t.Fatalf("TUN offloads %v, header %d: want the tunnel offloads and header", o, h)
			}
			addVXLAN(t, lab.A, netlab.App4, labSrv4, ovlA)
			addVXLAN(t, lab.B, labSrv4, netlab.App4, ovlB)
			for _, toA := range []bool{false, true} {
				d := netlab.TCPTransfer(t, lab.A, lab.B, netip.AddrPortFrom(ovlB, 5201), 16<<20, toA)
				t.Logf("to A %v: 16 MiB in %v", toA, d.Round(time.Millisecond))
			}
			st := lab.settledStats()
			t.Logf("forward %+v\nreturn %+v", st.Forward, st.Return)
			if lost(st.Forward.Drops) != 0 || st.Return.Drops.Total() != 0 {
				t.Errorf("the gateway dropped: forward %v, return %v", st.Forward.Drops, st.Return.Drops)
			}
			if st.Forward.Segments <= st.Forward.SuperPackets {
				t.Errorf("%d segments from %d super-packets: no tunnel super-packet was cut", st.Forward.Segments, st.Forward.SuperPackets)
			}
		})
	}
}

// addVXLAN adds a VXLAN device in ns from local to remote with the
// overlay address ovl/24 and brings it up; its MTU leaves room for the
// 50 bytes of VXLAN over IPv4 in the underlay's 1500.
func addVXLAN(t *testing.T, ns *netlab.NS, local, remote, ovl netip.Addr) {
	t.Helper()
	vx := &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: "vx0", MTU: 1450}, VxlanId: 7, SrcAddr: net.IP(local.AsSlice()),
		Group: net.IP(remote.AsSlice()), Port: 4789, UDPCSum: true}
	netlab.Must(t, ns.Netlink().LinkAdd(vx))
	netlab.Must(t, ns.LinkUp("vx0"))
	netlab.Must(t, ns.AddAddr("vx0", netip.PrefixFrom(ovl, 24).String()))
}
