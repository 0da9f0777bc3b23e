package udp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/internal/framepool"
	"github.com/gsoplane/gsoplane/internal/iphdr"
)

var _ frame.Sink = (*Sink)(nil)

// Sink is a frame.Sink that sends every segment, an IP packet behind
// Headroom bytes of encapsulation header, as the payload of one UDP
// datagram on a connected UDP socket: the way a VPN such as WireGuard
// sends its tunnel traffic to the peer. With SinkConfig.Peers it sends
// on an unconnected socket to several peers instead, each datagram to
// the peer its packet's inner destination routes to.
//
// Transmit hands a batch to the kernel with sendmmsg(2), and coalesces
// each run of consecutive frames of equal length as sealed (the last of a
// run may be shorter; Seal may pad) to one peer into one message with a UDP_SEGMENT control
// message, up to 64 datagrams and 65507 bytes per message: the kernel
// then cuts the run into datagrams itself, late, or lets the NIC do it.
// Like the kernel's own UDP sockets, a full socket send buffer blocks
// Transmit through the Go runtime poller.
//
// When the kernel refuses a UDP_SEGMENT message (EMSGSIZE: its datagrams
// are over the path MTU to the peer; EINVAL or EIO: over it on older
// kernels, a socket with SO_NO_CHECK, an IPsec route), the message
// is sent again one datagram per message, which the kernel fragments if
// need be, and so are that peer's datagrams of that size or larger for a
// second: then UDP_SEGMENT is tried again for the peer (a re-probe,
// SinkStats.Reprobes), so that it comes back within a second of the path
// MTU. A refusal concerns its peer only: the path MTU is the
// destination's, and a forged ICMP "fragmentation needed" that the
// kernel took for one peer costs the other peers nothing. A re-probe the
// kernel refuses again costs one sendmmsg call, once a second per peer.
//
// A frame is complete when the send returned: Complete reports the frames
// taken since its last call, in order, and puts them back in the pool.
// Errors that concern the peer or the route (ECONNREFUSED after an ICMP
// port unreachable, EHOSTUNREACH, ...) are counted and the message's
// frames dropped: they complete like sent ones and are never fatal.
// ENOBUFS (a full qdisc dropped the
// message: the kernel says so only on a socket with IP_RECVERR or
// IPV6_RECVERR, and drops silently otherwise) stops Transmit, which
// returns how many it took; the rest is offered again after Wait. Only a
// closed or broken socket makes Transmit return an error.
//
// Frames come from a pool allocated once by NewSink; the hot path does
// not allocate. Alloc and Free may run concurrently with Transmit,
// Complete and Wait, which one goroutine (the sink loop) calls.
type Sink struct {
	pc         batchWriter
	headroom   int
	tailroom   int
	frameSize  int
	seal       SealFunc
	onFallback func(Fallback, error)
	pool       *framepool.Pool // every frame, allocated once

	txMu      sync.Mutex // Transmit
	msgs      []ipv4.Message
	iovs      [][]byte      // one per frame of the chunk at hand
	oob       [][]byte      // one UDP_SEGMENT control message per message
	first     []int         // first frame of each message
	segs      []int         // the number of frames of each message (frames without a peer lie between messages)
	sealed    []atomic.Bool // frame i was prepared (room zeroed, routed, sealed) since Alloc handed it out
	dlen      []int32       // frame i's datagram length as sealed; 0: not sent (Seal emptied it)
	toSeal    [][]byte      // the datagrams of the chunk at hand not sealed yet
	sealPeers []int         // their peers
	sealIDs   []uint64      // their frames
	fellBack  [FallbackMsgSize + 1]bool
	gso       bool      // whether the kernel knows UDP_SEGMENT
	gsoPeers  []gsoPeer // per peer (one without Peers)

	// With Peers: the table the frames were routed with (see
	// takeTable), each frame's peer (-1: none), each message's, the last
	// destination routed and the sent counts.
	peers     *Peers
	tab       *peerTable
	framePeer []int32
	msgPeer   []int
	dst       routeCache
	sentPeer  tally

	st udpSinkCounters
}

// batchWriter is ipv4.PacketConn or ipv6.PacketConn: sendmmsg on the
// socket, through the runtime poller (a full send buffer parks the caller
// until the socket is writable).
type batchWriter interface {
	WriteBatch(ms []ipv4.Message, flags int) (int, error)
}

type udpSinkCounters struct {
	datagrams, messages, gsoMessages, bytes, syscalls, dropped, noPeer atomic.Uint64
	refused, unreachable, msgSize, noBufs, gsoRefused, other           atomic.Uint64
	reprobes, unsealed                                                 atomic.Uint64
}

// gsoRetry is how long a peer's datagrams of a size the kernel refused
// in a UDP_SEGMENT message go one per message before UDP_SEGMENT is
// tried again for them.
const gsoRetry = time.Second

// gsoPeer is what the kernel refused of UDP_SEGMENT for one peer.
type gsoPeer struct {
	tooBig int       // the smallest datagram size refused; 0: none
	retry  time.Time // when to try that size again
}

// coalesces reports whether datagrams of size go to peer in UDP_SEGMENT
// messages: unless the kernel refused that size for the peer less than
// gsoRetry ago. The first call after that re-probes.
func (s *Sink) coalesces(peer, size int) bool {
	g := &s.gsoPeers[peer]
	switch {
	case !s.gso:
		return false
	case g.tooBig == 0 || size < g.tooBig:
		return true
	case time.Now().Before(g.retry):
		return false
	}
	g.tooBig = 0
	s.st.reprobes.Add(1)
	s.perPeer(peer, func(c *peerCounters) { c.reprobes.Add(1) })
	return true
}

// refused records that the kernel refused a UDP_SEGMENT message of
// datagrams of size to peer, for reason f (err).
func (s *Sink) refused(peer, size int, f Fallback, err error) {
	if f == FallbackMsgSize {
		s.st.msgSize.Add(1)
	} else {
		s.st.gsoRefused.Add(1)
	}
	s.perPeer(peer, func(c *peerCounters) { c.gsoRefused.Add(1) })
	g := &s.gsoPeers[peer]
	if g.tooBig == 0 || size < g.tooBig {
		g.tooBig = size
	}
	g.retry = time.Now().Add(gsoRetry)
	s.fallBack(f, err)
}

// perPeer adds to peer's counters in Peers, if the sink has Peers.
func (s *Sink) perPeer(peer int, add func(*peerCounters)) {
	if s.tab != nil {
		add(s.tab.counters[peer])
	}
}

// NewSink returns a Sink sending on conn, which must be connected to
// the remote tunnel endpoint (net.DialUDP), or, with SinkConfig.Peers,
// bound and not connected (net.ListenUDP). The caller keeps conn: it may
// read from it (the tunnel's receive side) and closes it after the
// forwarder has stopped. A socket opened as a raw file descriptor (for
// example one bound to a device or with a firewall mark) is wrapped with
// os.NewFile and net.FilePacketConn first; make it non-blocking so that
// the runtime poller serves it.
func NewSink(conn *net.UDPConn, cfg SinkConfig) (*Sink, error) {
	if cfg.Frames == 0 {
		cfg.Frames = DefaultSinkFrames
	}
	if cfg.FrameSize == 0 {
		cfg.FrameSize = DefaultSinkFrameSize
	}
	switch {
	case conn == nil:
		return nil, errors.New("udp: sink: no connection")
	case cfg.Frames < 0 || cfg.Frames > maxUDPSinkFrames:
		return nil, fmt.Errorf("udp: sink: %d frames, want 1 to %d", cfg.Frames, maxUDPSinkFrames)
	case cfg.Headroom < 0 || cfg.Tailroom < 0 || cfg.FrameSize <= cfg.Headroom+cfg.Tailroom ||
		cfg.FrameSize > cfg.Headroom+cfg.Tailroom+1<<16:
		return nil, fmt.Errorf("udp: sink: frame size %d with headroom %d and tailroom %d", cfg.FrameSize, cfg.Headroom, cfg.Tailroom)
	}
	info, err := udpSocketInfo(conn)
	if err != nil {
		return nil, err
	}
	if err := info.check(cfg.Peers); err != nil {
		return nil, fmt.Errorf("udp: sink: %w", err)
	}
	s := &Sink{
		headroom:   cfg.Headroom,
		tailroom:   cfg.Tailroom,
		frameSize:  cfg.FrameSize,
		seal:       cfg.Seal,
		onFallback: cfg.OnFallback,
		pool:       framepool.New(cfg.Frames, cfg.FrameSize, 0, 0),
		msgs:       make([]ipv4.Message, udpSinkChunk),
		iovs:       make([][]byte, udpSinkChunk),
		oob:        make([][]byte, udpSinkChunk),
		first:      make([]int, udpSinkChunk),
		segs:       make([]int, udpSinkChunk),
		sealed:     make([]atomic.Bool, cfg.Frames),
		dlen:       make([]int32, cfg.Frames),
		toSeal:     make([][]byte, 0, udpSinkChunk),
		sealPeers:  make([]int, 0, udpSinkChunk),
		sealIDs:    make([]uint64, 0, udpSinkChunk),
		gso:        info.gso,
		gsoPeers:   make([]gsoPeer, 1),
		peers:      cfg.Peers,
	}
	if p := cfg.Peers; p != nil {
		s.framePeer, s.msgPeer = make([]int32, cfg.Frames), make([]int, udpSinkChunk)
		s.useTable(p.load())
	}
	if info.v6 {
		s.pc = ipv6.NewPacketConn(conn)
	} else {
		s.pc = ipv4.NewPacketConn(conn)
	}
	space := unix.CmsgSpace(2)
	oob := make([]byte, udpSinkChunk*space)
	for i := range s.oob {
		s.oob[i] = oob[i*space : (i+1)*space : (i+1)*space]
		putUDPSegmentCmsg(s.oob[i], 0)
	}
	return s, nil
}

// sinkSocket is what NewSink needs to know of its socket.
type sinkSocket struct {
	v6        bool       // AF_INET6
	v6only    bool       // IPV6_V6ONLY
	local     netip.Addr // the address it is bound to
	connected error      // nil if connected; else why not (getpeername's error)
	gso       bool       // whether the kernel knows UDP_SEGMENT
}

// udpSocketInfo reports conn's family, local address, whether it is
// connected and whether the kernel knows UDP_SEGMENT (Linux 4.18+; older
// kernels would ignore the control message and send one big datagram).
func udpSocketInfo(conn *net.UDPConn) (info sinkSocket, err error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return info, fmt.Errorf("udp: sink: %w", err)
	}
	var serr error
	cerr := rc.Control(func(fd uintptr) {
		domain, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DOMAIN)
		if err != nil {
			serr = os.NewSyscallError("getsockopt SO_DOMAIN", err)
			return
		}
		if info.v6 = domain == unix.AF_INET6; info.v6 {
			v6only, _ := unix.GetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_V6ONLY)
			info.v6only = v6only != 0
		}
		switch sa, err := unix.Getsockname(int(fd)); sa := sa.(type) {
		case *unix.SockaddrInet4:
			info.local = netip.AddrFrom4(sa.Addr)
		case *unix.SockaddrInet6:
			info.local = netip.AddrFrom16(sa.Addr)
		default:
			serr = fmt.Errorf("not a UDP socket: %w", os.NewSyscallError("getsockname", err))
			return
		}
		if _, err := unix.Getpeername(int(fd)); err != nil {
			info.connected = os.NewSyscallError("getpeername", err)
		}
		_, probe := unix.GetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_SEGMENT)
		info.gso = probe == nil
	})
	if err := errors.Join(cerr, serr); err != nil {
		return info, fmt.Errorf("udp: sink: %w", err)
	}
	return info, nil
}

// check refuses a socket that cannot send to peers: a connected one, one
// of another family than an endpoint's; or, without peers, one that is
// not connected.
func (info sinkSocket) check(peers *Peers) error {
	switch {
	case peers == nil && info.connected != nil:
		return fmt.Errorf("socket not connected to the tunnel endpoint (use net.DialUDP, or give Peers): %w", info.connected)
	case peers == nil:
		return nil
	case info.connected == nil:
		return errors.New("socket connected: with Peers it must be bound and not connected (net.ListenUDP)")
	}
	for i, p := range peers.load().peers {
		ep := p.Endpoint.Addr()
		switch {
		case !info.v6 && ep.Is6():
			return fmt.Errorf("peer %d: IPv6 endpoint %v on an IPv4 socket", i, p.Endpoint)
		case info.v6 && ep.Is4() && (info.v6only || !info.local.IsUnspecified() && !info.local.Is4In6()):
			return fmt.Errorf("peer %d: IPv4 endpoint %v on an IPv6 socket bound to %v, IPV6_V6ONLY %v: bind one on all addresses without IPV6_V6ONLY (net.ListenUDP(\"udp\", ...)) for both families", i, p.Endpoint, info.local, info.v6only)
		case info.v6 && ep.Is6() && info.local.Is4In6():
			return fmt.Errorf("peer %d: IPv6 endpoint %v on a socket bound to the IPv4 address %v", i, p.Endpoint, info.local)
		}
	}
	return nil
}

// putUDPSegmentCmsg writes a SOL_UDP/UDP_SEGMENT control message with the
// given segment size into b (unix.CmsgSpace(2) bytes): struct cmsghdr is
// a size_t length and two ints, in host byte order.
func putUDPSegmentCmsg(b []byte, size uint16) {
	if unix.SizeofCmsghdr == 16 {
		binary.NativeEndian.PutUint64(b[0:], uint64(unix.CmsgLen(2)))
		binary.NativeEndian.PutUint32(b[8:], unix.SOL_UDP)
		binary.NativeEndian.PutUint32(b[12:], unix.UDP_SEGMENT)
	} else {
		binary.NativeEndian.PutUint32(b[0:], uint32(unix.CmsgLen(2)))
		binary.NativeEndian.PutUint32(b[4:], unix.SOL_UDP)
		binary.NativeEndian.PutUint32(b[8:], unix.UDP_SEGMENT)
	}
	binary.NativeEndian.PutUint16(b[unix.CmsgLen(0):], size)
}

// Headroom is the encapsulation header's room, SinkConfig.Headroom.
func (s *Sink) Headroom() int { return s.headroom }

// FrameSize is the size of each frame, headroom and tailroom included:
// the Forwarder's FrameSize.
func (s *Sink) FrameSize() int { return s.frameSize }

// Frames is the size of the frame pool.
func (s *Sink) Frames() int { return s.pool.Small() }

// Alloc takes free frames from the pool. Each frame's Buf ends Tailroom
// bytes before the frame does: the room is the trailer's.
func (s *Sink) Alloc(frames []frame.Frame) int {
	n := s.pool.Alloc(frames)
	for i := range frames[:n] {
		f := &frames[i]
		f.Buf = f.Buf[:s.frameSize-s.tailroom]
		s.sealed[f.ID].Store(false)
	}
	return n
}

// Free returns frames that were allocated and not transmitted. Frames
// that are not out of this sink's pool are ignored.
func (s *Sink) Free(frames []frame.Frame) { s.pool.Free(frames) }

// Transmit sends frames in order and returns how many it took: all of
// them, unless ENOBUFS stopped it (the rest is offered again) or the
// socket failed (the error says why). Frames dropped for a counted error
// or for want of a peer are taken like sent ones. A full send buffer
// blocks it.
func (s *Sink) Transmit(frames []frame.Frame) (int, error) {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	var bad error
	for i, f := range frames {
		if err := s.check(f); err != nil {
			frames, bad = frames[:i], err
			break
		}
	}
	s.takeTable(frames)
	taken := 0
	var err error
	for taken < len(frames) {
		chunk := frames[taken:min(len(frames), taken+udpSinkChunk)]
		n, more, serr := s.send(chunk)
		s.noPeers(chunk[:n])
		s.pool.Take(chunk[:n])
		taken += n
		if serr != nil || !more {
			err, bad = serr, nil
			break
		}
	}
	if bad != nil {
		err = bad
	}
	return taken, err
}

// check reports whether f is a frame of this sink holding a packet.
func (s *Sink) check(f frame.Frame) error {
	if f.ID >= uint64(s.pool.Small()) || f.Len < 0 || s.headroom+f.Len > len(f.Buf) ||
		cap(f.Buf) == 0 || &f.Buf[:1][0] != &s.pool.Frame(uint32(f.ID))[0] {
		return fmt.Errorf("udp: sink: transmit frame %d (%d bytes): %w", f.ID, f.Len, ErrForeignFrame)
	}
	return nil
}

// takeTable switches to the peers' current table when it changed
// (Peers.Set, Peers.SetEndpoint), unless a frame of frames was routed
// and sealed with the one at hand (offered again after ENOBUFS): its
// peer index is that table's. The next Transmit switches then.
func (s *Sink) takeTable(frames []frame.Frame) {
	if s.peers == nil {
		return
	}
	cur := s.peers.load()
	if cur == s.tab {
		return
	}
	for _, f := range frames {
		if s.sealed[f.ID].Load() {
			return
		}
	}
	s.useTable(cur)
}

// useTable routes with tab from now on; what the kernel refused of
// UDP_SEGMENT for the old table's peers is forgotten (their paths may
// have changed).
func (s *Sink) useTable(tab *peerTable) {
	s.tab, s.dst = tab, routeCache{}
	s.sentPeer = tally{t: tab}
	if len(s.gsoPeers) != len(tab.peers) {
		s.gsoPeers = make([]gsoPeer, len(tab.peers))
	}
	clear(s.gsoPeers)
}

// send sends one chunk with as few sendmmsg calls as the kernel allows.
// It returns how many frames it took, whether Transmit should go on (it
// stops after ENOBUFS) and an error only when the socket is unusable.
// When the kernel refuses a UDP_SEGMENT message it returns early, with
// more set, so that Transmit builds the rest of the chunk again.
func (s *Sink) send(chunk []frame.Frame) (taken int, more bool, err error) {
	m := s.build(chunk)
	defer s.sentPeer.flush()
	for k := 0; k < m; {
		n, err := s.pc.WriteBatch(s.msgs[k:m], 0)
		s.st.syscalls.Add(1)
		if n > 0 { // sendmmsg reports an error only when nothing was sent
			s.sent(k, k+n)
			k += n
			continue
		}
		if err == nil { // nothing sent, nothing said: offer it again later
			return s.first[k], false, nil
		}
		var errno syscall.Errno
		errors.As(err, &errno)
		segs, size := s.segs[k], len(s.msgs[k].Buffers[0])
		switch {
		case errno == unix.EINTR:
			continue
		case errno == unix.ENOBUFS:
			s.st.noBufs.Add(1)
			return s.first[k], false, nil
		case segs > 1 && (errno == unix.EIO || errno == unix.EINVAL):
			s.refused(s.peerOfMsg(k), size, FallbackGSORefused, err)
			return s.first[k], true, nil
		case segs > 1 && errno == unix.EMSGSIZE: // a datagram is over the path MTU
			s.refused(s.peerOfMsg(k), size, FallbackMsgSize, err)
			return s.first[k], true, nil
		case udpFatal(errno):
			return s.first[k], false, fmt.Errorf("udp: sink: %w", err)
		}
		s.lost(errno, segs)
		k++
	}
	return len(chunk), true, nil
}

// fallBack reports the first fall-back of each kind to OnFallback.
func (s *Sink) fallBack(f Fallback, err error) {
	if s.fellBack[f] {
		return
	}
	s.fellBack[f] = true
	if s.onFallback != nil {
		s.onFallback(f, fmt.Errorf("udp: sink: %s: %w", f, err))
	}
}

// udpFatal reports whether a send error means the socket is unusable: it
// was closed (no errno) or is not a connected socket any more.
func udpFatal(errno syscall.Errno) bool {
	switch errno {
	case 0, unix.EBADF, unix.ENOTSOCK, unix.ENOTCONN, unix.EDESTADDRREQ, unix.EPIPE, unix.EFAULT:
		return true
	}
	return false
}

// lost counts a message of segs frames dropped for errno.
func (s *Sink) lost(errno syscall.Errno, segs int) {
	s.st.dropped.Add(uint64(segs))
	switch errno {
	case unix.ECONNREFUSED:
		s.st.refused.Add(1)
	case unix.EHOSTUNREACH, unix.ENETUNREACH, unix.EHOSTDOWN, unix.ENETDOWN:
		s.st.unreachable.Add(1)
	case unix.EMSGSIZE:
		s.st.msgSize.Add(1)
	default:
		s.st.other.Add(1)
	}
}

// build lays chunk out as messages: runs of equal-length frames (the last
// may be shorter) to one peer become UDP_SEGMENT messages while GSO is
// on, every other frame a message of its own; a frame without a peer
// goes in none. Frames not yet routed and sealed are first. It returns
// the number of messages.
func (s *Sink) build(chunk []frame.Frame) int {
	s.prepare(chunk)
	m := 0
	for i := 0; i < len(chunk); {
		peer := s.dest(chunk[i])
		if peer < 0 {
			i++
			continue
		}
		size := s.datagramLen(chunk[i])
		j := i + 1
		if s.coalesces(peer, size) {
			for total := size; j < len(chunk) && j-i < udpGSOMaxSegments; {
				next := s.datagramLen(chunk[j])
				if next > size || total+next > udpMaxPayload || s.dest(chunk[j]) != peer {
					break
				}
				total += next
				j++
				if next < size {
					break
				}
			}
		}
		for x := i; x < j; x++ {
			s.iovs[x] = s.datagram(chunk[x])
		}
		msg := &s.msgs[m]
		msg.Buffers, msg.OOB, msg.Addr = s.iovs[i:j], nil, nil
		if j-i > 1 {
			putUDPSegmentCmsg(s.oob[m], uint16(size))
			msg.OOB = s.oob[m]
		}
		if s.peers != nil {
			msg.Addr, s.msgPeer[m] = s.tab.addrs[peer], peer
		}
		s.first[m], s.segs[m] = i, j-i
		i = j
		m++
	}
	return m
}

// prepare zeroes the headroom and tailroom (which hold what the frame
// held before), routes (with Peers) and seals, in one call of Seal, the
// frames of chunk that were not yet, and notes each one's sealed
// length: a frame offered again after ENOBUFS keeps its peer, which its
// sealed packet no longer tells, and its length.
func (s *Sink) prepare(chunk []frame.Frame) {
	s.toSeal, s.sealPeers, s.sealIDs = s.toSeal[:0], s.sealPeers[:0], s.sealIDs[:0]
	for _, f := range chunk {
		if s.sealed[f.ID].Load() {
			continue
		}
		s.sealed[f.ID].Store(true)
		n := s.headroom + f.Len + s.tailroom
		d := f.Buf[:n:s.frameSize]
		clear(d[:s.headroom])
		clear(d[n-s.tailroom:])
		s.dlen[f.ID] = int32(n)
		peer := 0
		if s.peers != nil {
			peer = s.route(f)
			s.framePeer[f.ID] = int32(peer)
		}
		if s.seal != nil && peer >= 0 {
			s.toSeal, s.sealPeers, s.sealIDs = append(s.toSeal, d), append(s.sealPeers, peer), append(s.sealIDs, f.ID)
		}
	}
	if len(s.toSeal) > 0 {
		s.seal(s.toSeal, s.sealPeers)
		s.sealedLens()
	}
	clear(s.toSeal) // keep no views of frames
}

// sealedLens notes the length Seal left each datagram at; one it
// emptied, or moved off its frame, is not sent (SinkStats.Unsealed).
func (s *Sink) sealedLens() {
	for k, d := range s.toSeal {
		id := s.sealIDs[k]
		if len(d) == 0 || &d[0] != &s.pool.Frame(uint32(id))[0] {
			s.dlen[id] = 0
			continue
		}
		s.dlen[id] = int32(len(d))
	}
}

// route returns the peer of frame f's inner destination, or -1.
func (s *Sink) route(f frame.Frame) int {
	dst, ok := iphdr.Dst(f.Buf[s.headroom : s.headroom+f.Len])
	if !ok {
		return -1
	}
	peer, ok := s.dst.route(s.tab, dst)
	if !ok {
		return -1
	}
	return peer
}

// peerOf returns the peer of a routed frame, -1 for none; 0 without
// Peers.
func (s *Sink) peerOf(f frame.Frame) int {
	if s.peers == nil {
		return 0
	}
	return int(s.framePeer[f.ID])
}

// dest returns the peer a prepared frame goes to, -1 if it is not sent
// (no peer, or Seal emptied it).
func (s *Sink) dest(f frame.Frame) int {
	if s.dlen[f.ID] == 0 {
		return -1
	}
	return s.peerOf(f)
}

// peerOfMsg returns the peer of message k of the last build; 0
// without Peers.
func (s *Sink) peerOfMsg(k int) int {
	if s.peers == nil {
		return 0
	}
	return s.msgPeer[k]
}

// noPeers counts the frames taken that were not sent for want of a
// peer or because Seal emptied them.
func (s *Sink) noPeers(taken []frame.Frame) {
	var none, unsealed uint64
	for _, f := range taken {
		switch {
		case s.peerOf(f) < 0:
			none++
		case s.dlen[f.ID] == 0:
			unsealed++
		}
	}
	if none+unsealed > 0 {
		s.st.noPeer.Add(none)
		s.st.unsealed.Add(unsealed)
		s.st.dropped.Add(none + unsealed)
	}
}

// datagram is the UDP payload of frame f as sealed: headroom, packet,
// tailroom and what Seal added or cut, within the frame (Buf ends
// before the tailroom, its capacity does not).
func (s *Sink) datagram(f frame.Frame) []byte { return f.Buf[:s.datagramLen(f):s.frameSize] }

func (s *Sink) datagramLen(f frame.Frame) int { return int(s.dlen[f.ID]) }

// sent counts messages [from, to) of the last build as sent.
func (s *Sink) sent(from, to int) {
	var datagrams, gso, bytes uint64
	for k := from; k < to; k++ {
		segs := s.segs[k]
		datagrams += uint64(segs)
		if segs > 1 {
			gso++
		}
		bytes += uint64(s.msgs[k].N)
		if s.peers != nil {
			s.sentPeer.add(s.msgPeer[k], uint64(segs), uint64(s.msgs[k].N))
		}
	}
	s.st.datagrams.Add(datagrams)
	s.st.messages.Add(uint64(to - from))
	s.st.gsoMessages.Add(gso)
	s.st.bytes.Add(bytes)
}

// Complete reports the frames taken by Transmit since the last call, sent
// or dropped, and returns them to the pool. It never fails.
func (s *Sink) Complete() (int, error) { return s.pool.Complete(), nil }

// Wait returns at once when Complete has frames to report. Otherwise it
// sleeps for d: Transmit only leaves frames behind after ENOBUFS, a
// shortage of kernel memory that poll(2) does not signal the end of (a
// full send buffer, which it does signal, blocks Transmit itself).
func (s *Sink) Wait(d time.Duration) error {
	if s.pool.Taken() > 0 {
		return nil
	}
	time.Sleep(d)
	return nil
}

// Stats returns a snapshot of the sink's counters.
func (s *Sink) Stats() SinkStats {
	c := &s.st
	return SinkStats{
		Datagrams:   c.datagrams.Load(),
		Messages:    c.messages.Load(),
		GSOMessages: c.gsoMessages.Load(),
		Bytes:       c.bytes.Load(),
		Syscalls:    c.syscalls.Load(),
		Dropped:     c.dropped.Load(),
		NoPeer:      c.noPeer.Load(),
		Refused:     c.refused.Load(),
		Unreachable: c.unreachable.Load(),
		MsgSize:     c.msgSize.Load(),
		NoBufs:      c.noBufs.Load(),
		GSORefused:  c.gsoRefused.Load(),
		Other:       c.other.Load(),
		Reprobes:    c.reprobes.Load(),
		Unsealed:    c.unsealed.Load(),
		GSO:         s.gso,
	}
}
