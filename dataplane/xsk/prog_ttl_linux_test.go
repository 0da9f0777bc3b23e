package xsk

import (
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// progTUN creates the TUN device name (IFF_TUN | IFF_NO_PI) in ns and
// returns it, non-blocking, closed in t.Cleanup (which removes the
// device). The test uses its own, so that this package does not import
// the TUN port.
func progTUN(t *testing.T, ns *netlab.NS, name string) *os.File {
	t.Helper()
	var f *os.File
	ns.Do(t, func() {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		netlab.Must(t, os.NewSyscallError("open /dev/net/tun", err))
		ifr, err := unix.NewIfreq(name)
		netlab.Must(t, err)
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			t.Fatalf("TUNSETIFF %s: %v", name, err)
		}
		f = os.NewFile(uintptr(fd), "/dev/net/tun")
	})
	t.Cleanup(func() { f.Close() })
	return f
}

// progICMP opens a raw ICMP (ICMPv6) socket in ns, non-blocking, closed
// in t.Cleanup: it sees every ICMP message ns receives.
func progICMP(t *testing.T, ns *netlab.NS, v6 bool) *os.File {
	t.Helper()
	family, proto := unix.AF_INET, unix.IPPROTO_ICMP
	if v6 {
		family, proto = unix.AF_INET6, unix.IPPROTO_ICMPV6
	}
	var fd int
	err := ns.Run(func() (err error) {
		fd, err = unix.Socket(family, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, proto)
		return os.NewSyscallError("socket", err)
	})
	netlab.Must(t, err)
	f := os.NewFile(uintptr(fd), "icmp")
	t.Cleanup(func() { f.Close() })
	return f
}

// progRead reads one packet from f with a deadline and returns it and
// its source address (for sockets); nil on timeout.
func progRead(t *testing.T, f *os.File, wait time.Duration) ([]byte, netip.Addr) {
	t.Helper()
	buf := make([]byte, 2048)
	f.SetReadDeadline(time.Now().Add(wait))
	raw, err := f.SyscallConn()
	netlab.Must(t, err)
	var n int
	var from unix.Sockaddr
	var rerr error
	err = raw.Read(func(fd uintptr) bool {
		n, from, rerr = unix.Recvfrom(int(fd), buf, 0)
		if rerr == unix.ENOTSOCK { // the TUN device
			n, rerr = unix.Read(int(fd), buf)
		}
		return rerr != unix.EAGAIN
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		if os.IsTimeout(err) {
			return nil, netip.Addr{}
		}
		t.Fatalf("read %s: %v", f.Name(), err)
	}
	var src netip.Addr
	switch sa := from.(type) {
	case *unix.SockaddrInet4:
		src = netip.AddrFrom4(sa.Addr)
	case *unix.SockaddrInet6:
		src = netip.AddrFrom16(sa.Addr)
	}
	return buf[:n], src
}

// TestXDPReturnPathTTL shows what happens to the TTL (hop limit) of a
// packet coming back from the NIC: the XDP program and the socket hand
// it over unchanged, TTL 1 included, and the gateway writes it into the
// TUN device as it is; the host's kernel then decides as for any packet
// arriving on an interface. Here the test is the gateway's return path
// (socket → strip Ethernet → TUN), with forwarding on:
//   - TTL 1 to an address behind the TUN device: the kernel does not
//     forward it (ip_forward / ip6_forward: TTL <= 1) and answers the
//     sender with ICMP time exceeded (ICMPv6 type 3), quoting TTL 1; the
//     IPv4 one comes from the address of the route back (here the NIC's),
//     the IPv6 one from the TUN device's, where the packet came in;
//   - TTL 2 to the same address: forwarded, back out of the TUN device,
//     with TTL 1 (the kernel decrements it, once);
//   - TTL 1 to the TUN device's own address: delivered locally (no TTL
//     check on local delivery).
func TestXDPReturnPathTTL(t *testing.T) {
	l := newProgLab(t)
	const tunName = "pt0"
	tun := progTUN(t, l.gw, tunName)
	tunAddr4, tunAddr6 := netip.MustParseAddr("198.18.200.1"), netip.MustParseAddr("2001:2:0:200::1")
	for _, err := range []error{
		l.gw.Sysctl("net/ipv4/ip_forward", "1"),
		l.gw.Sysctl("net/ipv6/conf/all/forwarding", "1"),
		l.gw.Sysctl("net/ipv4/conf/all/rp_filter", "0"),
		l.gw.Sysctl("net/ipv4/conf/default/rp_filter", "0"),
		l.gw.LinkUp(tunName),
		l.gw.Sysctl("net/ipv4/conf/"+tunName+"/rp_filter", "0"),
		l.gw.AddAddr(tunName, tunAddr4.String()+"/24"),
		l.gw.AddAddr(tunName, tunAddr6.String()+"/64"),
	} {
		netlab.Must(t, err)
	}
	p := l.open(t, Config{NumFrames: 256, RingSize: 64, Redirect: progRedirect})
	t.Logf("XDP mode %v", p.Mode())
	// The return path: every frame the sockets get goes into the TUN
	// device without its Ethernet header; its hop limit is recorded.
	seen := make(chan [2]int, 64) // {IP version, TTL or hop limit}
	progPump(t, p, func(f []byte) {
		ip := f[xdpEthLen:]
		switch header.IPVersion(ip) {
		case header.IPv4Version:
			seen <- [2]int{4, int(header.IPv4(ip).TTL())}
		case header.IPv6Version:
			seen <- [2]int{6, int(header.IPv6(ip).HopLimit())}
		}
		if _, err := tun.Write(ip); err != nil {
			t.Errorf("write into the TUN device: %v", err)
		}
	})
	for _, fam := range []struct {
		v              int
		local, behind  netip.Addr
		icmpFrom       netip.Addr // the source the kernel picks for the ICMP error
		timeExceeded   uint8
		ttlOpt, ttlLvl int
	}{
		{4, tunAddr4, netip.MustParseAddr("198.18.200.9"), netip.MustParseAddr(progNIC4), uint8(header.ICMPv4TimeExceeded), unix.IP_TTL, unix.IPPROTO_IP},
		{6, tunAddr6, netip.MustParseAddr("2001:2:0:200::9"), tunAddr6, uint8(header.ICMPv6TimeExceeded), unix.IPV6_UNICAST_HOPS, unix.IPPROTO_IPV6},
	} {
		icmp := progICMP(t, l.peer, fam.v == 6)
		listener := l.gw.ListenUDP(t, netip.AddrPortFrom(fam.local, 7200))
		send := func(dst netip.Addr, ttl int) {
			c := progDialUDP(t, l.peer, netip.AddrPortFrom(dst, 7200))
			raw, err := c.SyscallConn()
			netlab.Must(t, err)
			raw.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), fam.ttlLvl, fam.ttlOpt, ttl) })
			netlab.Must(t, err)
			_, err = c.Write([]byte("ttl test"))
			netlab.Must(t, err)
		}
		// readTUN returns the next packet to fam.behind the kernel sends
		// into the TUN device (there are others: IPv6 sends MLD reports
		// and router solicitations), or nil after wait.
		readTUN := func(wait time.Duration) []byte {
			for deadline := time.Now().Add(wait); time.Now().Before(deadline); {
				pkt, _ := progRead(t, tun, time.Until(deadline))
				switch {
				case pkt == nil:
					return nil
				case fam.v == 4 && header.IPVersion(pkt) == 4 && header.IPv4(pkt).IsValid(len(pkt)) &&
					header.IPv4(pkt).DestinationAddress().As4() == fam.behind.As4(),
					fam.v == 6 && header.IPVersion(pkt) == 6 && header.IPv6(pkt).IsValid(len(pkt)) &&
						header.IPv6(pkt).DestinationAddress().As16() == fam.behind.As16():
					return pkt
				}
			}
			return nil
		}
		gotTTL := func(want int) {
			t.Helper()
			select {
			case s := <-seen:
				if s != [2]int{fam.v, want} {
					t.Errorf("IPv%d: the socket got IPv%d with hop limit %d, want %d", fam.v, s[0], s[1], want)
				}
			case <-time.After(xdpWait):
				t.Fatalf("IPv%d: nothing reached the socket", fam.v)
			}
		}

		// TTL 1 behind the TUN device: ICMP time exceeded from the host.
		send(fam.behind, 1)
		gotTTL(1)
		var msg []byte
		var from netip.Addr
		for deadline := time.Now().Add(xdpWait); time.Now().Before(deadline); {
			if msg, from = progRead(t, icmp, time.Until(deadline)); msg == nil {
				break
			}
			if fam.v == 4 {
				msg = msg[header.IPv4(msg).HeaderLength():] // a raw IPv4 socket gets the IP header
			}
			if len(msg) >= 4 && msg[0] == fam.timeExceeded {
				break // (IPv6 brings neighbour discovery too)
			}
		}
		// The message quotes the packet as the kernel got it: TTL 1.
		var quotedTTL, quotedDst []byte
		switch {
		case fam.v == 4 && len(msg) >= 8+header.IPv4MinimumSize:
			quotedTTL, quotedDst = msg[8+8:8+9], msg[8+16:8+20]
		case fam.v == 6 && len(msg) >= 8+header.IPv6MinimumSize:
			quotedTTL, quotedDst = msg[8+7:8+8], msg[8+24:8+40]
		}
		if msg == nil || msg[0] != fam.timeExceeded || msg[1] != 0 || from != fam.icmpFrom ||
			string(quotedTTL) != "\x01" || string(quotedDst) != string(fam.behind.AsSlice()) {
			t.Errorf("IPv%d: TTL 1 to %v: no ICMP time exceeded from %v quoting it reached the sender (%x from %v)",
				fam.v, fam.behind, fam.icmpFrom, msg, from)
		} else {
			t.Logf("IPv%d: TTL 1 to %v: ICMP time exceeded (type %d code %d) from %v, quoting TTL %d", fam.v, fam.behind,
				msg[0], msg[1], from, quotedTTL[0])
		}
		if pkt := readTUN(50 * time.Millisecond); pkt != nil {
			t.Errorf("IPv%d: TTL 1 to %v was forwarded: %x", fam.v, fam.behind, pkt)
		}

		// TTL 2 behind the TUN device: forwarded with TTL 1.
		send(fam.behind, 2)
		gotTTL(2)
		pkt := readTUN(xdpWait)
		switch {
		case pkt == nil:
			t.Errorf("IPv%d: TTL 2 to %v was not forwarded", fam.v, fam.behind)
		case fam.v == 4 && header.IPv4(pkt).TTL() != 1, fam.v == 6 && header.IPv6(pkt).HopLimit() != 1:
			t.Errorf("IPv%d: TTL 2 to %v was forwarded with another TTL: %x", fam.v, fam.behind, pkt)
		}

		// TTL 1 to the TUN device's own address: delivered.
		send(fam.local, 1)
		gotTTL(1)
		listener.SetReadDeadline(time.Now().Add(xdpWait))
		buf := make([]byte, 64)
		if n, err := listener.Read(buf); err != nil || string(buf[:n]) != "ttl test" {
			t.Errorf("IPv%d: TTL 1 to %v (local) was not delivered: %q, %v", fam.v, fam.local, buf[:n], err)
		}
	}
}
