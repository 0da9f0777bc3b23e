package main

// The tunnel scenario's floor: one end in each namespace of the pair, a
// TUN device (as the Tunnel opens it: offloads, the 10-byte virtio-net
// header, the inner MTU of its default framing) and a UDP socket
// connected to the other end (the Tunnel's buffer sizes, UDP_GRO), one
// blocking OS thread each way, plaintext and no framing:
//
//	TUN → UDP  a super-packet read (one copy) and sent as its segments
//	           in one UDP_SEGMENT message (the kernel's copy), each
//	           segment's headers written beside the payload, which the
//	           iovecs point into where it was read: no copy in user space
//	UDP → TUN  a UDP_GRO batch received (one copy), its segments of one
//	           TCP stream written into the TUN as one super-packet with a
//	           vectored write (the kernel's copy)
//
// Checksums: the sender leaves the inner TCP checksums as the TUN gave
// them (the kernel's partial one); the receiver writes every TCP packet
// with NEEDS_CSUM and the pseudo-header's partial sum, so no byte of
// payload is summed on the way, as none is by a NIC that offloads them.
// It carries IPv4 TCP super-packets (the scenario's streams); other
// packets go one per datagram.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/dataplane/tun"
	"github.com/gsoplane/gsoplane/dataplane/tunnel"
	"github.com/gsoplane/gsoplane/dataplane/udp"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

const (
	tunnelFloorHdr = 10    // the Tunnel's TUN header (virtio_net_hdr)
	maxUDPPayload  = 65507 // of one UDP_SEGMENT message over IPv4
	maxUDPSegs     = 64    // UDP_MAX_SEGMENTS of older kernels
)

// tunnelFloor is one end of the floor, running.
type tunnelFloor struct {
	floor
	sends, recvs atomic.Uint64 // sendmsg and recvmsg calls
}

func (t *tunnelFloor) datagrams() (sent, sends, received, receives uint64) {
	return t.fwd.Load(), t.sends.Load(), t.ret.Load(), t.recvs.Load()
}

// openTunnelFloor opens the floor's end in ns, from local to peer, and
// runs it: its TUN device is tnlName, which the caller addresses and
// brings up.
func openTunnelFloor(ns *netlab.NS, local, peer netip.Addr) (tunnelEnd, error) {
	t := &tunnelFloor{floor: floor{errs: make(chan error, 2)}}
	var tunFD, sock int
	err := ns.Run(func() (err error) {
		if tunFD, err = openTunnelFloorTUN(); err != nil {
			return err
		}
		t.fds = append(t.fds, tunFD)
		sock, err = tunnelFloorSocket(local, peer)
		if err == nil {
			t.fds = append(t.fds, sock)
		}
		return err
	})
	if err != nil {
		return nil, errors.Join(err, t.closeFDs())
	}
	t.closeDev = func() error {
		dev, err := ns.Link(tnlName)
		if err != nil {
			return err
		}
		return ns.Netlink().LinkDel(dev)
	}
	t.run(t.tunToUDP(tunFD, sock), &t.fwd)
	t.run(t.udpToTUN(sock, tunFD), &t.ret)
	return t, nil
}

// openTunnelFloorTUN creates tnlName as the Tunnel opens its device
// (dataplane/tun with Offload): IFF_VNET_HDR with the 10-byte header,
// tun.DefaultOffloads less the UDP-tunnel ones (which need the 24-byte
// header), the default send buffer, the inner MTU of the Tunnel's
// default framing on the pair's 1500. Its descriptor blocks.
func openTunnelFloorTUN() (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, os.NewSyscallError("open /dev/net/tun", err)
	}
	ifr, err := unix.NewIfreq(tnlName)
	if err == nil {
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
		err = os.NewSyscallError("TUNSETIFF", unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr))
	}
	for _, c := range []struct {
		name string
		req  uint
		v    int
	}{
		{"TUNSETVNETHDRSZ", unix.TUNSETVNETHDRSZ, tunnelFloorHdr},
		{"TUNSETSNDBUF", unix.TUNSETSNDBUF, tun.DefaultSndBuf},
	} {
		if err == nil {
			err = os.NewSyscallError(c.name, unix.IoctlSetPointerInt(fd, c.req, c.v))
		}
	}
	if err == nil {
		err = os.NewSyscallError("TUNSETOFFLOAD", unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD,
			int(tun.DefaultOffloads&^(tun.OffloadUDPTunnel|tun.OffloadUDPTunnelCsum))))
	}
	if err == nil {
		ifr.SetUint32(uint32(tunnel.InnerMTU(1500, false, tunnel.DefaultHeadroom, 0)))
		var s int
		if s, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err == nil {
			err = os.NewSyscallError("SIOCSIFMTU", unix.IoctlIfreq(s, unix.SIOCSIFMTU, ifr))
			unix.Close(s)
		}
	}
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("floor: TUN %s: %w", tnlName, err)
	}
	return fd, nil
}

// tunnelFloorSocket opens a blocking UDP socket bound to local and
// connected to peer on the tunnel's port, with the Tunnel's buffer size
// (16 receive batches of 64 KiB) and UDP_GRO; a receive times out now and
// then, for the thread to notice a stop.
func tunnelFloorSocket(local, peer netip.Addr) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	for _, o := range []struct{ level, opt, v int }{
		{unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 16 * udp.DefaultReceiverMessages << 16},
		{unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16 * udp.DefaultReceiverMessages << 16},
		{unix.SOL_UDP, unix.UDP_GRO, 1},
	} {
		if err == nil {
			err = unix.SetsockoptInt(fd, o.level, o.opt, o.v)
		}
	}
	if err == nil {
		err = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100_000})
	}
	if err == nil {
		err = unix.Bind(fd, &unix.SockaddrInet4{Port: tnlPort, Addr: local.As4()})
	}
	if err == nil {
		err = unix.Connect(fd, &unix.SockaddrInet4{Port: tnlPort, Addr: peer.As4()})
	}
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("floor: UDP socket %v → %v: %w", local, peer, err)
	}
	return fd, nil
}

// tunToUDP reads a packet from the TUN and sends it: a TCP super-packet
// as its segments, in as few UDP_SEGMENT messages as hold them (one, or
// two for the largest), anything else as one datagram. It counts the
// datagrams itself.
func (t *tunnelFloor) tunToUDP(tunFD, sock int) pump {
	var (
		iov  iovecs
		msg  unix.Msghdr
		vecs = make([][]byte, 0, 2*maxUDPSegs)
		hdrs = make([]byte, maxUDPSegs*120) // each segment's IPv4 and TCP headers: at most 60 + 60 bytes
		ctl  = make([]byte, unix.CmsgSpace(2))
	)
	return func(buf, hdr []byte) (bool, error) {
		n, err := vecIO(unix.SYS_READV, tunFD, iov.set(hdr[:tunnelFloorHdr], buf))
		if err != nil || n <= tunnelFloorHdr {
			return false, err
		}
		pkt := buf[:n-tunnelFloorHdr]
		mss := int(binary.LittleEndian.Uint16(hdr[4:]))
		hl, ok := tcp4HeaderLen(pkt)
		if hdr[1]&^unix.VIRTIO_NET_HDR_GSO_ECN != unix.VIRTIO_NET_HDR_GSO_TCPV4 || !ok || mss == 0 || len(pkt) <= hl+mss {
			return false, t.send(sock, &msg, &iov, nil, 1, pkt)
		}
		payload := pkt[hl:]
		segs := (len(payload) + mss - 1) / mss
		per := min(maxUDPSegs, maxUDPPayload/(hl+mss)) // segments per message
		putUDPSegment(ctl, uint16(hl+mss))
		for first := 0; first < segs; first += per {
			vecs = vecs[:0]
			for i := first; i < min(first+per, segs); i++ {
				p := payload[i*mss : min((i+1)*mss, len(payload))]
				h := hdrs[(i-first)*hl : (i-first+1)*hl]
				copy(h, pkt[:hl]) // the headers, not the payload
				segmentHeader(h, i, mss, len(p), i == segs-1)
				vecs = append(vecs, h, p)
			}
			if err := t.send(sock, &msg, &iov, ctl, len(vecs)/2, vecs...); err != nil {
				return false, err
			}
		}
		return false, nil
	}
}

// send sends pieces as one message of dgrams datagrams, with ctl (a
// UDP_SEGMENT control message) if given, and counts them.
func (t *tunnelFloor) send(sock int, msg *unix.Msghdr, iov *iovecs, ctl []byte, dgrams int, pieces ...[]byte) error {
	setMsgIov(msg, iov.set(pieces...), ctl)
	if _, err := msgIO(unix.SYS_SENDMSG, sock, msg); err != nil {
		return err
	}
	t.sends.Add(1)
	t.fwd.Add(uint64(dgrams))
	return nil
}

// udpToTUN receives a UDP_GRO batch and writes it into the TUN: each run
// of consecutive segments of one TCP stream as one super-packet (the
// first one's headers, the others' payloads, by iovecs), anything else
// as it came. It counts the datagrams itself.
func (t *tunnelFloor) udpToTUN(sock, tunFD int) pump {
	var (
		iov  iovecs
		msg  unix.Msghdr
		vecs = make([][]byte, 0, 2+maxUDPSegs)
		ctl  = make([]byte, unix.CmsgSpace(4))
		vnet = make([]byte, tunnelFloorHdr)
	)
	return func(buf, _ []byte) (bool, error) {
		setMsgIov(&msg, iov.set(buf[:65535]), ctl)
		n, err := msgIO(unix.SYS_RECVMSG, sock, &msg)
		if err != nil || n == 0 {
			return false, err
		}
		t.recvs.Add(1)
		size := n
		if msg.Controllen > 0 {
			size = max(udpGROSize(ctl), 1)
		}
		for off := 0; off < n; {
			first := buf[off:min(off+size, n)]
			vecs = append(vecs[:0], vnet, first)
			off += len(first)
			hl, ok := tcp4HeaderLen(first)
			prev := first
			for ok && len(prev) == size && off < n && follows(first, prev, buf[off:min(off+size, n)], hl) {
				prev = buf[off:min(off+size, n)]
				vecs = append(vecs, prev[hl:])
				off += len(prev)
			}
			if ihl := int(first[0]&0xf) * 4; ok {
				first[ihl+13] |= prev[ihl+13] & 0x08 // the last one's PSH
			}
			superHeader(vnet, vecs[1:], hl, ok)
			t.ret.Add(uint64(len(vecs) - 1))
			_, err := vecIO(unix.SYS_WRITEV, tunFD, iov.set(vecs...))
			if err != nil && !errors.Is(err, unix.EIO) { // EIO: the device is not up yet, the packet dropped
				return false, err
			}
		}
		return false, nil
	}
}

// tcp4HeaderLen returns the length of pkt's IPv4 and TCP headers, if it is
// an IPv4 TCP packet with both whole.
func tcp4HeaderLen(pkt []byte) (int, bool) {
	if len(pkt) < 40 || pkt[0]>>4 != 4 || pkt[9] != unix.IPPROTO_TCP {
		return 0, false
	}
	ihl := int(pkt[0]&0xf) * 4
	if ihl < 20 || len(pkt) < ihl+20 {
		return 0, false
	}
	hl := ihl + int(pkt[ihl+12]>>4)*4
	return hl, hl >= ihl+20 && len(pkt) >= hl
}

// segmentHeader makes h, a copy of a TCP super-packet's headers, those of
// its segment i of n payload bytes, mss each before it: IPv4 total
// length, ID and checksum; TCP sequence number; FIN and PSH on the last
// segment only, CWR on the first only.
func segmentHeader(h []byte, i, mss, n int, last bool) {
	be := binary.BigEndian
	ihl := int(h[0]&0xf) * 4
	be.PutUint16(h[2:], uint16(len(h)+n))
	be.PutUint16(h[4:], be.Uint16(h[4:])+uint16(i))
	ipChecksum(h[:ihl])
	be.PutUint32(h[ihl+4:], be.Uint32(h[ihl+4:])+uint32(i*mss))
	if !last {
		h[ihl+13] &^= 0x01 | 0x08 // FIN, PSH
	}
	if i > 0 {
		h[ihl+13] &^= 0x80 // CWR
	}
}

// follows reports whether segment d, of headers of hl bytes, continues
// the TCP super-packet that starts with first and has prev last: the same
// headers but for the IPv4 length, ID and checksum and the TCP sequence
// number, flags and checksum; prev only ACK; d's sequence number right
// after prev's payload.
func follows(first, prev, d []byte, hl int) bool {
	ihl := int(first[0]&0xf) * 4
	if h, ok := tcp4HeaderLen(d); !ok || h != hl || prev[ihl+13] != 0x10 || d[ihl+13]&^0x08 != 0x10 {
		return false
	}
	be := binary.BigEndian
	if be.Uint32(d[ihl+4:]) != be.Uint32(prev[ihl+4:])+uint32(len(prev)-hl) {
		return false
	}
	same := func(a, b int) bool { return string(first[a:b]) == string(d[a:b]) }
	return same(0, 2) && same(6, 10) && same(12, ihl+4) && same(ihl+8, ihl+13) && same(ihl+14, ihl+16) && same(ihl+18, hl)
}

// superHeader makes pkts[0], the first segment of a run (the others'
// payloads follow in pkts), the header of the whole, and vnet its
// virtio-net header: for TCP (tcp), NEEDS_CSUM with the pseudo-header's
// partial sum, and TCPV4 with the first payload as gso_size for more than
// one segment; nothing for other packets.
func superHeader(vnet []byte, pkts [][]byte, hl int, tcp bool) {
	clear(vnet)
	if !tcp {
		return
	}
	h, be, le := pkts[0], binary.BigEndian, binary.LittleEndian
	ihl := int(h[0]&0xf) * 4
	total := 0
	for _, p := range pkts {
		total += len(p)
	}
	if len(pkts) > 1 {
		vnet[1] = unix.VIRTIO_NET_HDR_GSO_TCPV4
		le.PutUint16(vnet[4:], uint16(len(h)-hl))
	}
	be.PutUint16(h[2:], uint16(total))
	ipChecksum(h[:ihl])
	pseudo := uint32(be.Uint16(h[12:])) + uint32(be.Uint16(h[14:])) + uint32(be.Uint16(h[16:])) + uint32(be.Uint16(h[18:])) +
		unix.IPPROTO_TCP + uint32(total-ihl)
	be.PutUint16(h[ihl+16:], fold16(pseudo))
	vnet[0] = unix.VIRTIO_NET_HDR_F_NEEDS_CSUM
	le.PutUint16(vnet[2:], uint16(hl))
	le.PutUint16(vnet[6:], uint16(ihl))
	le.PutUint16(vnet[8:], 16)
}

// ipChecksum writes the checksum of IPv4 header h into it.
func ipChecksum(h []byte) {
	h[10], h[11] = 0, 0
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	binary.BigEndian.PutUint16(h[10:], ^fold16(sum))
}

// fold16 folds a one's complement sum into 16 bits.
func fold16(sum uint32) uint16 {
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return uint16(sum)
}
