package icmperr

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

func TestMain(m *testing.M) { os.Exit(netlab.Main(m)) }

// TestKernelLearnsPathMTU hands the kernel the errors Build writes, as
// the gateway does through its TUN device: a host routes a prefix into a
// TUN device, sends a datagram with DF from a connected UDP socket, and
// gets back fragmentation needed (IPv4) or packet too big (IPv6) from a
// router on the TUN link. The kernel must check the error, find the
// socket from the quoted headers and learn the path MTU: the socket's
// IP_MTU / IPV6_MTU, the route's cached MTU, and EMSGSIZE for the next
// datagram too big.
func TestKernelLearnsPathMTU(t *testing.T) {
	h := netlab.NewT(t, "pmtu")
	tun := openTUN(t, h, "pmtu0")
	for _, step := range []func() error{
		func() error { return h.LinkUp("pmtu0") },
		func() error { return h.AddAddr("pmtu0", "198.18.121.1/24") },
		func() error { return h.AddAddr("pmtu0", "2001:2:0:121::1/64") },
		func() error { return h.AddRoute("198.19.121.0/24", "pmtu0", "") },
		func() error { return h.AddRoute("2001:2:0:122::/64", "pmtu0", "") },
	} {
		netlab.Must(t, step())
	}
	for _, tc := range []struct {
		name          string
		family, level int
		discover, mtu int // socket options
		dst, router   netip.Addr
		pathMTU       int
	}{
		{"fragmentation needed", unix.AF_INET, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_MTU,
			netip.MustParseAddr("198.19.121.5"), netip.MustParseAddr("198.18.121.2"), 1200},
		{"packet too big", unix.AF_INET6, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_MTU,
			netip.MustParseAddr("2001:2:0:122::5"), netip.MustParseAddr("2001:2:0:121::2"), 1300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fd := h.SocketT(t, tc.family, unix.SOCK_DGRAM)
			netlab.Must(t, os.NewSyscallError("setsockopt", unix.SetsockoptInt(fd, tc.level, tc.discover, unix.IP_PMTUDISC_DO)))
			netlab.Must(t, os.NewSyscallError("connect", unix.Connect(fd, sockaddr(tc.dst, 9))))
			if _, err := unix.Write(fd, make([]byte, 1400)); err != nil {
				t.Fatalf("send 1400 bytes with DF: %v", err)
			}
			orig := readTo(t, tun, tc.dst)
			e := make([]byte, MaxLen)
			n := Build(e, orig, tc.router, TooBig, tc.pathMTU)
			if n == 0 {
				t.Fatalf("no error for %x", orig[:40])
			}
			if _, err := tun.Write(e[:n]); err != nil {
				t.Fatalf("write the error into the TUN device: %v", err)
			}
			waitMTU(t, fd, tc.level, tc.mtu, tc.pathMTU)
			if rs, err := h.Netlink().RouteGet(tc.dst.AsSlice()); err != nil || len(rs) == 0 || rs[0].MTU != tc.pathMTU {
				t.Errorf("route to %v: %+v, %v; want the cached MTU %d", tc.dst, rs, err, tc.pathMTU)
			}
			if _, err := unix.Write(fd, make([]byte, 1400)); !errors.Is(err, unix.EMSGSIZE) {
				t.Errorf("send 1400 bytes again: %v, want EMSGSIZE", err)
			}
		})
	}
}

// TestSameAsKernel: the host unreachable Build writes is the kernel's, byte
// for byte but for what the kernel draws at random (the IPv4
// identification and so the header checksum, the IPv6 flow label). A
// router namespace forwards datagrams from a sender to a next hop that
// never answers (one 100 ms probe); its kernel answers the sender, and
// Build answers the datagram as the router received and forwarded it
// (TTL or hop limit one less).
func TestSameAsKernel(t *testing.T) {
	snd, rtr := netlab.NewT(t, "icmpk"), netlab.NewT(t, "icmpk")
	for _, step := range []func() error{
		func() error { return rtr.Sysctl("net/ipv6/conf/default/accept_dad", "0") },
		func() error { return netlab.AddVeth(snd, "ik-s", rtr, "ik-r", 0) },
		func() error { return netlab.AddVeth(rtr, "ik-n", rtr, "ik-np", 0) }, // the next hop's link: nobody there
		func() error { return snd.AddAddr("ik-s", "198.18.122.1/24") },
		func() error { return snd.AddAddr("ik-s", "2001:2:0:122::1/64") },
		func() error { return rtr.AddAddr("ik-r", "198.18.122.2/24") },
		func() error { return rtr.AddAddr("ik-r", "2001:2:0:122::2/64") },
		func() error { return rtr.AddAddr("ik-n", "198.19.122.1/24") },
		func() error { return rtr.AddAddr("ik-n", "2001:2:0:123::1/64") },
		func() error { return snd.AddRoute("198.19.122.0/24", "ik-s", "198.18.122.2") },
		func() error { return snd.AddRoute("2001:2:0:123::/64", "ik-s", "2001:2:0:122::2") },
		func() error { return rtr.Sysctl("net/ipv4/ip_forward", "1") },
		func() error { return rtr.Sysctl("net/ipv6/conf/all/forwarding", "1") },
		func() error { return rtr.Sysctl("net/ipv4/neigh/ik-n/mcast_solicit", "1") },
		func() error { return rtr.Sysctl("net/ipv4/neigh/ik-n/retrans_time_ms", "100") },
		func() error { return rtr.Sysctl("net/ipv6/neigh/ik-n/mcast_solicit", "1") },
		func() error { return rtr.Sysctl("net/ipv6/neigh/ik-n/retrans_time_ms", "100") },
	} {
		netlab.Must(t, step())
	}
	for _, tc := range []struct {
		name              string
		family, level, tc int
		dst, router       netip.Addr
	}{
		{"host unreachable", unix.AF_INET, unix.IPPROTO_IP, unix.IP_TOS,
			netip.MustParseAddr("198.19.122.5"), netip.MustParseAddr("198.18.122.2")},
		{"address unreachable", unix.AF_INET6, unix.IPPROTO_IPV6, unix.IPV6_TCLASS,
			netip.MustParseAddr("2001:2:0:123::5"), netip.MustParseAddr("2001:2:0:122::2")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			received := capture(t, rtr, "ik-r", tc.dst, false) // what the router gets
			answered := capture(t, snd, "ik-s", tc.dst, true)  // the kernel's error for it
			fd := snd.SocketT(t, tc.family, unix.SOCK_DGRAM)
			netlab.Must(t, os.NewSyscallError("setsockopt", unix.SetsockoptInt(fd, tc.level, tc.tc, 0xb9)))
			netlab.Must(t, os.NewSyscallError("sendto", unix.Sendto(fd, make([]byte, 700), 0, sockaddr(tc.dst, 9))))
			orig, kernel := <-received, <-answered
			if orig == nil || kernel == nil {
				t.Fatalf("captured the datagram: %v, the kernel's error: %v", orig != nil, kernel != nil)
			}
			forwarded(orig)
			e := make([]byte, MaxLen)
			e = e[:Build(e, orig, tc.router, Unreachable, 0)]
			if same, what := sameError(e, kernel); !same {
				t.Errorf("%s differ:\nours   %x\nkernel %x", what, e, kernel)
			}
		})
	}
}

// capture returns a channel that gets the first packet arriving at (or,
// if errors, the first ICMP or ICMPv6 error leaving for a packet to) dst
// on the link called name in ns, or nil after 5 s.
func capture(t *testing.T, ns *netlab.NS, name string, dst netip.Addr, errors bool) <-chan []byte {
	t.Helper()
	fd := ns.SocketT(t, unix.AF_PACKET, unix.SOCK_DGRAM)
	ifindex := ns.LinkT(t, name).Attrs().Index
	netlab.Must(t, os.NewSyscallError("bind", unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex})))
	tv := unix.NsecToTimeval((5 * time.Second).Nanoseconds())
	netlab.Must(t, os.NewSyscallError("setsockopt", unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)))
	c := make(chan []byte, 1)
	go func() {
		b := make([]byte, 2048)
		for {
			n, _, err := unix.Recvfrom(fd, b, 0)
			if err != nil {
				c <- nil
				return
			}
			if p := b[:n]; wanted(p, dst, errors) {
				c <- append([]byte(nil), p...)
				return
			}
		}
	}()
	return c
}

// wanted reports whether p is a packet to dst, or an error quoting one.
func wanted(p []byte, dst netip.Addr, errors bool) bool {
	inner := p
	switch {
	case len(p) >= hdrs4+header.IPv4MinimumSize && p[0]>>4 == 4 && errors:
		if header.IPv4(p).Protocol() != uint8(header.ICMPv4ProtocolNumber) {
			return false
		}
		inner = p[hdrs4:]
	case len(p) >= hdrs6+header.IPv6MinimumSize && p[0]>>4 == 6 && errors:
		if header.IPv6(p).NextHeader() != uint8(header.ICMPv6ProtocolNumber) || p[header.IPv6MinimumSize] >= 128 {
			return false
		}
		inner = p[hdrs6:]
	}
	switch {
	case len(inner) >= header.IPv4MinimumSize && inner[0]>>4 == 4:
		return header.IPv4(inner).DestinationAddress().As4() == dst.As4() && dst.Is4()
	case len(inner) >= header.IPv6MinimumSize && inner[0]>>4 == 6:
		return header.IPv6(inner).DestinationAddress().As16() == dst.As16() && dst.Is6()
	}
	return false
}

// forwarded makes a received packet the one a router forwards: TTL or
// hop limit one less, the IPv4 header checksum updated.
func forwarded(p []byte) {
	if p[0]>>4 == 6 {
		ip := header.IPv6(p)
		ip.SetHopLimit(ip.HopLimit() - 1)
		return
	}
	ip := header.IPv4(p)
	ip.SetTTL(ip.TTL() - 1)
	ip.SetChecksum(0)
	ip.SetChecksum(^ip.CalculateChecksum())
}

// sameError compares two errors but for the fields the kernel draws at
// random, and says which part differs.
func sameError(ours, kernel []byte) (bool, string) {
	switch {
	case len(ours) != len(kernel):
		return false, "lengths"
	case len(ours) == 0:
		return false, "nothing built:"
	case ours[0]>>4 == 4 && (!bytes.Equal(ours[:4], kernel[:4]) || !bytes.Equal(ours[6:10], kernel[6:10])):
		return false, "IPv4 headers"
	case ours[0]>>4 == 4:
		return bytes.Equal(ours[12:], kernel[12:]), "addresses or ICMP messages"
	case ours[0] != kernel[0] || ours[1]>>4 != kernel[1]>>4:
		return false, "traffic classes"
	}
	return bytes.Equal(ours[4:], kernel[4:]), "IPv6 headers or ICMPv6 messages"
}

// htons converts a 16-bit protocol number to network byte order.
func htons(v uint16) uint16 { return v<<8 | v>>8 }

// openTUN creates a TUN device (IFF_TUN, no packet information) in ns and
// returns it, non-blocking through the runtime's poller; it is closed in
// t.Cleanup.
func openTUN(t *testing.T, ns *netlab.NS, name string) *os.File {
	t.Helper()
	var fd int
	netlab.Must(t, ns.Run(func() (err error) {
		if fd, err = unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0); err != nil {
			return os.NewSyscallError("open /dev/net/tun", err)
		}
		ifr, err := unix.NewIfreq(name)
		if err == nil {
			ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
			err = os.NewSyscallError("TUNSETIFF", unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr))
		}
		if err != nil {
			unix.Close(fd)
		}
		return err
	}))
	f := os.NewFile(uintptr(fd), name)
	t.Cleanup(func() { f.Close() })
	return f
}

// readTo reads packets from the TUN device until one to dst comes.
func readTo(t *testing.T, tun *os.File, dst netip.Addr) []byte {
	t.Helper()
	netlab.Must(t, tun.SetReadDeadline(time.Now().Add(5*time.Second)))
	b := make([]byte, 2048)
	for {
		n, err := tun.Read(b)
		if err != nil {
			t.Fatalf("waiting for the datagram to %v in the TUN device: %v", dst, err)
		}
		p := b[:n]
		switch {
		case dst.Is4() && n >= header.IPv4MinimumSize && header.IPv4(p).DestinationAddress().As4() == dst.As4():
			return p
		case dst.Is6() && n >= header.IPv6MinimumSize && header.IPv6(p).DestinationAddress().As16() == dst.As16():
			return p
		}
	}
}

// waitMTU waits for the socket's path MTU (getsockopt level/opt) to be
// want.
func waitMTU(t *testing.T, fd, level, opt, want int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		mtu, err := unix.GetsockoptInt(fd, level, opt)
		if err == nil && mtu == want {
			t.Logf("the kernel learned path MTU %d", mtu)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("path MTU %d, %v; want %d", mtu, err, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// sockaddr returns a socket address for a and port.
func sockaddr(a netip.Addr, port int) unix.Sockaddr {
	if a.Is4() {
		return &unix.SockaddrInet4{Addr: a.As4(), Port: port}
	}
	return &unix.SockaddrInet6{Addr: a.As16(), Port: port}
}
