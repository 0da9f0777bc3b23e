package afpacket

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/internal/egress"
	"github.com/gsoplane/gsoplane/dataplane/internal/framepool"
	"github.com/gsoplane/gsoplane/internal/ethernet"
	"github.com/gsoplane/gsoplane/internal/ethtool"
	"github.com/gsoplane/gsoplane/internal/mmsg"
	"github.com/gsoplane/gsoplane/segment"
)

// A Sink is a frame.OffloadSink and a frame.SyncSink.
var (
	_ frame.OffloadSink = (*Sink)(nil)
	_ frame.SyncSink    = (*Sink)(nil)
)

const (
	sinkBatch = 64 // most frames one sendmmsg carries
	// busyWait is how long Wait sleeps after the device refused a frame
	// (ENOBUFS: its queue was full, and a socket has no event for that).
	busyWait = 50 * time.Microsecond
	// gsoRefusals is how many times in a row the kernel may refuse the
	// same GSO frame with ENOBUFS before the sink takes it for a NIC that
	// no longer segments (its features changed): the frame is dropped
	// and the sink cuts every super-packet itself from then on.
	gsoRefusals = 32
)

// nic is what the NIC advertises, read once by NewSink.
type nic struct {
	tso4, tso6, tsoECN, uso bool // segmentation: TCPv4, TCPv6, TCP with ECN, UDP (USO)
	csum4, csum6            bool // TCP/UDP checksums over IPv4, IPv6
	gsoMaxSize, gso4MaxSize int  // skb length limits for GSO (the kernel segments longer ones in software)
	gsoMaxSegs              int
}

// Sink is the forwarder's OffloadSink on an AF_PACKET socket. Every frame
// starts with room for a virtio-net header and an Ethernet header, which
// Transmit fills in: the header from Frame.Header (csum_start counted from
// the Ethernet header, as packet sockets count it), the Ethernet
// destination from the kernel's routing and neighbour tables
// (dataplane/internal/nexthop). Transmit sends a batch with one sendmmsg(2); a
// frame is complete once the kernel has copied it, that is when sendmmsg
// returned, and Complete reports the frames taken since its last call, in
// order, and puts them back in the pool. The socket's send buffer holds
// the skbs until the driver frees them: when it is full, sendmmsg stops
// (EAGAIN) and Wait waits, through the Go runtime poller, for the socket
// to become writable; when the device's queue is full (ENOBUFS, the
// packet socket bypasses the qdisc) Wait sleeps briefly. Both are counted
// (TXBusy) and the frames are offered again.
//
// The frames are allocated once by NewSink: Config.Frames small ones for
// segments and Config.LargeFrames of LargeFrameSize for whole
// super-packets (AllocLarge), which the forwarder reads super-packets
// into where the sink hands them whole (see frame.OffloadSink). Alloc and Free may run concurrently with
// Transmit, Complete and Wait, which one goroutine (the sink loop) calls.
type Sink struct {
	s         *Socket
	layer     *egress.Layer
	mode      GSOMode
	nic       nic
	pool      *framepool.Pool
	frameSize int
	nLarge    int

	txMu    sync.Mutex // Transmit and Wait
	msgs    *mmsg.Batch
	busy    bool // the last send stopped on ENOBUFS
	gsoBusy int  // ENOBUFS in a row on a GSO frame
	gsoOff  atomic.Bool
	sendFn  func(uintptr)
	waitFn  func(uintptr) bool
	from    int // sendFn's arguments and results
	to      int
	sent    int
	errno   unix.Errno
	waited  bool
}

// NewSink returns a Sink transmitting on s, a socket of the interface
// with index ifindex, to gateway's MAC address or, if gateway is the zero
// Addr, to the next hop of each destination's route through the
// interface; mode says which offloads it uses (see GSOMode). It reads the
// NIC's features now: make a new Sink after changing them. Call it in the
// interface's network namespace: it starts a next-hop resolver there
// (dataplane/internal/nexthop: netlink sockets and goroutines). Close it when done
// (the Socket belongs to its port).
func NewSink(s *Socket, ifindex int, gateway netip.Addr, mode GSOMode) (*Sink, error) {
	if mode < GSOModeAuto || mode > GSOModeFull {
		return nil, fmt.Errorf("afpacket: sink: %w: mode %v", frame.ErrInvalidConfig, mode)
	}
	if s == nil || s.closed.Load() {
		return nil, ErrClosed
	}
	lnk, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return nil, fmt.Errorf("afpacket: sink: interface %d: %w", ifindex, err)
	}
	a := lnk.Attrs()
	feats, err := ethtool.Features(a.Name)
	if err != nil {
		return nil, fmt.Errorf("afpacket: sink: features of %s: %w", a.Name, err)
	}
	k := readNIC(feats, a)
	if mode == GSOModeOffload && !(k.tso4 || k.tso6 || k.uso) {
		return nil, fmt.Errorf("afpacket: sink on %s: %w (ethtool -K %s tso on)", a.Name, ErrNoOffload, a.Name)
	}
	cfg := s.port.cfg
	l, err := egress.New(egress.Config{
		Ifname: a.Name, Ifindex: ifindex, MAC: a.HardwareAddr, Gateway: gateway, Counts: &s.st.nextHop, Frames: cfg.Frames + cfg.LargeFrames,
	})
	if err != nil {
		return nil, fmt.Errorf("afpacket: sink: %w", err)
	}
	sk := &Sink{
		s: s, layer: l, mode: mode, nic: k,
		pool:      framepool.New(cfg.Frames, cfg.FrameSize, cfg.LargeFrames, LargeFrameSize),
		frameSize: cfg.FrameSize, nLarge: cfg.LargeFrames,
		msgs: mmsg.New(sinkBatch),
	}
	// Method values made once, so that Transmit and Wait do not allocate.
	sk.sendFn, sk.waitFn = sk.doSend, sk.doWait
	return sk, nil
}

// readNIC reads the offloads and GSO limits the NIC advertises.
func readNIC(f map[string]ethtool.Feature, a *netlink.LinkAttrs) nic {
	on := func(name string) bool { return f[name].Active }
	generic := on("tx-checksum-ip-generic") || on("tx-checksum-hw") // NETIF_F_HW_CSUM
	k := nic{
		tso4: on("tx-tcp-segmentation"), tso6: on("tx-tcp6-segmentation"),
		tsoECN: on("tx-tcp-ecn-segmentation"), uso: on("tx-udp-segmentation"),
		csum4: generic || on("tx-checksum-ipv4"), csum6: generic || on("tx-checksum-ipv6"),
		gsoMaxSize: int(a.GSOMaxSize), gso4MaxSize: int(a.GSOIPv4MaxSize), gsoMaxSegs: int(a.GSOMaxSegs),
	}
	// Kernels that do not report the limits have the legacy ones.
	if k.gsoMaxSize == 0 {
		k.gsoMaxSize = 65536
	}
	if k.gso4MaxSize == 0 {
		k.gso4MaxSize = k.gsoMaxSize
	}
	if k.gsoMaxSegs == 0 {
		k.gsoMaxSegs = 65535
	}
	return k
}

// GSOPlan says what a Sink in mode made now would leave to the NIC, by
// the features it advertises: "offload" and the kinds it segments (of
// TCPv4, TCPv6 and UDP; the others are cut here), "partial" where it
// segments none but completes checksums, else "full". It is what the
// gateway logs; the Sink decides per super-packet (Offload).
func (p *Port) GSOPlan(mode GSOMode) (string, error) {
	feats, err := ethtool.Features(p.cfg.Ifname)
	if err != nil {
		return "", fmt.Errorf("afpacket: features of %s: %w", p.cfg.Ifname, err)
	}
	return readNIC(feats, &netlink.LinkAttrs{}).plan(mode), nil
}

// plan is GSOPlan for a NIC with features k.
func (k nic) plan(mode GSOMode) string {
	var kinds []string
	for _, c := range []struct {
		on   bool
		kind string
	}{{k.tso4, "TCPv4"}, {k.tso6, "TCPv6"}, {k.uso, "UDP"}} {
		if c.on && (mode == GSOModeAuto || mode == GSOModeOffload) {
			kinds = append(kinds, c.kind)
		}
	}
	switch {
	case len(kinds) > 0:
		return "offload (the NIC segments " + strings.Join(kinds, ", ") + ")"
	case mode != GSOModeFull && (k.csum4 || k.csum6):
		return "partial (cut here, checksums by the NIC)"
	}
	return "full (cut and checksummed here)"
}

// SetReplier sets who answers the senders of packets whose next hop
// failed to resolve (nil: nobody), with an ICMP error. Call it before the
// sink is used.
func (s *Sink) SetReplier(r frame.Replier) { s.layer.SetReplier(r) }

// SetLinkUp tells the sink whether the NIC is up. While it is down,
// Transmit sends nothing: the frames wait in the forwarder's queue and
// the budget holds the senders back, rather than their next hops, which
// the kernel forgets on a link that goes down, failing to resolve.
func (s *Sink) SetLinkUp(up bool) { s.layer.SetLinkUp(up) }

// SetMAC tells the sink the NIC's MAC address after it changed: the
// frames it transmits from then on carry it as their source.
func (s *Sink) SetMAC(mac net.HardwareAddr) { s.layer.SetMAC(mac) }

// Close stops the sink's next-hop resolver and drops the frames waiting
// for their next hop, once the forwarder is done with the sink; the
// Socket belongs to its port.
func (s *Sink) Close() {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	s.layer.Close((*sinkWire)(s))
}

// Backlog is ready when frames that waited for their next hop are to be
// sent or dropped, even with nothing to Transmit (nil while none wait).
func (s *Sink) Backlog() <-chan struct{} { return s.layer.Backlog() }

// Headroom is the virtio-net header and the Ethernet header, which
// Transmit fills in.
func (s *Sink) Headroom() int { return Headroom }

// FrameSize is the size of a small frame, headroom included: the
// forwarder's FrameSize (a whole super-packet is charged as the segments
// the NIC cuts, each a small frame's truesize).
func (s *Sink) FrameSize() int { return s.frameSize }

// Mode returns the sink's GSO mode.
func (s *Sink) Mode() GSOMode { return s.mode }

// GSOOff reports whether the sink stopped handing whole super-packets to
// the NIC because the kernel kept refusing them (see Transmit).
func (s *Sink) GSOOff() bool { return s.gsoOff.Load() }

// Offload says what the NIC finishes for packets of layout l, per the
// sink's mode (see GSOMode).
func (s *Sink) Offload(l segment.Layout) frame.Offload {
	if s.mode == GSOModeFull {
		return frame.OffloadNone
	}
	if s.mode != GSOModePartial && l.Segments() > 1 && !s.gsoOff.Load() && s.segments(l) {
		return frame.OffloadGSO
	}
	if s.checksums(l) {
		return frame.OffloadCsum
	}
	return frame.OffloadNone
}

// segments reports whether the NIC segments the super-packet l itself:
// its kind (and ECN) is one the NIC does, the packet carries the partial
// checksum the NIC completes, and it is within the device's GSO limits. A
// GSO frame the NIC cannot take would need the kernel's software GSO,
// which a qdisc-bypassing packet socket does not get: __dev_direct_xmit
// drops the segment list validate_xmit_skb makes. A UDP-tunnel
// super-packet is always cut here: a packet socket's virtio-net header
// has no tunnel offsets (Linux 6.18 reads only the 10-byte header).
func (s *Sink) segments(l segment.Layout) bool {
	if l.Tunnel() {
		return false
	}
	k := &s.nic
	var kind bool
	switch l.Kind() {
	case segment.GSOTCPv4:
		kind = k.tso4 && (!l.ECN() || k.tsoECN)
	case segment.GSOTCPv6:
		kind = k.tso6 && (!l.ECN() || k.tsoECN)
	case segment.GSOUDPL4:
		kind = k.uso
	}
	size := ethernet.HeaderLen + l.HdrLen() + l.PayloadLen()
	limit := k.gsoMaxSize
	if !l.IPv6() {
		limit = k.gso4MaxSize
	}
	return kind && l.NeedsCsum() && s.nLarge > 0 && size < limit && l.Segments() <= k.gsoMaxSegs &&
		Headroom+size-ethernet.HeaderLen <= LargeFrameSize
}

// checksums reports whether the NIC completes TCP/UDP checksums of l's IP
// version.
func (s *Sink) checksums(l segment.Layout) bool {
	if l.Proto() != unix.IPPROTO_TCP && l.Proto() != unix.IPPROTO_UDP || l.Kind() == segment.GSOUDP {
		return false
	}
	if l.IPv6() {
		return s.nic.csum6
	}
	return s.nic.csum4
}

// Alloc takes free small frames.
func (s *Sink) Alloc(frames []frame.Frame) int { return s.pool.Alloc(frames) }

// AllocLarge takes a free frame for a whole super-packet of size bytes
// after the headroom; false when none is free, or when the sink hands no
// super-packet whole (GSOModePartial, GSOModeFull, GSOOff), so that the
// forwarder reads nothing into a frame that would only be cut. (A packet
// too large even for it gets one anyway, and the forwarder drops it as
// oversize.)
func (s *Sink) AllocLarge(size int) (frame.Frame, bool) {
	if s.mode == GSOModePartial || s.mode == GSOModeFull || s.gsoOff.Load() {
		return frame.Frame{}, false
	}
	return s.pool.AllocLarge()
}

// Free returns allocated frames that will not be sent; frames that are
// not allocated are ignored.
func (s *Sink) Free(frames []frame.Frame) { s.pool.Free(frames) }

// Transmit sends frames in order, at most 64 per call, and returns how
// many it took: sent, kept for a next hop being resolved (see Backlog),
// or dropped and counted (a next hop the kernel could not resolve, see
// Unresolved; a frame the kernel refused). It first sends or drops the
// kept frames whose next hop resolved or failed. It stops early when the
// socket's send buffer or the device's queue is full or the link is
// down; the rest is offered again after Wait. A whole super-packet the
// kernel refuses 32 times in a row
// (ENOBUFS: the NIC's features changed and it no longer segments, see
// GSOOff) is dropped, and the sink cuts every super-packet itself from
// then on. A frame that is not an allocated frame, or whose length does
// not fit it, stops the batch with ErrBadFrame; a closed socket, with
// ErrClosed; an interface that is gone, with the kernel's error.
func (s *Sink) Transmit(frames []frame.Frame) (int, error) {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	if s.s.closed.Load() {
		return 0, ErrClosed
	}
	s.busy = false
	return s.layer.Transmit(frames[:min(len(frames), sinkBatch)], (*sinkWire)(s))
}

// sinkWire is the sink as its link layer's egress.Wire.
type sinkWire Sink

// Check returns how many frames from the front are allocated frames with
// a length that fits them, and the error about the first that is not.
func (w *sinkWire) Check(frames []frame.Frame) (int, error) {
	good := w.pool.Allocated(frames, Headroom)
	if good < len(frames) {
		f := frames[good]
		return good, fmt.Errorf("afpacket: transmit: frame %d length %d: %w", f.ID, f.Len, ErrBadFrame)
	}
	return good, nil
}

// Packet returns the frame's Ethernet header and packet.
func (w *sinkWire) Packet(f frame.Frame) (eth, pkt []byte) {
	b := w.pool.Frame(uint32(f.ID))
	return b[vnetHdrLen:Headroom], b[Headroom : Headroom+f.Len]
}

// Send writes the frames' virtio-net headers, points the messages at
// them and sends them.
func (w *sinkWire) Send(frames []frame.Frame) (int, bool, error) {
	return w.sendFrames(frames, false)
}

// SendKept sends kept frames, which go back to the pool once sent.
func (w *sinkWire) SendKept(frames []frame.Frame) (int, bool, error) {
	return w.sendFrames(frames, true)
}

// Discard takes a frame dropped for want of a next hop.
func (w *sinkWire) Discard(f frame.Frame) { w.pool.Take([]frame.Frame{f}) }

// Keep keeps a frame that waits for its next hop, if one in
// egress.QueueShare of the frames of its size is not kept already.
func (w *sinkWire) Keep(f frame.Frame) bool { return w.pool.Keep(f, egress.QueueShare) }

// Release puts a kept frame back.
func (w *sinkWire) Release(f frame.Frame) { w.pool.Release([]frame.Frame{f}) }

// sendFrames writes the frames' virtio-net headers, points the messages
// at them and sends them.
func (w *sinkWire) sendFrames(frames []frame.Frame, kept bool) (int, bool, error) {
	for i, f := range frames {
		b := w.pool.Frame(uint32(f.ID))
		putVnetHeader(b, f.Header, f.Len)
		w.msgs.Set(i, b[:Headroom+f.Len])
	}
	return (*Sink)(w).send(frames, kept)
}

// putVnetHeader writes the virtio-net header of a frame whose n-byte
// packet has the segment header h, at the front of b: its offsets count
// from the Ethernet header, as packet sockets count them.
func putVnetHeader(b []byte, h segment.Header, n int) {
	if h.NeedsCsum() {
		h.CsumStart += ethernet.HeaderLen
	}
	if h.HdrLen != 0 {
		h.HdrLen = uint16(min(int(h.HdrLen)+ethernet.HeaderLen, ethernet.HeaderLen+n))
	}
	h.Encode(b[:vnetHdrLen], vnetHdrLen)
}

// send sends the m prepared messages and returns how many frames it took
// (sent or refused) and whether to stop the batch (a full send buffer or
// device queue).
func (s *Sink) send(frames []frame.Frame, kept bool) (taken int, stop bool, err error) {
	m := len(frames)
	defer s.msgs.Clear(m)
	for taken < m {
		s.from, s.to = taken, m
		if cerr := s.s.rc.Control(s.sendFn); cerr != nil {
			return taken, true, ErrClosed
		}
		s.s.st.txCalls.Add(1)
		if s.sent > 0 {
			s.account(frames[taken : taken+s.sent])
			s.done(frames[taken:taken+s.sent], kept)
			taken += s.sent
			s.gsoBusy = 0
			continue
		}
		switch s.errno {
		case unix.EINTR:
		case unix.EAGAIN:
			s.s.st.txBusy.Add(1)
			return taken, true, nil
		case unix.ENOBUFS:
			// The device's queue was full, or (with a GSO frame) the
			// NIC does not segment it: a packet socket that bypasses
			// the qdisc gets no software GSO, the kernel drops the
			// packet and says ENOBUFS either way.
			if s.pool.Frame(uint32(frames[taken].ID))[1] != 0 {
				if s.gsoBusy++; s.gsoBusy >= gsoRefusals {
					s.gsoOff.Store(true)
					s.gsoBusy = 0
					s.s.st.rf.Add(1)
					s.done(frames[taken:taken+1], kept)
					taken++
					continue
				}
			}
			s.s.st.txBusy.Add(1)
			s.busy = true
			return taken, true, nil
		case unix.ENETDOWN:
			// The link is down: hold the frames, as for a full queue,
			// until it is up again (or the forwarder gives up on them).
			s.s.st.txBusy.Add(1)
			s.busy = true
			return taken, true, nil
		case unix.EINVAL, unix.EMSGSIZE, unix.EFAULT, unix.EPROTONOSUPPORT:
			// The kernel refused this frame (a header it cannot
			// use): it is dropped, not fatal.
			s.s.st.rf.Add(1)
			s.done(frames[taken:taken+1], kept)
			taken++
		case unix.EBADF:
			return taken, true, ErrClosed
		default:
			return taken, true, fmt.Errorf("afpacket: transmit on socket %d: %w", s.s.index, os.NewSyscallError("sendmmsg", s.errno))
		}
	}
	return taken, false, nil
}

// doSend is sendFn: one sendmmsg of messages [from, to).
func (s *Sink) doSend(fd uintptr) { s.sent, s.errno = s.msgs.Send(fd, s.from, s.to) }

// done marks frames the kernel took (sent or refused): taken, for
// Complete to report, or, kept ones, put back.
func (s *Sink) done(frames []frame.Frame, kept bool) {
	if kept {
		s.pool.Release(frames)
	} else {
		s.pool.Take(frames)
	}
}

// account counts frames as sent.
func (s *Sink) account(frames []frame.Frame) {
	var bytes, super, partial uint64
	for _, f := range frames {
		b := s.pool.Frame(uint32(f.ID))
		bytes += uint64(ethernet.HeaderLen + f.Len)
		if b[1] != 0 { // gso_type
			super++
		} else if b[0]&segment.FlagNeedsCsum != 0 {
			partial++
		}
	}
	st := &s.s.st
	st.tx.Add(uint64(len(frames)))
	st.txBytes.Add(bytes)
	st.txSuper.Add(super)
	st.txPartial.Add(partial)
}

// Drops returns how many frames the sink dropped, by reason:
// DropUnresolved (a next hop the kernel could not resolve, or no room in
// the queue for one) and DropNotRouted.
func (s *Sink) Drops() frame.Drops { return s.layer.Drops() }

// HostControl returns how many frames the sink discarded as the host's
// own link signalling: neighbour discovery, MLD, IGMP (not drops).
func (s *Sink) HostControl() uint64 { return s.layer.HostControl() }

// Complete returns how many frames Transmit took since the last call,
// in order; their frames are free again, but for those kept for their
// next hop. Frames are complete once the kernel has copied them, so this
// never waits.
func (s *Sink) Complete() (int, error) { return s.pool.Complete(), nil }

// Wait waits up to d until the socket can take frames again: for its
// send buffer to drain (the runtime poller wakes it when the socket
// becomes writable), or briefly after the device's queue was full or the
// link down.
func (s *Sink) Wait(d time.Duration) error {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	if s.s.closed.Load() {
		return nil // Complete reports nothing more; the forwarder stops by its queue
	}
	if s.layer.Wait(d) {
		return nil
	}
	if s.busy || d <= 0 {
		time.Sleep(min(d, busyWait))
		return nil
	}
	if err := s.s.file.SetWriteDeadline(time.Now().Add(d)); err != nil {
		return nil
	}
	s.waited = false
	s.s.rc.Write(s.waitFn) // a deadline or a closed socket ends it too
	return nil
}

// doWait is waitFn: the first call asks the poller to wait for the
// socket to become writable, the call after the wakeup ends the wait.
func (s *Sink) doWait(uintptr) bool {
	if s.waited {
		return true
	}
	s.waited = true
	return false
}

// CompletesOnTransmit reports true: a frame is complete once sendmmsg
// has copied it (frame.SyncSink).
func (s *Sink) CompletesOnTransmit() bool { return true }
