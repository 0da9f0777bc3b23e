package segment

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// Defaults of MSSConfig.
const (
	DefaultMSSFlows = 1 << 16
	DefaultMSSIdle  = 10 * time.Minute
)

// MSS values Linux assumes (include/net/tcp.h, tcp_v4_connect,
// tcp_v6_connect and the request socket ops): a SYN without an MSS option
// announces TCP_MSS_DEFAULT, 536 (RFC 9293 3.7.1, formerly RFC 879), over
// IPv4 and IPV6_MIN_MTU - 40 - 20 = 1220 (RFC 8200 5) over IPv6; a sender
// never goes below tcp_min_snd_mss, 48, whatever the peer announced.
const (
	tcpMSSDefault4 = 536
	tcpMSSDefault6 = 1220
	tcpMinSndMSS   = 48
)

// TCP option kinds.
const (
	tcpOptEOL = 0
	tcpOptNOP = 1
	tcpOptMSS = 2
	tcpOptAO  = 29 // TCP-AO (RFC 5925): its MAC covers the other options
)

// An MSS table slot is one 64-bit word, so that it is read and written
// atomically: the MSS in bits 0-15, an age (sweeps since the last lookup)
// in bits 16-17, and a 46-bit tag of the flow's hash in bits 18-63 whose
// top bit is always set, so that a used slot is never 0.
const (
	mssWays     = 8 // slots per bucket: one 64-byte cache line
	mssAgeShift = 16
	mssAgeMask  = 3 << mssAgeShift
	mssAgeMax   = 3 // a slot reaching this age is freed
	mssTagShift = 18
	mssMaxFlows = 1 << 26
)

// MSSConfig configures an MSSTable.
type MSSConfig struct {
	// Flows is the number of flow directions the table holds, rounded up
	// to a power of two (at least 8); 0 means DefaultMSSFlows. The table
	// takes 8 bytes per flow, allocated once.
	Flows int
	// Idle is how long a flow may go without a lookup before it is
	// forgotten (see MSSTable); 0 means DefaultMSSIdle.
	Idle time.Duration
	// Now is the clock; nil means time.Now. Tests set it.
	Now func() time.Time
}

// MSSTable remembers, per TCP flow, the maximum segment size the receiver
// announced in its SYN or SYN-ACK, so that a gateway that cuts TCP
// super-packets (ForWire) never sends a segment larger than the receiver
// agreed to, in the manner of MSS clamping (iptables TCPMSS): the MSS a SYN
// from X announces limits what the other side sends to X, so it is kept
// under the flow in that direction.
//
// A flow whose SYN the table never saw (the table started after the
// connection, the handshake took another path, or the flow was forgotten)
// has no MSS: MSS returns 0 and the caller cuts at the largest size the
// egress MTU allows, mtu minus the packet's IP and TCP headers. That may
// exceed what the receiver announced. Receivers accept it in practice:
// TCP does not enforce the MSS on receive, and Linux does not drop a
// segment above its advertised MSS (tcp_measure_rcv_mss only records the
// size, capped at advmss, to time its ACKs, and warns once about a
// suspect GRO implementation when a GRO packet exceeds it by more than
// the option space; wire_kernel_linux_test.go sends 1460-byte segments to
// a Linux 6.18 socket that announced 1000, which reads them intact).
//
// The table has a fixed number of slots, chosen at construction, in
// buckets of eight (one cache line each) found by a keyed hash of the
// addresses and ports; a slot is one 64-bit word holding the MSS, an age
// and a 46-bit tag of the hash (two flows with the same tag in one bucket,
// odds about 2^-42 per lookup of an unknown flow, would share an MSS). A
// new flow takes a free slot of its bucket, else the oldest, so the table
// never grows and a flood of handshakes only evicts other flows, which
// then fall back to the egress MTU.
//
// A flow is forgotten on a RST in either direction, and after at least
// Idle without a lookup: an Observe that records a handshake or a RST
// sweeps the table if Idle/2 has passed since the last sweep, ageing every
// slot, a lookup makes its slot young again, and the third sweep that
// finds a slot unused frees it; with handshakes arriving steadily that is
// within 1.5×Idle. The clock is read only there, never per packet. A
// lookup of an entry older than that, when no handshake came to sweep,
// still finds it: that is the same connection. A sweep of a 64K-slot table
// takes a few hundred microseconds, in the Observe call that runs it.
//
// An MSSTable is safe for concurrent use without locks: each direction's
// forwarder may call Observe and MSS at the same time. Slots are read and
// written with atomic operations, so a reader never blocks and never sees
// a torn entry; two writers racing on one bucket may lose one insertion,
// and that flow then falls back to the egress MTU. Operations do not
// allocate.
type MSSTable struct {
	slots   []atomic.Uint64
	mask    uint64 // buckets - 1
	seed    [4]uint64
	idle    int64 // nanoseconds
	now     func() time.Time
	sweptAt atomic.Int64 // Unix nanoseconds of the last sweep
}

// NewMSSTable returns an empty table.
func NewMSSTable(cfg MSSConfig) *MSSTable {
	flows := cfg.Flows
	if flows <= 0 {
		flows = DefaultMSSFlows
	}
	flows = min(flows, mssMaxFlows)
	buckets := 1
	for buckets*mssWays < flows {
		buckets <<= 1
	}
	t := &MSSTable{
		slots: make([]atomic.Uint64, buckets*mssWays),
		mask:  uint64(buckets - 1),
		idle:  int64(cfg.Idle),
		now:   cfg.Now,
	}
	if t.idle <= 0 {
		t.idle = int64(DefaultMSSIdle)
	}
	if t.now == nil {
		t.now = time.Now
	}
	for i := range t.seed {
		t.seed[i] = rand.Uint64() | 1
	}
	t.sweptAt.Store(t.now().UnixNano())
	return t
}

// Flows returns the number of slots.
func (t *MSSTable) Flows() int { return len(t.slots) }

// Observe looks at a packet (a whole IPv4 or IPv6 packet, as ForWire takes
// it) crossing the gateway in either direction. A TCP SYN or SYN-ACK
// records the MSS it announces, or the default when it has no MSS option
// (536 over IPv4, 1220 over IPv6, as Linux assumes; an MSS option of 0 is
// ignored, as tcp_parse_options ignores it; with several MSS options the
// last counts, as there), for the packets that will flow back to its
// sender. A RST forgets the flow in both directions. Other packets, IP
// fragments, and SYNs or RSTs whose IPv4 header checksum or TCP checksum
// (complete or partial) is wrong, or that also carry FIN (SYN) or SYN
// (RST), are ignored, as their receiver ignores them. Observe costs a few
// nanoseconds on a packet that is not a SYN or RST.
func (t *MSSTable) Observe(pkt []byte) {
	l3, l4, v6, ok := tcpOf(pkt)
	if !ok {
		return
	}
	flags := pkt[l3+tcpFlagsOff]
	switch {
	case flags&(tcpSYN|tcpRST) == 0:
		return
	case flags&tcpRST != 0:
		if flags&tcpSYN != 0 || !tcpChecked(pkt, l3, v6) {
			return
		}
		t.forget(t.hash(pkt, l3, v6, false))
		t.forget(t.hash(pkt, l3, v6, true))
	default:
		if flags&tcpFIN != 0 || !tcpChecked(pkt, l3, v6) {
			return
		}
		t.record(t.hash(pkt, l3, v6, true), synMSS(pkt[l3+tcpMinLen:l3+l4], v6))
	}
	t.maybeSweep()
}

// MSS returns the TCP payload per segment that the receiver of pkt, a TCP
// packet, agreed to, or 0 when the table does not know its flow (then cut
// at mtu minus the headers). It is the MSS the receiver announced less the
// packet's IPv4 options or IPv6 extension headers and its TCP options, as
// a Linux sender computes it (__tcp_mtu_to_mss, tcp_mtu_to_mss: RFC 6691
// leaves options out of the MSS), but never less than 48 minus the TCP
// options (tcp_min_snd_mss). Pass it to ForWire.
//
// Call MSS for every TCP packet of the direction that forwards data, or
// at least for those larger than the MTU: a lookup keeps the flow from
// being forgotten.
func (t *MSSTable) MSS(pkt []byte) int {
	l3, l4, v6, ok := tcpOf(pkt)
	if !ok {
		return 0
	}
	m := t.lookup(t.hash(pkt, l3, v6, false))
	if m == 0 {
		return 0
	}
	base := ipv4MinLen
	if v6 {
		base = ipv6Len
	}
	return max(m-(l3-base), tcpMinSndMSS) - (l4 - tcpMinLen)
}

// Clamp lowers the MSS option of a TCP SYN or SYN-ACK to what an MTU of
// mtu allows, mtu minus 40 over IPv4 and minus 60 over IPv6 (the fixed IP
// and TCP headers), and returns whether it changed pkt, as iptables
// TCPMSS --clamp-mss-to-pmtu does (xt_TCPMSS.c): it never raises an MSS,
// changes every MSS option above the limit, and fixes the TCP checksum
// incrementally (RFC 1624) unless the field holds a partial checksum (the
// pseudo-header sum, which does not cover the option). It leaves alone a
// SYN without an MSS option (TCPMSS would insert one; the default the
// receiver then assumes, 536 or 1220, fits every MTU of at least 576 or
// 1280), one signed with TCP-AO (rewriting it would break the signature;
// TCP-MD5 does not cover options), IP fragments, non-TCP packets and an mtu
// of 40 (60) or less.
//
// When to use it: on a gateway whose two sides have different MTUs (a
// jumbo-frame link in front of a 1500-byte one, or a tunnel), on SYNs in
// both directions, with the smaller of the MTUs of the two links the flow
// crosses (TCPMSS uses the smaller of the route MTUs toward the
// destination and back to the source). Senders then send segments that
// fit and ForWire has nothing to cut beyond TSO super-packets, path MTU
// discovery has nothing to discover, and a path that drops ICMP errors is
// no black hole. Without it the gateway still delivers (it resegments TCP
// to the MTU), at the cost of cutting every large segment. Clamp before
// Observe and ForWire: Observe then records the clamped MSS, and a
// partial checksum left as is stays right for ForWire to complete.
func Clamp(pkt []byte, mtu int) bool {
	l3, l4, v6, ok := tcpOf(pkt)
	if !ok || pkt[l3+tcpFlagsOff]&tcpSYN == 0 {
		return false
	}
	limit := mtu - ipv4MinLen - tcpMinLen
	if v6 {
		limit = mtu - ipv6Len - tcpMinLen
	}
	if limit <= 0 || limit >= 0xffff {
		return false
	}
	opts := pkt[l3+tcpMinLen : l3+l4]
	found := false
	for it := (tcpOptIter{b: opts}); ; {
		kind, off, n, ok := it.next()
		if !ok {
			break
		}
		if kind == tcpOptAO {
			return false
		}
		found = found || kind == tcpOptMSS && n == 4 && int(binary.BigEndian.Uint16(opts[off+2:])) > limit
	}
	if !found {
		return false
	}
	field := pkt[l3+tcpCsumOffset:]
	check := binary.BigEndian.Uint16(field)
	p := fold(pseudoHeader(pkt, v6, protoTCP, len(pkt)-l3))
	partial := check == p || (check == 0 && p == 0xffff)
	for it := (tcpOptIter{b: opts}); ; {
		kind, off, n, ok := it.next()
		if !ok {
			break
		}
		if kind != tcpOptMSS || n != 4 {
			continue
		}
		val := opts[off+2:]
		old := binary.BigEndian.Uint16(val)
		if int(old) <= limit {
			continue
		}
		binary.BigEndian.PutUint16(val, uint16(limit))
		if !partial {
			// The value sits at an even or odd offset from the start of
			// the TCP header: at an odd one its bytes straddle two
			// 16-bit words and it counts byte-swapped in the sum.
			o, nw := old, uint16(limit)
			if (tcpMinLen+off+2)%2 == 1 {
				o, nw = bits.ReverseBytes16(o), bits.ReverseBytes16(nw)
			}
			check = csumReplace(check, o, nw)
		}
	}
	binary.BigEndian.PutUint16(field, check)
	return true
}

// tcpOf finds the TCP header of pkt: a whole, unfragmented IPv4 or IPv6
// TCP packet (IPv6 through hop-by-hop, routing and destination options
// headers) whose IP length matches len(pkt) and whose TCP header fits. It
// returns the offset and length of the TCP header.
func tcpOf(pkt []byte) (l3, l4 int, v6, ok bool) {
	if len(pkt) < ipv4MinLen {
		return 0, 0, false, false
	}
	switch pkt[0] >> 4 {
	case 4:
		l3 = int(pkt[0]&0xf) * 4
		if l3 < ipv4MinLen || pkt[9] != protoTCP ||
			int(binary.BigEndian.Uint16(pkt[ipv4TotalOff:])) != len(pkt) ||
			binary.BigEndian.Uint16(pkt[ipv4FragOff:])&0x3fff != 0 {
			return 0, 0, false, false
		}
	case 6:
		if len(pkt) < ipv6Len || int(binary.BigEndian.Uint16(pkt[ipv6PLenOff:])) != len(pkt)-ipv6Len {
			return 0, 0, false, false
		}
		v6 = true
		next, off := pkt[ipv6NextOff], ipv6Len
		for next != protoTCP {
			if next != protoHopByHop && next != protoRouting && next != protoDestOpts || off+8 > len(pkt) {
				return 0, 0, false, false
			}
			next, off = pkt[off], off+(int(pkt[off+1])+1)*8
		}
		l3 = off
	default:
		return 0, 0, false, false
	}
	if l3+tcpMinLen > len(pkt) {
		return 0, 0, false, false
	}
	l4 = int(pkt[l3+12]>>4) * 4
	if l4 < tcpMinLen || l3+l4 > len(pkt) {
		return 0, 0, false, false
	}
	return l3, l4, v6, true
}

// tcpChecked reports whether a TCP packet found by tcpOf would reach its
// receiver's TCP: a correct IPv4 header checksum and a complete or partial
// TCP checksum.
func tcpChecked(pkt []byte, l3 int, v6 bool) bool {
	if !v6 && Checksum(pkt[:l3], 0) != 0 {
		return false
	}
	st := l4Csum(pkt, l3, protoTCP, v6)
	return st == CsumComplete || st == CsumPartial
}

// synMSS returns the MSS a SYN with the options opts announces: the last
// MSS option that is not 0, else the default.
func synMSS(opts []byte, v6 bool) int {
	mss := tcpMSSDefault4
	if v6 {
		mss = tcpMSSDefault6
	}
	for it := (tcpOptIter{b: opts}); ; {
		kind, off, n, ok := it.next()
		if !ok {
			return mss
		}
		if kind == tcpOptMSS && n == 4 {
			if m := int(binary.BigEndian.Uint16(opts[off+2:])); m != 0 {
				mss = m
			}
		}
	}
}

// tcpOptIter walks TCP options as Linux's tcp_parse_options does: NOPs
// are skipped, and the walk ends at the end-of-options option, at an
// option length below 2, or at an option that does not fit.
type tcpOptIter struct {
	b []byte
	i int
}

// next returns the next option's kind, offset and length.
func (it *tcpOptIter) next() (kind byte, off, n int, ok bool) {
	for it.i < len(it.b) {
		off = it.i
		kind = it.b[off]
		switch kind {
		case tcpOptEOL:
			it.i = len(it.b)
			return 0, 0, 0, false
		case tcpOptNOP:
			it.i++
			continue
		}
		if off+2 > len(it.b) {
			break
		}
		n = int(it.b[off+1])
		if n < 2 || off+n > len(it.b) {
			break
		}
		it.i = off + n
		return kind, off, n, true
	}
	it.i = len(it.b)
	return 0, 0, 0, false
}

// hash returns the keyed hash of pkt's flow (version, addresses, ports),
// or with reverse of the flow in the other direction.
func (t *MSSTable) hash(pkt []byte, l3 int, v6, reverse bool) uint64 {
	le := binary.LittleEndian
	ports := le.Uint32(pkt[l3:]) // source port in the low, destination in the high half
	var a, b []byte
	if v6 {
		a, b = pkt[8:24], pkt[24:40]
	} else {
		a, b = pkt[12:16], pkt[16:20]
	}
	if reverse {
		a, b = b, a
		ports = ports>>16 | ports<<16
	}
	s := &t.seed
	if !v6 {
		h := mum(uint64(le.Uint32(a))|uint64(le.Uint32(b))<<32^s[0], uint64(ports)<<8^4^s[1])
		return mum(h^s[2], h>>32^s[3])
	}
	h := mum(le.Uint64(a)^s[0], le.Uint64(a[8:])^s[1])
	h = mum(h^le.Uint64(b)^s[2], le.Uint64(b[8:])^s[3])
	return mum(h^s[0], uint64(ports)<<8^6^s[1])
}

// mum is the 64x64→128-bit multiply-and-fold of wyhash.
func mum(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// bucket returns the slots of hash h's bucket and its tag.
func (t *MSSTable) bucket(h uint64) ([]atomic.Uint64, uint64) {
	i := int(h&t.mask) * mssWays
	return t.slots[i : i+mssWays : i+mssWays], h>>(mssTagShift+1) | 1<<(63-mssTagShift)
}

// record stores the MSS of a flow, as a young slot.
func (t *MSSTable) record(h uint64, mss int) {
	slots, tag := t.bucket(h)
	want := tag<<mssTagShift | uint64(uint16(mss))
	oldest, age := -1, uint64(0)
	for i := range slots {
		w := slots[i].Load()
		if w>>mssTagShift == tag {
			if w != want {
				slots[i].CompareAndSwap(w, want)
			}
			return
		}
	}
	for i := range slots {
		w := slots[i].Load()
		if w == 0 && slots[i].CompareAndSwap(0, want) {
			return
		}
		if a := (w & mssAgeMask) >> mssAgeShift; w != 0 && a >= age {
			oldest, age = i, a
		}
	}
	if age == 0 { // all young: the hash picks the victim
		oldest = int(h>>(mssTagShift+1)) & (mssWays - 1)
	}
	slots[oldest].Store(want)
}

// lookup returns the MSS of a flow, or 0, and makes its slot young.
func (t *MSSTable) lookup(h uint64) int {
	slots, tag := t.bucket(h)
	for i := range slots {
		w := slots[i].Load()
		if w>>mssTagShift != tag {
			continue
		}
		if w&mssAgeMask != 0 {
			slots[i].CompareAndSwap(w, w&^mssAgeMask)
		}
		return int(uint16(w))
	}
	return 0
}

// forget removes a flow.
func (t *MSSTable) forget(h uint64) {
	slots, tag := t.bucket(h)
	for i := range slots {
		if w := slots[i].Load(); w>>mssTagShift == tag {
			slots[i].CompareAndSwap(w, 0)
		}
	}
}

// maybeSweep sweeps the table if Idle/2 has passed since the last sweep.
// Of concurrent callers, one sweeps.
func (t *MSSTable) maybeSweep() {
	now := t.now().UnixNano()
	last := t.sweptAt.Load()
	if now-last < t.idle/2 || !t.sweptAt.CompareAndSwap(last, now) {
		return
	}
	t.sweep()
}

// sweep ages every slot and frees those reaching mssAgeMax.
func (t *MSSTable) sweep() {
	for i := range t.slots {
		w := t.slots[i].Load()
		if w == 0 {
			continue
		}
		age := (w&mssAgeMask)>>mssAgeShift + 1
		next := uint64(0)
		if age < mssAgeMax {
			next = w&^mssAgeMask | age<<mssAgeShift
		}
		t.slots[i].CompareAndSwap(w, next)
	}
}
