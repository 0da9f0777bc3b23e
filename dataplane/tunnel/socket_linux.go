package tunnel

import (
	"errors"
	"fmt"
	"net"
	"os"

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
