package xsk

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// TestReattach: a BPF link detached from outside (as bpftool link detach
// does) is noticed by Attached, and Reattach puts the program back: the
// redirected traffic flows again.
func TestReattach(t *testing.T) {
	n := newXDPNet(t)
	p := n.open(t, xdpTestConfig())
	if ok, err := p.Attached(); !ok || err != nil {
		t.Fatalf("Attached after Open: %v, %v", ok, err)
	}
	info, err := p.prog.lnk.Info()
	if err != nil {
		t.Fatal(err)
	}
	outside, err := link.NewFromID(info.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer outside.Close()
	if err := outside.Detach(); err != nil {
		t.Fatalf("detach from outside: %v", err)
	}
	if ok, err := p.Attached(); ok || err != nil {
		t.Fatalf("Attached after an outside detach: %v, %v", ok, err)
	}
	if attached, _ := n.xdpAttached(t); attached {
		t.Fatal("the interface still reports an XDP program")
	}
	if err := p.Reattach(); err != nil {
		t.Fatalf("Reattach: %v", err)
	}
	if ok, err := p.Attached(); !ok || err != nil {
		t.Fatalf("Attached after Reattach: %v, %v", ok, err)
	}
	n.echo(t) // resolves the peer's neighbours through the kernel
	c := xdpDialUDP(t, n.peer, netip.MustParseAddrPort("198.18.200.9:9100"))
	xdpCollect(t, p, []*net.UDPConn{c}, 16) // redirected traffic reaches the sockets again
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Attached(); !errors.Is(err, ErrClosed) {
		t.Errorf("Attached after Close: %v", err)
	}
	if attached, id := n.xdpAttached(t); attached {
		t.Errorf("program %d left after Close", id)
	}
}

// TestFollowMAC: after the interface's MAC address changed, FollowMAC
// swaps the program loaded for the new address in through the same BPF
// link, which is never closed, and the frames the peer sends to the new
// address are redirected to the sockets.
func TestFollowMAC(t *testing.T) {
	n := newXDPNet(t)
	p := n.open(t, xdpTestConfig())
	before, err := p.prog.lnk.Info()
	if err != nil {
		t.Fatal(err)
	}
	_, old := n.xdpAttached(t)
	mac := net.HardwareAddr{0x02, 0x00, 0x5e, 0x47, 0x53, 0x4f}
	netlab.Must(t, n.gw.Netlink().LinkSetHardwareAddr(n.gw.LinkT(t, xdpIfA), mac))
	if err := p.FollowMAC(mac); err != nil {
		t.Fatalf("FollowMAC: %v", err)
	}
	after, err := p.prog.lnk.Info()
	if err != nil {
		t.Fatal(err)
	}
	if attached, id := n.xdpAttached(t); !attached || id == old || after.ID != before.ID {
		t.Fatalf("program %d (attached %v) through link %d: want a new program in place of %d through link %d", id, attached, after.ID, old, before.ID)
	}
	peer := n.peer.LinkT(t, xdpIfB).Attrs().Index
	for _, a := range []string{xdpGW4, xdpGW6} {
		neigh := &netlink.Neigh{LinkIndex: peer, IP: net.ParseIP(a), HardwareAddr: mac, State: netlink.NUD_PERMANENT}
		netlab.Must(t, n.peer.Netlink().NeighSet(neigh))
	}
	c := xdpDialUDP(t, n.peer, netip.MustParseAddrPort("198.18.200.9:9100"))
	xdpCollect(t, p, []*net.UDPConn{c}, 16)
}

// TestNativeRefusedByVirtioNet: on a virtio-net NIC that cannot turn the
// host's receive offloads off (make test-kernels -nic-props
// ctrl_guest_offloads=off), native mode fails naming that cause, and
// ModeAuto falls back to generic mode. Where native mode attaches, the
// cause is not named.
func TestNativeRefusedByVirtioNet(t *testing.T) {
	tp := netlab.NewTopologyOnNICsT(t, "xsk-virtio")
	tp.A.Do(t, func() {
		p, err := Open(Config{Ifname: netlab.NICA, Mode: ModeNative})
		if err == nil {
			p.Close()
			if why := nativeRefusal(netlab.NICA); why != "" {
				t.Errorf("native XDP attached, yet the refusal is named: %s", why)
			}
			t.Skip("native XDP attaches (make test-kernels -nic-props ctrl_guest_offloads=off makes a NIC that refuses it)")
		}
		if !strings.Contains(err.Error(), "virtio_net refuses native XDP") {
			t.Fatalf("native mode: %v, want the virtio_net refusal named", err)
		}
		p, err = Open(Config{Ifname: netlab.NICA, Mode: ModeAuto})
		if err != nil {
			t.Fatalf("auto mode: %v", err)
		}
		defer p.Close()
		if p.Mode() != ModeGeneric {
			t.Errorf("auto mode attached %v, want generic", p.Mode())
		}
	})
}
