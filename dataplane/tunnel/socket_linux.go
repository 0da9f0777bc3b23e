package tunnel

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/dataplane/udp"
)

// pathMTU returns the path MTU of conn's route to its peer (IP_MTU,
// IPV6_MTU on a connected socket) and whether the socket is IPv6.
func pathMTU(conn *net.UDPConn) (mtu int, v6 bool, err error) {
	err = control(conn, func(fd int) error {
		domain, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
		if err != nil {
			return os.NewSyscallError("getsockopt SO_DOMAIN", err)
		}
		v6 = domain == unix.AF_INET6
		if v6 {
			mtu, err = unix.GetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU)
		} else {
			mtu, err = unix.GetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU)
		}
		if err != nil {
			return fmt.Errorf("not connected to the peer? %w", os.NewSyscallError("getsockopt IP_MTU", err))
		}
		return nil
	})
	return mtu, v6, err
}

// listenNetwork is the network to bind local on for peers: local's own
// family if it is a specified address; else the peers' family, or both
// ("udp": an IPv6 socket without IPV6_V6ONLY) if they have both.
func listenNetwork(local netip.Addr, peers *udp.Peers) string {
	if local.IsValid() && !local.IsUnspecified() {
		return "udp"
	}
	var v4, v6 bool
	for i := range peers.Len() {
		if peers.Peer(i).Endpoint.Addr().Is4() {
			v4 = true
		} else {
			v6 = true
		}
	}
	switch {
	case v4 && v6:
		return "udp"
	case v4:
		return "udp4"
	}
	return "udp6"
}

// setPeersMTU sets the inner MTU to the smallest that fits every peer's
// path, each with the outer header of its endpoint's family.
func (t *Tunnel) setPeersMTU() error {
	route, err := socketRoute(t.conn)
	if err != nil {
		return fmt.Errorf("tunnel: %w", err)
	}
	for i := range t.peers.Len() {
		ep := t.peers.Peer(i).Endpoint
		path, err := probeMTU(ep, route)
		if err != nil {
			return fmt.Errorf("tunnel: path MTU to peer %d (%v): %w", i, ep, err)
		}
		mtu := InnerMTU(path, ep.Addr().Is6(), t.cfg.Headroom, t.cfg.Tailroom)
		if mtu < 576 {
			return fmt.Errorf("tunnel: path MTU %d to peer %d (%v) leaves an inner MTU of %d, less than 576", path, i, ep, mtu)
		}
		if t.mtu == 0 || mtu < t.mtu {
			t.mtu = mtu
		}
	}
	return nil
}

// route is what decides the route of a socket's datagrams beside their
// destination: its local address, the device it is bound to and its
// firewall mark.
type route struct {
	local  netip.Addr
	device string
	mark   int
}

// socketRoute reads conn's route settings.
func socketRoute(conn *net.UDPConn) (r route, err error) {
	if a, ok := conn.LocalAddr().(*net.UDPAddr); ok {
		r.local = a.AddrPort().Addr().Unmap()
	}
	err = control(conn, func(fd int) error {
		var err error
		if r.device, err = unix.GetsockoptString(fd, unix.SOL_SOCKET, unix.SO_BINDTODEVICE); err != nil {
			return os.NewSyscallError("getsockopt SO_BINDTODEVICE", err)
		}
		r.mark, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_MARK)
		return os.NewSyscallError("getsockopt SO_MARK", err)
	})
	return r, err
}

// probeMTU reads the path MTU to ep from a short-lived socket connected
// to it, with the tunnel socket's route settings, and closes it.
func probeMTU(ep netip.AddrPort, r route) (int, error) {
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			if r.device != "" {
				serr = os.NewSyscallError("setsockopt SO_BINDTODEVICE", unix.BindToDevice(int(fd), r.device))
			}
			if r.mark != 0 && serr == nil {
				serr = os.NewSyscallError("setsockopt SO_MARK", unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, r.mark))
			}
		})
		return errors.Join(err, serr)
	}}
	if r.local.IsValid() && !r.local.IsUnspecified() && r.local.Is4() == ep.Addr().Is4() {
		d.LocalAddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(r.local, 0))
	}
	c, err := d.Dial("udp", ep.String())
	if err != nil {
		return 0, err
	}
	defer c.Close()
	mtu, _, err := pathMTU(c.(*net.UDPConn))
	return mtu, err
}

// control runs fn on conn's file descriptor.
func control(conn *net.UDPConn, fn func(fd int) error) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// socketBuffer is the default size of the socket's buffers, per queue:
// room for 16 receive batches (udp.DefaultReceiverMessages messages of
// up to 64 KiB each, UDP_GRO's largest), which also holds the
// forwarder's whole budget (laneLimit frames) several times over. With
// the kernel's default (212 KiB, net.core.rmem_default) a burst from a
// TCP sender overflows it and about a tenth of the datagrams are lost.
const socketBuffer = 16 * udp.DefaultReceiverMessages << 16

// sizeBuffers sets the socket's buffers to Config.SocketBuffer (default
// socketBuffer per queue): forced past net.core.[rw]mem_max with
// CAP_NET_ADMIN, else as large as those sysctls allow, with a warning
// naming the sysctl when that is smaller.
func (t *Tunnel) sizeBuffers() {
	want := t.cfg.SocketBuffer
	if want == 0 {
		want = socketBuffer * len(t.dev.Queues())
	}
	for _, b := range [...]struct {
		name         string
		force, plain int
		sysctl       string
	}{
		{"send", unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, "net.core.wmem_max"},
		{"receive", unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, "net.core.rmem_max"},
	} {
		got, err := setBuffer(t.conn, b.force, b.plain, want)
		switch {
		case err != nil:
			t.warnOnce(b.sysctl, "tunnel: socket "+b.name+" buffer not set", "err", err)
		case got < want:
			t.warnOnce(b.sysctl, "tunnel: socket "+b.name+" buffer smaller than asked for: raise "+b.sysctl+" or give CAP_NET_ADMIN",
				"bytes", got, "want", want, "sysctl", b.sysctl)
		}
	}
}

// setBuffer sets a socket buffer to size bytes with the force option,
// or, where that is not permitted, the plain one, and returns the size
// the kernel took (it reports twice what it takes).
func setBuffer(conn *net.UDPConn, force, plain, size int) (got int, err error) {
	err = control(conn, func(fd int) error {
		err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, size)
		if errors.Is(err, unix.EPERM) {
			err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, plain, size)
		}
		if err != nil {
			return os.NewSyscallError("setsockopt", err)
		}
		got, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, plain)
		got /= 2
		return os.NewSyscallError("getsockopt", err)
	})
	return got, err
}
