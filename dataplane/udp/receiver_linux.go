package udp

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/internal/iphdr"
	"github.com/gsoplane/gsoplane/internal/mmsg"
)

var _ frame.Receiver = (*Receiver)(nil)

// Receiver is the receive half of a VPN's tunnel, a frame.Receiver:
// it takes datagrams from a UDP socket with recvmmsg(2), many per system
// call, and asks the kernel to coalesce runs of them (UDP_GRO), so that
// one message carries up to 64 datagrams (a peer's UDP_SEGMENT message,
// which reaches the socket whole, up to 128, and any message up to
// 64 KiB is taken whole); it cuts them apart again,
// decapsulates each and hands out the inner packets behind their
// encapsulation header. Give it to pipeline.NewReturnPath with a TUN queue
// as the Writer and GRO on: the inner packets are merged again into
// super-packets and written into the TUN one super-packet per write.
//
// With ReceiverConfig.Peers it takes each datagram's source address with
// it, drops what comes from no peer's endpoint (or, with Roam, lets Open
// name its peer and moves the peer's endpoint there), tells Open each
// datagram's peer and drops an opened packet whose inner source the peer
// may not use: cryptokey routing's receive side. Datagrams Open marks
// Control (and, with Roam, an unknown sender's that Open names no peer
// for) go to OnControl instead of the return path.
//
// Receive blocks (through the Go runtime poller) until a datagram comes;
// a read deadline (SetReadDeadline, the socket's) ends it with an error
// wrapping os.ErrDeadlineExceeded, and closing the socket with one
// wrapping net.ErrClosed. A Receiver is used from one goroutine.
type Receiver struct {
	conn     *net.UDPConn
	rc       syscall.RawConn
	headroom int
	tailroom int
	openFn   OpenFunc
	bufs     [][]byte
	oob      [][]byte
	msgs     *mmsg.Batch
	pending  [][]byte // datagrams of the last recvmmsg not handed out yet
	dropped  []byte   // the frame handed out for a dropped datagram: Headroom bytes, an empty packet
	next     int
	toOpen   [][]byte  // the pending datagrams long enough to open
	openIdx  []int     // their index in pending
	peers    []int     // their peers, for Open
	verdicts []Verdict // Open's, for toOpen

	// Each message's source address, each pending datagram's message
	// and peer (0 without Peers, -1 unknown); with Peers, the table of
	// the batch at hand, the last inner source checked and the counts.
	names       [][]byte
	pendingMsg  []int32
	pendingPeer []int
	table       *Peers
	tab         *peerTable
	roam        bool
	onControl   func(from netip.AddrPort, peer int, b []byte)
	src         routeCache
	recvPeer    tally

	recvFn func(fd uintptr) bool // made once, so that Receive does not allocate
	got    int                   // messages of the last recvmmsg
	errno  unix.Errno
	st     receiverCounters
}

type receiverCounters struct {
	datagrams, messages, groMessages, syscalls, short, truncated, peerErrors atomic.Uint64
	unknownPeer, notAllowed, control, roamed                                 atomic.Uint64
	refused                                                                  [numVerdicts]atomic.Uint64
	gro                                                                      atomic.Bool
}

// NewReceiver returns a Receiver on conn, a UDP socket bound to the
// tunnel's local address (connected to the peer or not; not, for
// several peers). It turns UDP_GRO on where the kernel has it (Linux
// 5.0+); without it every datagram is a message of its own. The caller
// keeps conn and closes it to stop.
func NewReceiver(conn *net.UDPConn, cfg ReceiverConfig) (*Receiver, error) {
	if cfg.Messages == 0 {
		cfg.Messages = DefaultReceiverMessages
	}
	switch {
	case conn == nil:
		return nil, fmt.Errorf("udp: receiver: %w: no connection", frame.ErrInvalidConfig)
	case cfg.Headroom < 12 || cfg.Headroom > 1024:
		return nil, fmt.Errorf("udp: receiver: %w: headroom %d, want 12 to 1024 (room for a virtio-net header)", frame.ErrInvalidConfig, cfg.Headroom)
	case cfg.Tailroom < 0 || cfg.Tailroom > 1024:
		return nil, fmt.Errorf("udp: receiver: %w: tailroom %d, want 0 to 1024", frame.ErrInvalidConfig, cfg.Tailroom)
	case cfg.Messages < 1 || cfg.Messages > maxReceiverMessages:
		return nil, fmt.Errorf("udp: receiver: %w: %d messages, want 1 to %d", frame.ErrInvalidConfig, cfg.Messages, maxReceiverMessages)
	}
	rc, err := conn.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("udp: receiver: %w", err)
	}
	r := &Receiver{
		conn: conn, rc: rc, headroom: cfg.Headroom, tailroom: cfg.Tailroom, openFn: cfg.Open, msgs: mmsg.New(cfg.Messages),
		table: cfg.Peers, roam: cfg.Roam && cfg.Peers != nil, onControl: cfg.OnControl,
	}
	r.bufs, r.oob = make([][]byte, cfg.Messages), make([][]byte, cfg.Messages)
	oobLen := unix.CmsgSpace(4) // one UDP_GRO control message
	mem, oob := make([]byte, cfg.Messages*rxBufSize), make([]byte, cfg.Messages*oobLen)
	for i := range r.bufs {
		r.bufs[i] = mem[i*rxBufSize : (i+1)*rxBufSize : (i+1)*rxBufSize]
		r.oob[i] = oob[i*oobLen : (i+1)*oobLen]
		r.msgs.Set(i, r.bufs[i])
		r.msgs.SetControl(i, r.oob[i])
	}
	most := cfg.Messages * msgMaxSegments
	r.pending, r.toOpen, r.openIdx, r.verdicts = make([][]byte, 0, most), make([][]byte, 0, most), make([]int, 0, most), make([]Verdict, most)
	r.peers, r.dropped = make([]int, most), make([]byte, cfg.Headroom)
	r.names, r.pendingPeer, r.pendingMsg = make([][]byte, cfg.Messages), make([]int, 0, most), make([]int32, 0, most)
	names := make([]byte, cfg.Messages*unix.SizeofSockaddrInet6)
	for i := range r.names {
		r.names[i] = names[i*unix.SizeofSockaddrInet6 : (i+1)*unix.SizeofSockaddrInet6]
		r.msgs.SetName(i, r.names[i])
	}
	r.recvFn = r.recv
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 1) }); err != nil {
		return nil, fmt.Errorf("udp: receiver: %w", err)
	}
	r.st.gro.Store(serr == nil) // ENOPROTOOPT before Linux 5.0: one datagram per message
	return r, nil
}

// Headroom is the encapsulation header, ReceiverConfig.Headroom.
func (r *Receiver) Headroom() int { return r.headroom }

// SetReadDeadline sets the socket's read deadline (frame.ReadDeadliner):
// a ReturnPath wakes Receive with it when its context ends.
func (r *Receiver) SetReadDeadline(t time.Time) error { return r.conn.SetReadDeadline(t) }

// Receive hands out up to len(frames) datagrams: frame i is an
// encapsulation header of Headroom bytes and the inner packet behind it,
// opened and without its tailroom, a view valid until the next Receive.
// A datagram that is too short or that Open refused comes back with an
// empty packet (the return path counts it as invalid).
func (r *Receiver) Receive(frames [][]byte) (int, error) {
	if r.next == len(r.pending) {
		if err := r.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(frames, r.pending[r.next:])
	r.next += n
	r.st.datagrams.Add(uint64(n))
	return n, nil
}

// open opens the pending datagrams, in one call of Open, and leaves each
// as its headroom and inner packet; a short or refused one becomes
// r.dropped, an empty packet, and a control one goes to OnControl and
// out of pending.
func (r *Receiver) open() {
	r.toOpen, r.openIdx = r.toOpen[:0], r.openIdx[:0]
	for i, d := range r.pending {
		if len(d) < r.headroom+r.tailroom {
			r.st.short.Add(1)
			r.pending[i] = r.dropped // d may end closer than Headroom to its buffer's end
			continue
		}
		r.toOpen, r.openIdx = append(r.toOpen, d), append(r.openIdx, i)
	}
	if n := len(r.toOpen); n > len(r.verdicts) { // more than msgMaxSegments a message: grow once
		r.verdicts, r.peers = make([]Verdict, n), make([]int, n)
	}
	verdicts, peers := r.verdicts[:len(r.toOpen)], r.peers[:len(r.toOpen)]
	clear(verdicts)
	for k, i := range r.openIdx {
		peers[k] = r.pendingPeer[i]
	}
	if r.openFn != nil && len(r.toOpen) > 0 {
		r.openFn(r.toOpen, peers, verdicts)
	}
	controls := false
	for k, i := range r.openIdx {
		d, peer := r.pending[i], r.pendingPeer[i]
		if r.roam {
			peer = peers[k]
		}
		switch v := verdicts[k]; {
		case v == Control || v == Accept && peer < 0:
			r.control(i, peer, d)
			d, controls = nil, true
		case v != Accept:
			r.st.refused[min(v, DropMalformed)].Add(1)
			d = r.dropped
		case r.table == nil:
			d = d[:len(d)-r.tailroom]
		case peer != r.pendingPeer[i] && !r.roamTo(i, peer):
			r.st.unknownPeer.Add(1)
			d = r.dropped
		case !r.allowed(d, peer):
			r.st.notAllowed.Add(1)
			d = r.dropped
		default:
			r.recvPeer.add(peer, 1, uint64(len(d)))
			d = d[:len(d)-r.tailroom]
		}
		r.pending[i] = d
	}
	r.recvPeer.flush()
	clear(r.toOpen) // keep no views of the buffers
	if controls {
		r.pending = slices.DeleteFunc(r.pending, func(d []byte) bool { return d == nil })
	}
}

// control hands pending datagram i, of peer (-1: unknown), to OnControl.
func (r *Receiver) control(i, peer int, d []byte) {
	r.st.control.Add(1)
	if r.onControl != nil {
		r.onControl(r.from(i), peer, d)
	}
}

// from returns the source address of pending datagram i.
func (r *Receiver) from(i int) netip.AddrPort {
	k := r.pendingMsg[i]
	from, _ := parseSockaddr(r.names[k][:min(r.msgs.NameLen(int(k)), len(r.names[k]))])
	return from
}

// roamTo moves peer's endpoint to the source of pending datagram i, which
// Open said is the peer's: it reports false (the datagram is dropped) if
// there is no such peer or another has that endpoint, or the table
// changed meanwhile.
func (r *Receiver) roamTo(i, peer int) bool {
	if peer < 0 || peer >= len(r.tab.peers) {
		return false
	}
	from := r.from(i)
	if p, ok := r.tab.byEndpoint(from); ok && p == peer { // moved for an earlier datagram
		return true
	}
	r.table.mu.Lock()
	tab, err := r.table.setEndpoint(r.tab, peer, from)
	r.table.mu.Unlock()
	if err != nil {
		return false
	}
	r.st.roamed.Add(1)
	r.tab, r.recvPeer.t = tab, tab // the same peers and counters
	return true
}

// allowed reports whether the inner packet of the opened datagram d comes
// from a source peer may use.
func (r *Receiver) allowed(d []byte, peer int) bool {
	src, ok := iphdr.Src(d[r.headroom : len(d)-r.tailroom])
	if !ok {
		return false
	}
	p, ok := r.src.route(r.tab, src)
	return ok && p == peer
}

// fill waits for messages and cuts them into datagrams, until one is
// left to hand out after Open and the control ones.
func (r *Receiver) fill() error {
	for {
		r.pending, r.pendingPeer, r.pendingMsg, r.next = r.pending[:0], r.pendingPeer[:0], r.pendingMsg[:0], 0
		for len(r.pending) == 0 {
			if err := r.rc.Read(r.recvFn); err != nil {
				return fmt.Errorf("udp: receiver: %w", err)
			}
			if r.errno != 0 {
				return fmt.Errorf("udp: receiver: %w", os.NewSyscallError("recvmmsg", r.errno))
			}
			r.st.syscalls.Add(1)
			r.st.messages.Add(uint64(r.got))
			r.loadTable() // once per recvmmsg batch: a batch of strangers' datagrams, all dropped, is one too
			for k := range r.got {
				r.split(k)
			}
		}
		r.open()
		if len(r.pending) > 0 {
			return nil
		}
	}
}

// loadTable takes the peers' current table for the next batch.
func (r *Receiver) loadTable() {
	if r.table == nil {
		return
	}
	if tab := r.table.load(); tab != r.tab {
		r.tab, r.src, r.recvPeer = tab, routeCache{}, tally{t: tab, received: true}
	}
}

// recv runs recvmmsg for the runtime poller: false waits for the socket
// to become readable. An error that an ICMP message from the peer or the
// route left on the socket (the peer's port closed for a moment, a host
// unreachable) concerns the datagrams the sink sent, not receiving: it is
// counted and receiving goes on, as the sink goes on sending.
func (r *Receiver) recv(fd uintptr) bool {
	for {
		n, errno := r.msgs.Recv(fd, r.msgs.Len())
		switch errno {
		case unix.EAGAIN:
			return false
		case unix.EINTR:
			continue
		case unix.ECONNREFUSED, unix.EHOSTUNREACH, unix.ENETUNREACH, unix.EHOSTDOWN:
			r.st.peerErrors.Add(1)
			continue
		}
		r.got, r.errno = n, errno
		return true
	}
}

// split cuts message k into its datagrams, gso_size bytes each (the last
// may be shorter), as UDP_GRO says. With Peers, they are all the peer's
// whose endpoint sent the message (UDP_GRO merges one 4-tuple's), or
// dropped if it is no peer's.
func (r *Receiver) split(k int) {
	if r.msgs.Flags(k)&unix.MSG_TRUNC != 0 {
		r.st.truncated.Add(1)
		return
	}
	msg := r.bufs[k][:r.msgs.MsgLen(k)]
	size := groSize(r.oob[k][:r.msgs.ControlLen(k)])
	n := 1 // datagrams in the message
	if size > 0 && size < len(msg) {
		n = (len(msg) + size - 1) / size
	}
	peer, ok := r.sender(k, n)
	if !ok {
		return
	}
	if n > 1 {
		r.st.groMessages.Add(1)
	}
	for len(msg) > 0 {
		l := len(msg)
		if n > 1 {
			l = min(size, l)
		}
		r.pending, r.pendingPeer, r.pendingMsg = append(r.pending, msg[:l]), append(r.pendingPeer, peer), append(r.pendingMsg, int32(k))
		msg = msg[l:]
	}
}

// sender returns the peer of message k's n datagrams: 0 without Peers,
// -1 for none with Roam; without Roam it counts them dropped and reports
// false if the message comes from no peer's endpoint.
func (r *Receiver) sender(k, n int) (int, bool) {
	if r.table == nil {
		return 0, true
	}
	from, ok := parseSockaddr(r.names[k][:min(r.msgs.NameLen(k), len(r.names[k]))])
	if peer, known := r.tab.byEndpoint(from); ok && known {
		return peer, true
	}
	if r.roam {
		return -1, true
	}
	r.st.unknownPeer.Add(uint64(n))
	return 0, false
}

// parseSockaddr reads the address and port of a raw struct sockaddr_in or
// sockaddr_in6 (family in host byte order, port and address in network
// order), an IPv4-mapped IPv6 address as IPv4, without its scope.
func parseSockaddr(b []byte) (netip.AddrPort, bool) {
	if len(b) < 4 {
		return netip.AddrPort{}, false
	}
	port := binary.BigEndian.Uint16(b[2:])
	switch binary.NativeEndian.Uint16(b) {
	case unix.AF_INET:
		if len(b) >= unix.SizeofSockaddrInet4 {
			return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port), true
		}
	case unix.AF_INET6:
		if len(b) >= unix.SizeofSockaddrInet6 {
			return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])).Unmap(), port), true
		}
	}
	return netip.AddrPort{}, false
}

// groSize returns the segment size of a SOL_UDP/UDP_GRO control message
// in oob, or 0: struct cmsghdr is a size_t length and two ints, then the
// int payload, in host byte order.
func groSize(oob []byte) int {
	hdr := unix.CmsgLen(0)
	for len(oob) >= hdr {
		var l int
		if unix.SizeofCmsghdr == 16 {
			l = int(binary.NativeEndian.Uint64(oob))
		} else {
			l = int(binary.NativeEndian.Uint32(oob))
		}
		level := int32(binary.NativeEndian.Uint32(oob[hdr-8:]))
		typ := int32(binary.NativeEndian.Uint32(oob[hdr-4:]))
		if l < hdr || l > len(oob) {
			return 0
		}
		if level == unix.SOL_UDP && typ == unix.UDP_GRO && l >= hdr+4 {
			return int(binary.NativeEndian.Uint32(oob[hdr:]))
		}
		oob = oob[min(len(oob), unix.CmsgSpace(l-hdr)):]
	}
	return 0
}

// Stats returns a snapshot of the receiver's counters.
func (r *Receiver) Stats() ReceiverStats {
	c := &r.st
	s := ReceiverStats{
		Datagrams: c.datagrams.Load(), Messages: c.messages.Load(), GROMessages: c.groMessages.Load(),
		Syscalls: c.syscalls.Load(), Short: c.short.Load(), Truncated: c.truncated.Load(),
		PeerErrors: c.peerErrors.Load(), GRO: c.gro.Load(),
		UnknownPeer: c.unknownPeer.Load(), NotAllowed: c.notAllowed.Load(), Control: c.control.Load(), Roamed: c.roamed.Load(),
		Auth: c.refused[DropAuth].Load(), Replay: c.refused[DropReplay].Load(), Malformed: c.refused[DropMalformed].Load(),
	}
	s.Refused = s.Auth + s.Replay + s.Malformed
	return s
}
