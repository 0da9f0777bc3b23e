package afpacket

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/internal/egress"
	"github.com/gsoplane/gsoplane/dataplane/internal/port"
)

// ethPAll is htons(ETH_P_ALL): the socket's protocol. A socket bound to
// ETH_P_ALL is a tap (dev->ptype_all), delivered before tc ingress; one
// bound to ETH_P_IP would be delivered after it, and the ingress drop
// would hide the packets from it too.
const ethPAll = 0x0300

// Port is a set of AF_PACKET sockets on one NIC in one fanout group, with
// the socket filter that keeps only the redirected packets and the
// ingress program (tcx, or cls_bpf on a clsact qdisc) that keeps the
// host from handling them too. Create it with Open; Close it when done.
type Port struct {
	base   *port.Port[*Socket] // the interface, namespace, sockets and lock
	cfg    Config
	fanout uint16 // the fanout group's ID, chosen by the kernel
	filter *filter
	rxSize int // a receive buffer's size (rxSizeFor)
}

// Open opens cfg.Queues AF_PACKET sockets on cfg.Ifname, joins them into
// one fanout group, attaches the socket filter to each and the ingress
// drop program to the interface (as cfg.HostFilter says), in the calling
// thread's network namespace (call it from a goroutine locked to a
// thread in that namespace, as internal/nsrun's Run does). It needs
// CAP_NET_RAW for the sockets and CAP_NET_ADMIN and CAP_BPF for the
// programs (root has them).
func Open(cfg Config) (*Port, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	lnk, err := port.Interface("afpacket", cfg.Ifname)
	if err != nil {
		return nil, err
	}
	a := lnk.Attrs()
	if len(a.HardwareAddr) != 6 || (a.EncapType != "" && a.EncapType != "ether") {
		return nil, fmt.Errorf("afpacket: %w: %s is not an Ethernet interface (%s)", frame.ErrInvalidConfig, cfg.Ifname, a.EncapType)
	}
	if cfg.Queues == 0 {
		cfg.Queues = min(port.RXQueues(lnk), MaxQueues)
	}
	if cfg.FrameSize == 0 {
		cfg.FrameSize = frameSizeFor(a.MTU)
	}
	if cfg.SndBuf == 0 {
		cfg.SndBuf = min(cfg.Frames*truesize(cfg.FrameSize), 64<<20)
	}
	p := &Port{cfg: cfg, rxSize: rxSizeFor(a)}
	p.base, err = port.New(port.Config[*Socket]{
		Pkg: "afpacket", Ifname: cfg.Ifname, Ifindex: a.Index, MaxPrefixes: maxPrefixes,
		ErrClosed: ErrClosed, ErrDetached: ErrDetached,
		StopReceive: (*Socket).stopRX, CloseSocket: (*Socket).close,
	})
	if err != nil {
		return nil, err
	}
	if err := p.open(); err != nil {
		return nil, errors.Join(err, p.Close())
	}
	return p, nil
}

// truesize is what the kernel charges a socket for an skb holding size
// bytes, roughly: the data, struct sk_buff and struct skb_shared_info.
func truesize(size int) int { return size + 576 }

// open does Open's work; the caller closes p on error.
func (p *Port) open() error {
	var err error
	if p.filter, err = newFilter(p.cfg.HostFilter); err != nil {
		return err
	}
	p.base.SetProgram(ingressAttachment{p.filter})
	if err := p.filter.setPrefixes(p.cfg.Redirect); err != nil {
		return err
	}
	for i := range p.cfg.Queues {
		s, err := p.newSocket(i)
		if err != nil {
			return err
		}
		p.base.AddSocket(s)
	}
	return p.filter.attach(p.cfg.Ifname, p.Ifindex())
}

// Sockets returns the sockets (a new slice: keep it rather than calling
// Sockets per packet).
func (p *Port) Sockets() []*Socket { return p.base.Sockets() }

// Ifindex returns the interface index.
func (p *Port) Ifindex() int { return p.base.Ifindex() }

// FanoutID returns the PACKET_FANOUT group ID the kernel chose.
func (p *Port) FanoutID() uint16 { return p.fanout }

// SetRedirect replaces the redirect prefixes: afterwards exactly these
// destinations go to the sockets and not to the host's stack.
func (p *Port) SetRedirect(prefixes []netip.Prefix) error { return p.base.SetRedirect(prefixes) }

// StopReceive makes every Receive of the port's sockets' receivers return
// at once, with no frames, from now on: a return path waiting for frames
// notices that its context ended. Transmitting goes on until Close.
func (p *Port) StopReceive() { p.base.StopReceive() }

// Close detaches the ingress program (the host's stack handles the
// redirected prefixes again; with HostFilterClsact it deletes its filter
// and the clsact qdisc it added, unless another filter is on it), closes
// the sockets (waking their waiters: they return ErrClosed) and releases
// the programs and maps. It may be called from any goroutine, in any
// namespace, and more than once.
func (p *Port) Close() error { return p.base.Close() }

// Attached reports whether the port's ingress program is still attached
// to its interface: its tcx link, or its cls_bpf filter (by its
// priority, handle, name and program ID). Detaching a BPF link from
// outside (bpftool link detach) sends no notification, nor does a filter
// deleted with tc filter del, so a caller that cares asks now and then;
// without the program the host's stack handles the redirected packets
// too (the sockets still get them).
func (p *Port) Attached() (bool, error) { return p.base.Attached() }

// Reattach attaches the ingress program again, the way it was attached,
// after it was detached from outside (adding a clsact qdisc if the
// interface has none by then); the sockets stay as they are. It may be
// called from any goroutine: it attaches from a thread in the port's
// namespace.
func (p *Port) Reattach() error { return p.base.Reattach() }

// HostFilter returns how the ingress program is attached,
// HostFilterTCX or HostFilterClsact, and why: "asked for", or what
// HostFilterAuto found.
func (p *Port) HostFilter() (HostFilter, string) { return p.filter.mode, p.filter.why }

// Leftovers returns how many cls_bpf filters of a port killed before
// (HostFilterClsact: a filter outlives its process) Open found on the
// interface's ingress and deleted, with their clsact qdisc taken as the
// port's own: they dropped the redirected packets meanwhile, and would
// have stood ahead of the port's filter.
func (p *Port) Leftovers() int {
	if p.filter.cls == nil {
		return 0
	}
	return p.filter.cls.leftovers
}

// ingressAttachment is the port's filter as dataplane/internal/port drives it.
type ingressAttachment struct{ f *filter }

func (a ingressAttachment) SetPrefixes(prefixes []netip.Prefix) error {
	return a.f.setPrefixes(prefixes)
}
func (a ingressAttachment) Attached(ifindex int) (bool, error) { return a.f.attached(ifindex) }
func (a ingressAttachment) Detach() error                      { return a.f.detach() }
func (a ingressAttachment) Close() error                       { return a.f.close() }

// Attach attaches the ingress program to lnk.
func (a ingressAttachment) Attach(lnk netlink.Link) error {
	return a.f.attach(lnk.Attrs().Name, lnk.Attrs().Index)
}

// Socket is one AF_PACKET socket of a port: SOCK_RAW, bound to the NIC
// with ETH_P_ALL, a virtio-net header in front of every packet both ways
// (PACKET_VNET_HDR), transmitting straight to the driver
// (PACKET_QDISC_BYPASS), a member of the port's fanout group. Its TX side
// is used through a Sink (NewSink), its RX side through its Receiver;
// Stats may be called from anywhere.
type Socket struct {
	port    *Port
	index   int
	fd      int
	file    *os.File
	rc      syscall.RawConn
	closed  atomic.Bool
	stopped atomic.Bool

	st counters

	kmu     sync.Mutex // kernel statistics, accumulated (they clear on read)
	kpkts   uint64
	kdrops  uint64
	kclosed bool
}

// counters are a socket's own counters.
type counters struct {
	rx, rxBytes, rxCalls, rxSuper            atomic.Uint64
	tx, txBytes, txCalls, txSuper, txPartial atomic.Uint64
	txBusy                                   atomic.Uint64
	invalid, truncated, header, rf           atomic.Uint64
	nextHop                                  egress.Counts // the sinks' drops for want of a next hop
}

// newSocket opens, configures and binds socket i, attaches the filter
// and joins the fanout group (the first socket creates it).
func (p *Port) newSocket(i int) (*Socket, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("afpacket: socket: needs CAP_NET_RAW: %w", os.NewSyscallError("socket", err))
		}
		return nil, fmt.Errorf("afpacket: socket: %w", os.NewSyscallError("socket", err))
	}
	s := &Socket{port: p, index: i, fd: fd}
	if err := s.setup(); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("afpacket: socket %d on %s: %w", i, p.cfg.Ifname, err)
	}
	s.file = os.NewFile(uintptr(fd), "afpacket")
	if s.rc, err = s.file.SyscallConn(); err != nil {
		s.file.Close()
		return nil, fmt.Errorf("afpacket: socket %d on %s: %w", i, p.cfg.Ifname, err)
	}
	return s, nil
}

// setup sets the options before bind (so that no packet is queued
// unfiltered and the header is there from the first packet), binds, and
// joins the fanout group.
func (s *Socket) setup() error {
	p := s.port
	opts := []struct {
		name          string
		level, opt, v int
		needsNetAdmin bool
	}{
		{"PACKET_VNET_HDR", unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1, false},
		{"PACKET_QDISC_BYPASS", unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1, false},
		{"PACKET_IGNORE_OUTGOING", unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1, false},
		{"SO_SNDBUFFORCE", unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, p.cfg.SndBuf, true},
		{"SO_RCVBUFFORCE", unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, p.cfg.RcvBuf, true},
	}
	for _, o := range opts {
		if err := unix.SetsockoptInt(s.fd, o.level, o.opt, o.v); err != nil {
			err = os.NewSyscallError("setsockopt "+o.name, err)
			if o.needsNetAdmin && errors.Is(err, unix.EPERM) {
				return fmt.Errorf("needs CAP_NET_ADMIN: %w", err)
			}
			return err
		}
	}
	if err := p.filter.attachSocket(s.fd); err != nil {
		return err
	}
	if err := unix.Bind(s.fd, &unix.SockaddrLinklayer{Protocol: ethPAll, Ifindex: p.Ifindex()}); err != nil {
		return fmt.Errorf("bind: %w", os.NewSyscallError("bind", err))
	}
	return s.joinFanout()
}

// joinFanout puts the socket into the port's fanout group. The first
// socket asks the kernel for a group ID no group in this network
// namespace has (PACKET_FANOUT_FLAG_UNIQUEID) and reads it back; the
// others join that ID. No ID is guessed, so the port never joins a group
// of another process, which would silently take a share of its packets.
// The group ignores outgoing packets (PACKET_FANOUT_FLAG_IGNORE_OUTGOING),
// ours and the host's.
func (s *Socket) joinFanout() error {
	const typeFlags = unix.PACKET_FANOUT_HASH | unix.PACKET_FANOUT_FLAG_IGNORE_OUTGOING
	p := s.port
	if s.index == 0 {
		if err := unix.SetsockoptInt(s.fd, unix.SOL_PACKET, unix.PACKET_FANOUT, (typeFlags|unix.PACKET_FANOUT_FLAG_UNIQUEID)<<16); err != nil {
			return fmt.Errorf("create the fanout group: %w", os.NewSyscallError("setsockopt PACKET_FANOUT", err))
		}
		v, err := unix.GetsockoptInt(s.fd, unix.SOL_PACKET, unix.PACKET_FANOUT)
		if err != nil {
			return fmt.Errorf("read the fanout group ID: %w", os.NewSyscallError("getsockopt PACKET_FANOUT", err))
		}
		p.fanout = uint16(v)
		return nil
	}
	if err := unix.SetsockoptInt(s.fd, unix.SOL_PACKET, unix.PACKET_FANOUT, int(p.fanout)|typeFlags<<16); err != nil {
		return fmt.Errorf("join fanout group %d: %w", p.fanout, os.NewSyscallError("setsockopt PACKET_FANOUT", err))
	}
	return nil
}

// close closes the socket (through its File: waiters wake up, and the
// descriptor goes once no call uses it); idempotent.
func (s *Socket) close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.kernelStats() // the last counts, before they go
	s.kmu.Lock()
	s.kclosed = true
	s.kmu.Unlock()
	return s.file.Close()
}

// Index returns the socket's index in the port.
func (s *Socket) Index() int { return s.index }

// FrameSize returns the size of a small TX frame, headroom included: the
// forwarder's FrameSize.
func (s *Socket) FrameSize() int { return s.port.cfg.FrameSize }

// Frames returns the number of small TX frames of the socket's Sink.
func (s *Socket) Frames() int { return s.port.cfg.Frames }

// LargeFrames is the number of its Sink's frames for whole super-packets.
func (s *Socket) LargeFrames() int { return s.port.cfg.LargeFrames }

// stopRX makes every wait for received frames return at once, now and
// later.
func (s *Socket) stopRX() {
	s.stopped.Store(true)
	if !s.closed.Load() {
		s.file.SetReadDeadline(time.Unix(1, 0))
	}
}

// Stats returns the socket's counters, the kernel's included (as of
// Close, once closed).
func (s *Socket) Stats() Stats {
	kp, kd := s.kernelStats()
	st := &s.st
	return Stats{
		RX: st.rx.Load(), RXBytes: st.rxBytes.Load(), RXCalls: st.rxCalls.Load(), RXSuper: st.rxSuper.Load(),
		TX: st.tx.Load(), TXBytes: st.txBytes.Load(), TXCalls: st.txCalls.Load(), TXSuper: st.txSuper.Load(),
		TXPartial: st.txPartial.Load(), TXBusy: st.txBusy.Load(),
		Drops: Drops{
			Invalid: st.invalid.Load(), Truncated: st.truncated.Load(), Header: st.header.Load(),
			Unresolved: st.nextHop.Unresolved.Load(), NotRouted: st.nextHop.NotRouted.Load(), Refused: st.rf.Load(), Kernel: kd,
		},
		KernelPackets: kp,
	}
}

// kernelStats reads PACKET_STATISTICS, which the kernel clears on every
// read, into the running totals and returns them.
func (s *Socket) kernelStats() (packets, drops uint64) {
	s.kmu.Lock()
	defer s.kmu.Unlock()
	if !s.kclosed && s.rc != nil {
		s.rc.Control(func(fd uintptr) {
			if k, err := unix.GetsockoptTpacketStats(int(fd), unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
				s.kpkts += uint64(k.Packets)
				s.kdrops += uint64(k.Drops)
			}
		})
	}
	return s.kpkts, s.kdrops
}
