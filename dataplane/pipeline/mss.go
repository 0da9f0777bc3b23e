package pipeline

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/gsoplane/gsoplane/internal/iphdr"
	"github.com/gsoplane/gsoplane/segment"
)

// Defaults of MSSConfig.
const (
	DefaultMSSFlows = 1 << 16
	DefaultMSSIdle  = 10 * time.Minute
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
// super-packets (segment.Segmenter.ForWire) never sends a segment larger
// than the receiver agreed to, in the manner of MSS clamping (iptables
// TCPMSS): the MSS a SYN from X announces limits what the other side sends
// to X, so it is kept under the flow in that direction.
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
// the option space; segment's wire_kernel_linux_test.go sends 1460-byte
// segments to a Linux 6.18 socket that announced 1000, which reads them
// intact).
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

// Observe looks at a packet (a whole IPv4 or IPv6 packet, as
// segment.Segmenter.ForWire takes it) crossing the gateway in either
// direction. A TCP SYN or SYN-ACK records the MSS it announces
// (segment.TCP.Announced) for the packets that will flow back to its
// sender. A RST (segment.TCP.Resets) forgets the flow in both directions.
// Other packets are ignored. Observe costs a few nanoseconds on a packet
// that is not a SYN or RST.
func (t *MSSTable) Observe(pkt []byte) {
	tcp, ok := segment.ParseTCP(pkt)
	if !ok {
		return
	}
	switch mss, syn := tcp.Announced(pkt); {
	case syn:
		t.record(t.hash(pkt, tcp, true), mss)
	case tcp.Resets(pkt):
		t.forget(t.hash(pkt, tcp, false))
		t.forget(t.hash(pkt, tcp, true))
	default:
		return
	}
	t.maybeSweep()
}

// MSS returns the TCP payload per segment that the receiver of pkt, a TCP
// packet, agreed to (segment.TCP.SegmentMSS of what it announced), or 0
// when the table does not know its flow (then cut at mtu minus the
// headers). Pass it to segment.Segmenter.ForWire.
//
// Call MSS for every TCP packet of the direction that forwards data, or
// at least for those larger than the MTU: a lookup keeps the flow from
// being forgotten.
func (t *MSSTable) MSS(pkt []byte) int {
	tcp, ok := segment.ParseTCP(pkt)
	if !ok {
		return 0
	}
	m := t.lookup(t.hash(pkt, tcp, false))
	if m == 0 {
		return 0
	}
	return tcp.SegmentMSS(m)
}

// hash returns the keyed hash of the flow of pkt, a TCP packet (version,
// addresses, ports), or with reverse of the flow in the other direction.
func (t *MSSTable) hash(pkt []byte, tcp segment.TCP, reverse bool) uint64 {
	le := binary.LittleEndian
	ports := le.Uint32(pkt[tcp.L3:]) // source port in the low, destination in the high half
	addrs := iphdr.Addrs(pkt)
	a, b := addrs[:len(addrs)/2], addrs[len(addrs)/2:]
	if reverse {
		a, b = b, a
		ports = ports>>16 | ports<<16
	}
	s := &t.seed
	if len(a) == 4 {
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
