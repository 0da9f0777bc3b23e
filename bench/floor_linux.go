package main

// The floor rows: the least a userspace path can cost on the gateway's
// topology. No upstream Linux interface reads a TUN without a copy, and
// a packet socket's send is copied into an skb, so a userspace path from
// a TUN to a veth copies each super-packet at least twice where the
// kernel alone copies nothing. The floor is a program written for the
// bench that does exactly that and nothing else, one blocking OS thread
// per direction, system calls of golang.org/x/sys/unix only in its data
// path:
//
//	tun ⇄ packet  (gso, gro) a TUN read into the frame, a packet socket
//	              send of the whole super-packet (PACKET_VNET_HDR); a
//	              packet socket receive, a TUN write: two copies each way
//	packet ⇄ packet  (ingress) a receive on gw-c's packet socket, a send
//	              on gw-a's (Ethernet addresses rewritten), and back
//
// It runs where the gateway would: its TUN device is the gateway's
// (name, flags, the 24-byte virtio-net header, offloads, send buffer,
// noqueue, addresses and routes), its packet sockets have the AF_PACKET
// port's options on the same veth, and a tcx program on each NIC's
// ingress keeps the host from handling what the floor forwards, as the
// port's ingress program does. Its CPU time is the gateway's in the
// rows' terms (gatewayCPU: its threads are not traffic threads).

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/dataplane/afpacket"
	"github.com/gsoplane/gsoplane/dataplane/tun"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// Frame layout of the floor's buffers: the packet socket's virtio-net
// header, the Ethernet header, the IP packet; the TUN's header is read
// and written apart (readv, writev), in front of the IP packet.
const (
	floorVnet    = 10                      // struct virtio_net_hdr: what PACKET_VNET_HDR prepends
	floorEth     = 14                      // Ethernet header
	floorPkt     = floorVnet + floorEth    // where the IP packet starts
	floorTUNHdr  = 24                      // the gateway's TUN header (segment.HeaderSizeTunnel)
	floorBufSize = floorPkt + 65535 + 4096 // a 64 KiB super-packet and room to spare
)

// floor is the floor program, running: a thread per direction.
type floor struct {
	stopping atomic.Bool
	wg       sync.WaitGroup
	errs     chan error
	fds      []int
	closeDev func() error // wakes a thread blocked on the TUN (deletes the device)
	fwd, ret atomic.Uint64
	reverse  bool // the measured direction is the return one (Segments counts ret)
}

// pump is one direction of the floor: read whole super-packets from in,
// check and rewrite them, and write them to out.
type pump func(buf []byte, tunHdr []byte) (ok bool, err error)

// counters reports the super-packets forwarded each way and the floor's
// CPU time.
func (f *floor) counters(c *counters) {
	fwd, ret := f.fwd.Load(), f.ret.Load()
	c.Segments, c.Reads, c.RetPackets, c.RetWrites = fwd, fwd, ret, ret
	if f.reverse {
		c.Segments, c.Reads = ret, ret
	}
	c.GatewayCPU = gatewayCPU()
}

// run runs p on a thread of its own until stop, counting into n.
func (f *floor) run(p pump, n *atomic.Uint64) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		runtime.LockOSThread() // the thread ends with the goroutine
		buf, hdr := make([]byte, floorBufSize), make([]byte, floorTUNHdr)
		for !f.stopping.Load() {
			ok, err := p(buf, hdr)
			switch {
			case err == nil && ok:
				n.Add(1)
			case err == nil, errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EINTR), errors.Is(err, unix.ENOBUFS),
				errors.Is(err, unix.ECONNREFUSED): // the tunnel's peer end not open yet
			case f.stopping.Load():
				return
			default:
				f.errs <- err
				return
			}
		}
	}()
}

// stop stops both threads and closes the floor's descriptors.
func (f *floor) stop() error {
	f.stopping.Store(true)
	var errs []error
	if f.closeDev != nil {
		errs = append(errs, f.closeDev())
	}
	f.wg.Wait()
	for _, fd := range f.fds {
		errs = append(errs, unix.Close(fd))
	}
	close(f.errs)
	for err := range f.errs {
		errs = append(errs, fmt.Errorf("floor: %w", err))
	}
	return errors.Join(errs...)
}

// startTUNFloor runs the floor between the gateway's TUN device in A and
// a packet socket on gw-a: the reference topology's gateway, copies only.
func startTUNFloor(l *lab, reverse bool) (*floor, error) {
	f := &floor{errs: make(chan error, 2), reverse: reverse}
	var tunFD, pkt int
	err := l.A.Run(func() (err error) {
		if tunFD, err = openFloorTUN(tunName); err != nil {
			return err
		}
		f.fds = append(f.fds, tunFD)
		pkt, err = floorPacketSocket(nicA)
		if err == nil {
			f.fds = append(f.fds, pkt)
		}
		return err
	})
	if err == nil {
		err = errors.Join(l.setNoQueue(tunName), l.TUNUp(tunName), l.dropIPv4At(l.A, nicA, aRoutes[0]))
	}
	if err != nil {
		return nil, errors.Join(err, f.closeFDs())
	}
	f.closeDev = func() error {
		// Deleting the device wakes a read blocked on it (tun_detach_all).
		dev, err := l.A.Link(tunName)
		if err != nil {
			return err
		}
		return l.A.Netlink().LinkDel(dev)
	}
	out, err := floorEthernet(l.A, nicA, l.B, nicB, 0x0800)
	if err != nil {
		return nil, errors.Join(err, f.closeFDs())
	}
	f.run(tunToPacket(tunFD, pkt, out), &f.fwd)
	f.run(packetToTUN(pkt, tunFD, aRoutes[0]), &f.ret)
	return f, nil
}

// startIngressFloor runs the floor between packet sockets on gw-c (C's
// side, after AddIngress) and gw-a: super-packets from C leave for B
// whole, and what B sends back goes to C.
func startIngressFloor(l *lab) (*floor, error) {
	f := &floor{errs: make(chan error, 2)}
	var in, out int
	err := l.A.Run(func() (err error) {
		if in, err = floorPacketSocket(netlab.Ingress); err != nil {
			return err
		}
		f.fds = append(f.fds, in)
		out, err = floorPacketSocket(nicA)
		if err == nil {
			f.fds = append(f.fds, out)
		}
		return err
	})
	srv := netlab.SrvRoutes[0]
	if err == nil {
		err = errors.Join(l.dropIPv4At(l.A, netlab.Ingress, srv), l.dropIPv4At(l.A, nicA, aRoutes[0]))
	}
	if err != nil {
		return nil, errors.Join(err, f.closeFDs())
	}
	toB, err1 := floorEthernet(l.A, nicA, l.B, nicB, 0x0800)
	toC, err2 := floorEthernet(l.A, netlab.Ingress, l.C, netlab.AppIf, 0x0800)
	if err := errors.Join(err1, err2); err != nil {
		return nil, errors.Join(err, f.closeFDs())
	}
	f.run(packetToPacket(in, out, srv, toB), &f.fwd)
	f.run(packetToPacket(out, in, aRoutes[0], toC), &f.ret)
	return f, nil
}

func (f *floor) closeFDs() error {
	var errs []error
	for _, fd := range f.fds {
		errs = append(errs, unix.Close(fd))
	}
	f.fds = nil
	return errors.Join(errs...)
}

// tunToPacket reads a super-packet from the TUN behind the frame's
// headers (one copy), converts its virtio-net header to the packet
// socket's offsets (counted from the Ethernet header), writes the
// Ethernet header and sends the frame whole (the second copy).
func tunToPacket(tunFD, pkt int, eth [floorEth]byte) pump {
	var iov iovecs
	return func(buf, hdr []byte) (bool, error) {
		n, err := vecIO(unix.SYS_READV, tunFD, iov.set(hdr, buf[floorPkt:]))
		if err != nil || n <= floorTUNHdr {
			return false, err
		}
		vnetShift(buf[:floorVnet], hdr[:floorVnet], floorEth)
		copy(buf[floorVnet:floorPkt], eth[:])
		if buf[floorPkt]>>4 == 6 {
			binary.BigEndian.PutUint16(buf[floorPkt-2:], 0x86dd)
		}
		_, err = unix.Write(pkt, buf[:floorPkt+n-floorTUNHdr])
		return err == nil, err
	}
}

// packetToTUN receives a frame (one copy) and writes an IPv4 packet to
// dst into the TUN behind its header converted to the TUN's offsets (the
// second copy); other frames are the host's.
func packetToTUN(pkt, tunFD int, dst netip.Prefix) pump {
	var iov iovecs
	return func(buf, hdr []byte) (bool, error) {
		n, err := unix.Read(pkt, buf)
		if err != nil || !floorMatch(buf[:max(n, 0)], dst) {
			return false, err
		}
		clear(hdr)
		vnetShift(hdr[:floorVnet], buf[:floorVnet], -floorEth)
		_, err = vecIO(unix.SYS_WRITEV, tunFD, iov.set(hdr, buf[floorPkt:n]))
		return err == nil, err
	}
}

// packetToPacket receives a frame (one copy) and sends an IPv4 packet to
// dst on out with its Ethernet addresses rewritten (the second copy);
// other frames are the host's.
func packetToPacket(in, out int, dst netip.Prefix, eth [floorEth]byte) pump {
	return func(buf, _ []byte) (bool, error) {
		n, err := unix.Read(in, buf)
		if err != nil || !floorMatch(buf[:max(n, 0)], dst) {
			return false, err
		}
		copy(buf[floorVnet:floorPkt], eth[:])
		_, err = unix.Write(out, buf[:n])
		return err == nil, err
	}
}

// iovecs are iovecs kept from call to call.
type iovecs []unix.Iovec

// set points the iovecs at pieces, none of them empty, and returns them.
func (v *iovecs) set(pieces ...[]byte) []unix.Iovec {
	*v = (*v)[:0]
	for _, p := range pieces {
		var e unix.Iovec
		e.Base = &p[0]
		e.SetLen(len(p))
		*v = append(*v, e)
	}
	return *v
}

// floorMatch reports whether frame (behind its virtio-net header) is an
// IPv4 packet to dst.
func floorMatch(frame []byte, dst netip.Prefix) bool {
	if len(frame) < floorPkt+20 || binary.BigEndian.Uint16(frame[floorPkt-2:]) != 0x0800 {
		return false
	}
	return dst.Contains(netip.AddrFrom4([4]byte(frame[floorPkt+16 : floorPkt+20])))
}

// vnetShift copies the virtio-net header src to dst with its csum_start
// and hdr_len moved by d bytes (the Ethernet header gained or lost).
func vnetShift(dst, src []byte, d int) {
	copy(dst, src[:floorVnet])
	le := binary.LittleEndian
	if src[0]&unix.VIRTIO_NET_HDR_F_NEEDS_CSUM != 0 {
		le.PutUint16(dst[6:], uint16(int(le.Uint16(src[6:]))+d))
	}
	if h := int(le.Uint16(src[2:])); h != 0 {
		le.PutUint16(dst[2:], uint16(max(h+d, 0)))
	}
}

// floorEthernet is the Ethernet header from dev in ns to peer in pns.
func floorEthernet(ns *netlab.NS, dev string, pns *netlab.NS, peer string, proto uint16) (eth [floorEth]byte, err error) {
	src, err := ns.Link(dev)
	if err != nil {
		return eth, err
	}
	dst, err := pns.Link(peer)
	if err != nil {
		return eth, err
	}
	copy(eth[0:6], dst.Attrs().HardwareAddr)
	copy(eth[6:12], src.Attrs().HardwareAddr)
	binary.BigEndian.PutUint16(eth[12:], proto)
	return eth, nil
}

// openFloorTUN creates the TUN device as the gateway does
// (dataplane's tunConfig through dataplane/tun): IFF_TUN, IFF_NO_PI,
// IFF_VNET_HDR with the 24-byte header, tun.DefaultOffloads (without the
// UDP-tunnel ones before Linux 6.17), the default send buffer. Its
// descriptor blocks.
func openFloorTUN(name string) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, os.NewSyscallError("open /dev/net/tun", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err == nil {
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
		err = os.NewSyscallError("TUNSETIFF", unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr))
	}
	if err == nil {
		err = os.NewSyscallError("TUNSETVNETHDRSZ", unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, floorTUNHdr))
	}
	if err == nil {
		err = os.NewSyscallError("TUNSETSNDBUF", unix.IoctlSetPointerInt(fd, unix.TUNSETSNDBUF, tun.DefaultSndBuf))
	}
	if err == nil {
		err = unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, int(tun.DefaultOffloads))
		if errors.Is(err, unix.EINVAL) {
			err = unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, int(tun.DefaultOffloads&^(tun.OffloadUDPTunnel|tun.OffloadUDPTunnelCsum)))
		}
		err = os.NewSyscallError("TUNSETOFFLOAD", err)
	}
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("floor: TUN %s: %w", name, err)
	}
	return fd, nil
}

// floorPacketSocket opens a blocking packet socket on dev with the
// AF_PACKET port's options (SOCK_RAW, ETH_P_ALL, PACKET_VNET_HDR,
// PACKET_QDISC_BYPASS, PACKET_IGNORE_OUTGOING, the port's default receive
// buffer; a send buffer of 4 MiB, where the port sizes its own to its
// frames: the floor sends one frame at a time), in the calling thread's
// namespace. A receive times out now and then, for the thread to notice
// a stop.
func floorPacketSocket(dev string) (int, error) {
	ifi, err := net.InterfaceByName(dev)
	if err != nil {
		return -1, err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	for _, o := range []struct{ level, opt, v int }{
		{unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1},
		{unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1},
		{unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1},
		{unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 4 << 20},
		{unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, afpacket.DefaultRcvBuf},
	} {
		if err == nil {
			err = unix.SetsockoptInt(fd, o.level, o.opt, o.v)
		}
	}
	if err == nil {
		err = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100_000})
	}
	if err == nil {
		err = unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: 0x0300, Ifindex: ifi.Index}) // htons(ETH_P_ALL)
	}
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("floor: packet socket on %s: %w", dev, err)
	}
	return fd, nil
}

// dropIPv4At drops IPv4 packets to dst (a prefix of whole bytes) at the
// ingress of dev in ns (tcx), after the packet sockets' taps have seen
// them: the host does not handle what the floor forwards.
func (l *lab) dropIPv4At(ns *netlab.NS, dev string, dst netip.Prefix) error {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "gsob_floor_drop", Type: ebpf.SchedCLS, License: "GPL", Instructions: ipv4DropInstructions(dst),
	})
	if err != nil {
		return fmt.Errorf("load the floor's drop program: %w", err)
	}
	l.bpf = append(l.bpf, prog)
	lk, err := ns.Link(dev)
	if err != nil {
		return err
	}
	return ns.Run(func() error {
		att, err := link.AttachTCX(link.TCXOptions{Interface: lk.Attrs().Index, Program: prog, Attach: ebpf.AttachTCXIngress})
		if err != nil {
			return fmt.Errorf("attach the floor's drop program to %s: %w", dev, err)
		}
		l.bpf = append(l.bpf, att)
		return nil
	})
}

// ipv4DropInstructions is, in C, on a tc program's __sk_buff:
//
//	if (data + 34 > data_end || eth->h_proto != htons(ETH_P_IP)) return TCX_PASS;
//	if ((ip->daddr & mask) != net) return TCX_PASS;
//	return TCX_DROP;
//
// with mask and net dst's, as a little-endian load sees them.
func ipv4DropInstructions(dst netip.Prefix) asm.Instructions {
	const (
		skbData, skbDataEnd = 76, 80
		tcxPass, tcxDrop    = 0, 2
	)
	a := dst.Masked().Addr().As4()
	var mask, net uint32
	for i := range dst.Bits() / 8 {
		mask |= 0xff << (8 * i)
		net |= uint32(a[i]) << (8 * i)
	}
	return asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, skbData, asm.Word),
		asm.LoadMem(asm.R3, asm.R1, skbDataEnd, asm.Word),
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, 14+20),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 12, asm.Half),
		asm.JNE.Imm(asm.R5, 0x0008, "pass"), // htons(ETH_P_IP)
		asm.LoadMem(asm.R5, asm.R2, 14+16, asm.Word),
		asm.And.Imm32(asm.R5, int32(mask)),
		asm.JNE.Imm32(asm.R5, int32(net), "pass"),
		asm.Mov.Imm(asm.R0, tcxDrop),
		asm.Return(),
		asm.Mov.Imm(asm.R0, tcxPass).WithSymbol("pass"),
		asm.Return(),
	}
}

// floorRow is a row of one TCP stream through the floor between the TUN
// and gw-a: A→B, or B→A (toA) with GRO on gw-a as in packet-gro.
func floorRow(toA bool) rowSpec {
	return rowSpec{name: "floor", units: tcpUnits, retrans: true, start: func(ctx context.Context) (trial, error) {
		return withLab(func(l *lab) (*labTrial, error) {
			if toA {
				if err := l.A.SetFeatures(nicA, map[string]bool{"gro": true}); err != nil {
					return nil, err
				}
			}
			f, err := startTUNFloor(l, toA)
			if err != nil {
				return nil, err
			}
			s, err := startTCPStreams(l, 1, toA, tcpPort)
			if err != nil {
				return nil, errors.Join(err, f.stop())
			}
			return &labTrial{dp: f, tr: tcpTraffic{s}, rxAtB: !toA}, nil
		})
	}}.copying(floorCopies)
}
