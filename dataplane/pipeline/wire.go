package pipeline

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/internal/copycount"
	"github.com/gsoplane/gsoplane/internal/iphdr"
	"github.com/gsoplane/gsoplane/segment"
)

// WireConfig configures a WireSource.
type WireConfig struct {
	// Receiver is the ingress port: packets as they arrived on its link,
	// whole (a multi-buffer AF_XDP socket hands over a 64 KiB GSO frame
	// from a veth peer, or a jumbo frame, as one packet). A
	// HeaderReceiver (AF_PACKET) also says what the kernel knew of each:
	// see WireSource.
	Receiver frame.Receiver
	// MTU is the egress MTU the packets are cut to (SetMTU changes it);
	// IngressMTU the ingress link's, for Clamp.
	MTU, IngressMTU int
	// MSS remembers what each TCP flow's SYN and SYN-ACK announced, so
	// that a segment never exceeds what its receiver agreed to. Share one
	// table between the two directions of a gateway: each direction's
	// SYNs set the MSS of the other's data. Nil: cut at the MTU.
	MSS *MSSTable
	// Clamp lowers the MSS option of the SYNs it forwards to the smaller
	// of MTU and IngressMTU (segment.Clamp), so that senders send what
	// fits and little needs cutting.
	Clamp bool
	// Replier answers the senders of packets too big to be cut
	// (fragmentation needed, packet too big) and of packets whose TTL
	// ran out (time exceeded); nil: only counted.
	Replier frame.Replier
	// Segmenter bounds the segments per packet (MaxSegments); nil: no
	// bound but the kernel's.
	Segmenter *segment.Segmenter
	// Inside are the prefixes on the receiver's side of the gateway's
	// other port: a packet whose source lies in one of them cannot have
	// come from the receiver's link and is dropped (Spoofed), as the
	// kernel's strict reverse-path filter drops it.
	Inside []netip.Prefix
	// OnBigTCP, if set, is called (from Read, once) when the source
	// drops its first BIG TCP super-packet (WireStats.BigTCP).
	OnBigTCP func()
}

// WireStats counts what a WireSource did.
type WireStats struct {
	Packets     uint64 // packets read from the Receiver
	Cut         uint64 // handed on as super-packets (more than one segment): cut by the forwarder or, whole, by the NIC (Stats.Cut, Offloaded)
	Clamped     uint64 // SYNs whose MSS option was lowered
	TooBig      uint64 // refused: a router may not cut them (DF, IPv6 other than TCP); answered
	BadChecksum uint64 // packets with a bad transport checksum: those that fit pass on, those to be cut are dropped
	Invalid     uint64 // refused by the receiver, not IP, or that do not parse
	Spoofed     uint64 // from a source on the other side (WireConfig.Inside)
	TTLExceeded uint64 // arrived with a TTL (hop limit) of 1 or less: dropped; answered
	BigTCP      uint64 // BIG TCP super-packets (over 64 KiB, segment.IsBig), which no egress takes whole: dropped
}

// WireSource is a Source of packets received from a network port, such
// as an AF_XDP socket on the link of a host whose NIC does TSO, or a
// jumbo-frame link: each packet gets the virtio-net header that makes the
// forwarder cut it to the egress MTU the way Linux forwards
// (segment.Segmenter.ForWire: TCP to the flow's MSS, IPv4 UDP without DF into
// fragments), and a packet a router must refuse instead is answered and
// counted. The forwarder cuts it, or hands it whole to an OffloadSink
// whose NIC segments its kind, as Linux hands a GRO packet to a TSO
// device: with the same header, so that the segments are the same.
//
// The TCP segment size is the smallest of the MSS the flow's receiver
// announced (WireConfig.MSS), the egress MTU less the packet's IP and TCP
// headers with their options, and, from a HeaderReceiver, the gso_size
// the receiving kernel gave the packet: the segment size of the sender's
// TSO or of what GRO merged, with which Linux forwards it. A flow whose
// SYN was not seen is cut at the smaller of the last two, the egress MTU
// alone from a plain Receiver (AF_XDP). A HeaderReceiver's USO
// super-packet stays a run of datagrams of its gso_size
// (segment.ForWireFrom); from a plain Receiver it cannot be told from one
// large datagram.
//
// As a router, it takes one off each packet's TTL (hop limit), whole
// super-packets included (their header once: the NIC copies it into
// every segment), and drops and answers a packet that arrives with 1 or
// less. Read waits as its Receiver waits; it copies each packet once,
// into the forwarder's buffer.
type WireSource struct {
	cfg    WireConfig
	hr     frame.HeaderReceiver // cfg.Receiver, if it gives the kernel's headers
	into   frame.IntoReceiver   // cfg.Receiver, if it receives into the forwarder's buffers
	mtu    atomic.Int64
	frames [][]byte
	rbufs  [][]byte // where ReceiveInto receives: the forwarder's buffers, from the receiver's headroom on

	packets, cut, clamped, tooBig, badCsum, invalid, spoofed, ttlExceeded, big atomic.Uint64
}

// NewWireSource checks cfg and returns a WireSource. The forwarder that
// reads it takes HeaderSize segment.HeaderSize.
func NewWireSource(cfg WireConfig) (*WireSource, error) {
	switch {
	case cfg.Receiver == nil:
		return nil, fmt.Errorf("pipeline: %w: a WireSource needs a Receiver", frame.ErrInvalidConfig)
	case cfg.MTU < segment.MinMTU || cfg.MTU > 65535:
		return nil, fmt.Errorf("pipeline: %w: MTU %d", frame.ErrInvalidConfig, cfg.MTU)
	case cfg.Receiver.Headroom() < 0:
		return nil, fmt.Errorf("pipeline: %w: negative headroom", frame.ErrInvalidConfig)
	}
	if cfg.Segmenter == nil {
		cfg.Segmenter = new(segment.Segmenter)
	}
	w := &WireSource{cfg: cfg}
	w.hr, _ = cfg.Receiver.(frame.HeaderReceiver)
	w.into, _ = cfg.Receiver.(frame.IntoReceiver)
	w.mtu.Store(int64(cfg.MTU))
	return w, nil
}

// SetMTU changes the egress MTU; values below segment.MinMTU are ignored.
func (w *WireSource) SetMTU(mtu int) {
	if mtu >= segment.MinMTU {
		w.mtu.Store(int64(mtu))
	}
}

// SetReadDeadline sets the read deadline of the Receiver, if it is a
// ReadDeadliner (see ReadDeadliner); otherwise its Receive waits only a
// short while by itself and there is nothing to wake.
func (w *WireSource) SetReadDeadline(t time.Time) error {
	if d, ok := w.cfg.Receiver.(frame.ReadDeadliner); ok {
		return d.SetReadDeadline(t)
	}
	return nil
}

// Read receives a batch and writes each packet it passes on behind its
// virtio-net header at bufs[i][offset:]. A packet longer than its buffer
// is lost with an error wrapping ErrPacketTruncated. It returns 0 and no
// error when the Receiver had nothing, or nothing worth passing on.
//
// An IntoReceiver receives straight into bufs where offset leaves room
// for its headroom in front of the packet's place (the forwarder's read
// into an OffloadSink's large frames): each packet then stays where it
// was received, and is copied only to close the gap a dropped one left.
func (w *WireSource) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	n := min(len(bufs), len(sizes))
	if len(w.frames) < n {
		w.frames, w.rbufs = make([][]byte, n), make([][]byte, n)
	}
	head := w.cfg.Receiver.Headroom()
	got, err := w.receive(bufs[:n], offset, head)
	if got == 0 {
		return 0, err
	}
	w.packets.Add(uint64(got))
	out := 0
	var terr error
	for i, f := range w.frames[:got] {
		if f == nil { // cut short by ReceiveInto: longer than the buffer
			w.dropLong(w.rbufs[i][head:])
			continue
		}
		if segment.IsBig(f[min(head, len(f)):]) {
			if w.big.Add(1) == 1 && w.cfg.OnBigTCP != nil {
				w.cfg.OnBigTCP()
			}
			continue
		}
		pkt := ipPacket(f[min(head, len(f)):])
		if len(pkt) == 0 {
			w.invalid.Add(1)
			continue
		}
		if sourceIn(w.cfg.Inside, pkt) {
			w.spoofed.Add(1)
			continue
		}
		if off := ttlOffset(pkt); off >= 0 && pkt[off] <= 1 {
			w.ttlExceeded.Add(1)
			if w.cfg.Replier != nil {
				w.cfg.Replier.TimeExceeded(pkt)
			}
			continue
		}
		buf := bufs[out][offset:]
		if len(buf) < segment.HeaderSize+len(pkt) {
			terr = fmt.Errorf("pipeline: wire packet of %d bytes: %w", len(pkt), frame.ErrPacketTruncated)
			continue
		}
		if m := w.prepare(buf, pkt, w.from(i)); m > 0 {
			sizes[out] = m
			out++
		}
	}
	return out, errors.Join(terr, err)
}

// receive receives a batch into w.frames: into bufs, behind the
// receiver's headroom at the packets' place, where the receiver can and
// there is room for the headroom; else into the receiver's own memory.
func (w *WireSource) receive(bufs [][]byte, offset, head int) (int, error) {
	at := offset + segment.HeaderSize - head // where the headroom starts
	if w.into == nil || at < 0 {
		return w.cfg.Receiver.Receive(w.frames[:len(bufs)])
	}
	for i, b := range bufs {
		if len(b) < at+head {
			return w.cfg.Receiver.Receive(w.frames[:len(bufs)])
		}
		w.rbufs[i] = b[at:]
	}
	return w.into.ReceiveInto(w.rbufs[:len(bufs)], w.frames[:len(bufs)])
}

// dropLong drops a packet longer than the buffer it was received into,
// of which pkt is the start: a BIG TCP super-packet, by its header (an
// IP length of 0), as Read drops one received whole, else invalid.
func (w *WireSource) dropLong(pkt []byte) {
	if !bigStart(pkt) {
		w.invalid.Add(1)
		return
	}
	if w.big.Add(1) == 1 && w.cfg.OnBigTCP != nil {
		w.cfg.OnBigTCP()
	}
}

// bigStart reports whether pkt starts like a BIG TCP packet: an IPv4
// header with a total length of 0, or an IPv6 one with a payload length
// of 0 and a Hop-by-Hop header next (segment.IsBig, without the length).
func bigStart(pkt []byte) bool {
	be := binary.BigEndian
	switch v := iphdr.Version(pkt); {
	case v == 4 && len(pkt) >= ipv4MinLen:
		return be.Uint16(pkt[2:]) == 0
	case v == 6 && len(pkt) >= ipv6HeaderLen:
		return be.Uint16(pkt[4:]) == 0 && pkt[6] == 0
	}
	return false
}

// from returns the receiving kernel's header of frame i of the last
// Receive, if the Receiver gives it.
func (w *WireSource) from(i int) segment.Header {
	if w.hr == nil {
		return segment.Header{}
	}
	return w.hr.Header(i)
}

// prepare writes pkt's virtio-net header and pkt into buf and returns
// their length, or 0 if pkt does not go on; from is what the receiving
// kernel said of pkt.
func (w *WireSource) prepare(buf, pkt []byte, from segment.Header) int {
	mtu := int(w.mtu.Load())
	p := buf[segment.HeaderSize : segment.HeaderSize+len(pkt)]
	if &p[0] != &pkt[0] { // not received in place (ReceiveInto)
		copy(p, pkt)
		copycount.Add(p, pkt)
	}
	if w.cfg.Clamp && segment.Clamp(p, min(mtu, w.ingressMTU(mtu))) {
		w.clamped.Add(1)
	}
	mss := 0
	if t := w.cfg.MSS; t != nil {
		t.Observe(p)
		mss = t.MSS(p)
	}
	h, cs, err := w.cfg.Segmenter.ForWireFrom(p, mtu, mss, from)
	if cs == segment.CsumBad {
		w.badCsum.Add(1)
	}
	switch {
	case errors.Is(err, segment.ErrTooBig):
		w.tooBig.Add(1)
		if w.cfg.Replier != nil {
			w.cfg.Replier.TooBig(p, mtu)
		}
		return 0
	case errors.Is(err, segment.ErrBadChecksum):
		return 0
	case err != nil:
		w.invalid.Add(1)
		return 0
	}
	if h.GSOType != segment.GSONone {
		w.cut.Add(1)
	}
	decrementTTL(p)
	h.Encode(buf, segment.HeaderSize)
	return segment.HeaderSize + len(p)
}

// ttlOffset returns the offset of the TTL of pkt, an IPv4 packet, or of
// its hop limit, an IPv6 packet; -1 if pkt is too short to have one.
func ttlOffset(pkt []byte) int {
	switch v := iphdr.Version(pkt); {
	case v == 4 && len(pkt) >= ipv4MinLen:
		return ipv4TTL
	case v == 6 && len(pkt) >= ipv6HeaderLen:
		return ipv6HopLimit
	}
	return -1
}

// IP header fields decrementTTL changes.
const (
	ipv4MinLen    = 20
	ipv4TTL       = 8
	ipv4Checksum  = 10
	ipv6HeaderLen = 40
	ipv6HopLimit  = 7
)

// decrementTTL takes one off the TTL of p, a valid IPv4 packet, and
// updates its header checksum incrementally (RFC 1624) exactly as the
// kernel's ip_decrease_ttl does, or takes one off the hop limit of p, an
// IPv6 packet. A packet cut later gets its headers from p.
func decrementTTL(p []byte) {
	if iphdr.Version(p) == 6 {
		p[ipv6HopLimit]--
		return
	}
	p[ipv4TTL]--
	sum := uint32(binary.BigEndian.Uint16(p[ipv4Checksum:])) + 0x0100 // the TTL is the high byte of its 16-bit word
	if sum >= 0xffff {
		sum++ // the end-around carry, and 0xffff (-0) becomes 0
	}
	binary.BigEndian.PutUint16(p[ipv4Checksum:], uint16(sum))
}

// ingressMTU is the ingress link's MTU, or mtu if it is not known.
func (w *WireSource) ingressMTU(mtu int) int {
	if w.cfg.IngressMTU > 0 {
		return w.cfg.IngressMTU
	}
	return mtu
}

// Stats returns a snapshot of the counters.
func (w *WireSource) Stats() WireStats {
	return WireStats{
		Packets: w.packets.Load(), Cut: w.cut.Load(), Clamped: w.clamped.Load(),
		TooBig: w.tooBig.Load(), BadChecksum: w.badCsum.Load(), Invalid: w.invalid.Load(),
		Spoofed: w.spoofed.Load(), TTLExceeded: w.ttlExceeded.Load(), BigTCP: w.big.Load(),
	}
}

// Add adds o's counters to s.
func (s *WireStats) Add(o WireStats) {
	s.Packets += o.Packets
	s.Cut += o.Cut
	s.Clamped += o.Clamped
	s.TooBig += o.TooBig
	s.BadChecksum += o.BadChecksum
	s.Invalid += o.Invalid
	s.Spoofed += o.Spoofed
	s.TTLExceeded += o.TTLExceeded
	s.BigTCP += o.BigTCP
}
