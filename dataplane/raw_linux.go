package dataplane

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/internal/iphdr"
)

// rawWriter is a frame.Writer that hands IP packets to the host's
// stack through raw sockets (IPPROTO_RAW: the header is the caller's),
// which routes them: how a gateway whose inside is a network device
// rather than a TUN sends its ICMP errors. The packets have no virtio-net
// header.
type rawWriter struct{ fd4, fd6 int }

// openRaw opens the two raw sockets in the calling thread's network
// namespace. It needs CAP_NET_RAW.
func openRaw() (*rawWriter, error) {
	fd4, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return nil, fmt.Errorf("dataplane: raw IPv4 socket: %w", os.NewSyscallError("socket", err))
	}
	fd6, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		unix.Close(fd4)
		return nil, fmt.Errorf("dataplane: raw IPv6 socket: %w", os.NewSyscallError("socket", err))
	}
	return &rawWriter{fd4, fd6}, nil
}

// Write sends bufs[i][offset:], whole IP packets, to their destinations.
func (w *rawWriter) Write(bufs [][]byte, offset int) (int, error) {
	for i, b := range bufs {
		if err := w.send(b[offset:]); err != nil {
			return i, err
		}
	}
	return len(bufs), nil
}

func (w *rawWriter) send(pkt []byte) error {
	dst, ok := iphdr.Dst(pkt)
	switch {
	case !ok:
		return errors.New("dataplane: raw write: not an IP packet")
	case dst.Is4():
		to := &unix.SockaddrInet4{Addr: dst.As4()}
		return os.NewSyscallError("sendto", unix.Sendto(w.fd4, pkt, unix.MSG_DONTWAIT, to))
	}
	to := &unix.SockaddrInet6{Addr: dst.As16()}
	return os.NewSyscallError("sendto", unix.Sendto(w.fd6, pkt, unix.MSG_DONTWAIT, to))
}

func (w *rawWriter) close() {
	unix.Close(w.fd4)
	unix.Close(w.fd6)
}
