package dataplane

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/dataplane/xsk"
	"github.com/gsoplane/gsoplane/internal/netlab"
	"github.com/gsoplane/gsoplane/internal/nexthop"
)

// TestGatewayLinkFlap takes the NIC down and up again under a TCP stream:
// the gateway keeps running (a down link is not an error), holds what it
// cannot send, and the stream finishes with every byte intact.
func TestGatewayLinkFlap(t *testing.T) {
	lab := newGwLab(t, GatewayConfig{})
	nic := lab.A.LinkT(t, netlab.NICA)
	flapped := make(chan error, 1)
	go func() {
		time.Sleep(150 * time.Millisecond) // the stream is under way
		err := lab.A.Netlink().LinkSetDown(nic)
		time.Sleep(300 * time.Millisecond)
		flapped <- errors.Join(err, lab.A.Netlink().LinkSetUp(nic))
	}()
	tcpTransfer(t, lab, labSrv4, 256<<20, false)
	netlab.Must(t, <-flapped)
	st := lab.g.Stats()
	t.Logf("NIC %+v, forward drops %v, kicks retried %d", st.NIC, st.Forward.Drops, st.Port.Sockets[0].KickRetries+st.Port.Sockets[1].KickRetries)
	if st.NIC.Downs != 1 || !st.NIC.Up {
		t.Errorf("NIC stats %+v: want one down, and up now", st.NIC)
	}
	if lost(st.Forward.Drops) != 0 {
		t.Errorf("the gateway dropped %v while the link was down", st.Forward.Drops)
	}
	if err := lab.stop(); err != nil {
		t.Fatalf("the gateway failed: %v", err)
	}
}

// TestGatewayDetached detaches the gateway's XDP program from outside (as
// bpftool link detach does): by default the gateway attaches it again
// and traffic from the NIC flows; with DetachStop, Run stops with an
// error saying so.
func TestGatewayDetached(t *testing.T) {
	t.Run("reattach", func(t *testing.T) {
		lab := newGwLab(t, GatewayConfig{})
		detachOutside(t, lab)
		deadline := time.Now().Add(3 * attachCheckEvery)
		for lab.g.Stats().NIC.Reattaches == 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		tcpTransfer(t, lab, labSrv4, 8<<20, true) // B to A: through the XDP program
		if st := lab.g.Stats().NIC; st.Detaches != 1 || st.Reattaches != 1 || !st.Attached {
			t.Errorf("NIC stats %+v: want one detach, one reattach", st)
		}
	})
	t.Run("stop", func(t *testing.T) {
		lab := newGwLab(t, GatewayConfig{DisableGRO: true, OnDetach: DetachStop})
		detachOutside(t, lab)
		select {
		case err := <-lab.done:
			if !errors.Is(err, xsk.ErrDetached) {
				t.Errorf("Run = %v, want an error wrapping ErrDetached", err)
			}
			lab.done <- nil // for the cleanup's stop
		case <-time.After(3 * attachCheckEvery):
			t.Fatal("the gateway did not stop")
		}
	})
}

// detachOutside detaches the gateway's XDP link by its ID, from another
// handle, as another tool would.
func detachOutside(t *testing.T, lab *gwLab) {
	t.Helper()
	id := lab.A.LinkT(t, netlab.NICA).Attrs().Xdp.ProgId
	it := new(link.Iterator)
	defer it.Close()
	for it.Next() {
		info, err := it.Link.Info()
		if err == nil && info.Program == ebpf.ProgramID(id) && info.XDP() != nil {
			netlab.Must(t, it.Link.Detach())
			return
		}
	}
	t.Fatalf("no BPF link holds XDP program %d (%v)", id, it.Err())
}

// labRouters are the gateway's addresses on the TUN's link in the lab:
// the source of its ICMP errors.
var labRouters = []netip.Addr{netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("2001:2:0:1::2")}

// TestGatewayUnresolved sends to a destination whose neighbour never
// answers beside a running TCP stream: the stream never waits for it
// (the gateway holds its batch for at most nexthop.HoldTime), the frames
// to it are dropped and counted as unresolved, not as sent, and once the
// kernel gives up its sender gets ICMP host unreachable, as from a
// router.
func TestGatewayUnresolved(t *testing.T) {
	lab := newGwLab(t, GatewayConfig{RouterAddrs: labRouters})
	netlab.Must(t, lab.A.AddRoute("198.19.5.0/24", labTUN, "")) // into the TUN; on gw-a nobody answers for it
	dead := lab.dial(t, "udp", netip.MustParseAddr("198.19.5.7"), 9)
	defer dead.Close()
	// Host unreachable is a soft error: a UDP socket hears of it only
	// with IP_RECVERR, as from a kernel router.
	setSockopt(t, dead.(*net.UDPConn), unix.IPPROTO_IP, unix.IP_RECVERR, 1)
	unreachable := make(chan time.Duration, 1)
	stop := make(chan struct{})
	go func() { // one datagram every 20 ms until the ICMP error comes back
		start := time.Now()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := dead.Write(make([]byte, 100)); errors.Is(err, syscall.EHOSTUNREACH) {
				unreachable <- time.Since(start)
				return
			}
		}
	}()
	gap := tcpMaxGap(t, lab, labSrv4, 5*time.Second)
	close(stop)
	var took time.Duration
	select {
	case took = <-unreachable:
	case <-time.After(10 * time.Second):
		st := lab.g.Stats()
		t.Fatalf("the sender to the dead destination got no host unreachable: drops %v, ICMP %+v", st.Forward.Drops, st.Replies)
	}
	st := lab.g.Stats()
	t.Logf("longest wait of the stream %v; host unreachable after %v; drops %v, ICMP %+v", gap, took, st.Forward.Drops, st.Replies)
	// The dead next hop may hold the stream's sink once (if they share a
	// queue), for nexthop.HoldTime; a second more is the loaded machine's.
	if gap > nexthop.HoldTime+time.Second {
		t.Errorf("the stream waited %v: the dead next hop stalled it beyond its hold", gap)
	}
	if st.Forward.Drops[pipeline.DropUnresolved] == 0 || st.Replies.Sent == 0 {
		t.Errorf("drops %v, ICMP %+v: want unresolved drops and host unreachable sent", st.Forward.Drops, st.Replies)
	}
	netlab.Must(t, lab.stop())
	st = lab.g.Stats()
	sinkDrops := st.Forward.Drops[pipeline.DropUnresolved] + st.Forward.Drops[pipeline.DropNotRouted]
	if st.Port.Sent+sinkDrops != st.Forward.Transmitted {
		t.Errorf("sent %d + dropped by the sinks %d != taken by the sinks %d: a dropped frame counted as sent", st.Port.Sent, sinkDrops, st.Forward.Transmitted)
	}
}

// tcpMaxGap streams from A to B for d and returns the longest time the
// receiver waited for data.
func tcpMaxGap(t *testing.T, lab *gwLab, srv netip.Addr, d time.Duration) time.Duration {
	t.Helper()
	ln, _ := lab.listen(t, "tcp", srv, 5203)
	defer ln.Close()
	conn := lab.dial(t, "tcp", srv, 5203)
	defer conn.Close()
	peer, err := ln.Accept()
	netlab.Must(t, err)
	defer peer.Close()
	gapc := make(chan time.Duration, 1)
	go func() {
		var gap time.Duration
		buf := make([]byte, 1<<20)
		last := time.Now()
		for {
			_, err := peer.Read(buf)
			gap, last = max(gap, time.Since(last)), time.Now()
			if err != nil {
				gapc <- gap
				return
			}
		}
	}()
	buf := make([]byte, 256<<10)
	for end := time.Now().Add(d); time.Now().Before(end); {
		if _, err := conn.Write(buf); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	conn.(*net.TCPConn).CloseWrite()
	return <-gapc
}

// TestGatewayMTU lowers the NIC's MTU under the gateway: the TUN device's
// MTU follows it down and back up, TCP streams go on intact, and a packet
// that no longer fits is dropped and answered with fragmentation needed
// (IPv4, DF set) or packet too big (IPv6), which the sender's kernel
// learns the path MTU from.
func TestGatewayMTU(t *testing.T) {
	lab := newGwLab(t, GatewayConfig{RouterAddrs: labRouters})
	setMTU := func(ns *netlab.NS, name string, mtu int) {
		t.Helper()
		netlab.Must(t, ns.Netlink().LinkSetMTU(ns.LinkT(t, name), mtu))
	}
	waitTUN := func(mtu int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for lab.g.Stats().NIC.TUNMTU != mtu && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if st := lab.g.Stats().NIC; st.TUNMTU != mtu || lab.A.LinkT(t, labTUN).Attrs().MTU != mtu {
			t.Fatalf("NIC %+v, TUN device's MTU %d: want %d", st, lab.A.LinkT(t, labTUN).Attrs().MTU, mtu)
		}
	}
	setMTU(lab.B, netlab.NICB, 1280)
	setMTU(lab.A, netlab.NICA, 1280)
	waitTUN(1280)
	tcpTransfer(t, lab, labSrv4, 32<<20, false)
	tcpTransfer(t, lab, labSrv6, 32<<20, false)

	// Undo the TUN device's MTU by hand: the host sends what the NIC
	// cannot take, and the gateway answers as a router.
	setMTU(lab.A, labTUN, 1500)
	for _, srv := range []netip.Addr{labSrv4, labSrv6} {
		if got := learnedMTU(t, lab, srv); got != 1280 {
			t.Errorf("%v: the sender's path MTU is %d after a 1400-byte datagram, want 1280", srv, got)
		}
	}
	st := lab.g.Stats()
	t.Logf("NIC %+v, drops %v, ICMP %+v", st.NIC, st.Forward.Drops, st.Replies)
	if st.Forward.Drops[pipeline.DropTooBig] < 2 || st.Replies.Sent < 2 {
		t.Errorf("drops %v, ICMP %+v: want the datagrams dropped as too big and answered", st.Forward.Drops, st.Replies)
	}
	setMTU(lab.A, netlab.NICA, 1500)
	waitTUN(1500)
	if st := lab.g.Stats().NIC; st.MTUChanges != 2 || st.MTU != 1500 {
		t.Errorf("NIC %+v: want two MTU changes, back at 1500", st)
	}
}

// learnedMTU sends a 1400-byte UDP datagram that must not be fragmented
// from A to srv and returns the path MTU A's kernel then has for srv.
func learnedMTU(t *testing.T, lab *gwLab, srv netip.Addr) int {
	t.Helper()
	c := lab.dial(t, "udp", srv, 9).(*net.UDPConn)
	defer c.Close()
	level, opt, mtuOpt, do := unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_MTU, unix.IP_PMTUDISC_DO
	if srv.Is6() {
		level, opt, mtuOpt, do = unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_MTU, unix.IPV6_PMTUDISC_DO
	}
	setSockopt(t, c, level, opt, do)
	raw, err := c.SyscallConn()
	netlab.Must(t, err)
	mtu := 0
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		c.Write(make([]byte, 1400-28)) // EMSGSIZE once the kernel knows
		raw.Control(func(fd uintptr) { mtu, err = unix.GetsockoptInt(int(fd), level, mtuOpt) })
		netlab.Must(t, err)
		if mtu < 1500 {
			break
		}
	}
	return mtu
}
