package segment

import "fmt"

// CoalescerConfig configures a Coalescer.
type CoalescerConfig struct {
	// HeaderSize is the size of the virtio-net header written in front of
	// every output packet: HeaderSize or HeaderSizeMrg.
	HeaderSize int
	// TCP merges TCP segments into GSOTCPv4/GSOTCPv6 super-packets.
	TCP bool
	// UDP merges UDP datagrams of one flow into GSOUDPL4 (USO)
	// super-packets. The TUN device must accept USO (Linux 6.2 or later,
	// TUN_F_USO4|TUN_F_USO6).
	UDP bool
	// MaxBatch is the most packets one Coalesce call takes; the
	// Coalescer's tables are sized from it once.
	MaxBatch int
	// IPChecked promises that every packet Coalesce is given has an IP
	// header already checked as a router checks it (RFC 1812 5.2.2): a
	// whole fixed header, a length equal to the packet's and, for IPv4,
	// a correct header checksum; Coalesce then does not verify the IPv4
	// header checksum again. A packet that breaks the promise is taken
	// as if its checksum were right: it may be merged, and a
	// super-packet's header checksum is always computed afresh.
	IPChecked bool
}

// A Coalescer merges received packets into super-packets; see Coalesce.
// It is not safe for concurrent use.
//
// It merges what Linux 6.18's GRO merges (the kernel differential test
// holds these rules against the running kernel):
//
//   - Flows: a packet merges only with the open merge of its flow (IP
//     version, protocol, addresses and ports). A packet of the flow that
//     does not join closes the flow's merge, so no flow is reordered; if
//     it may merge, it starts the next one.
//   - IPv4: no options (IHL 5), no fragment bits (MF, offset, the reserved
//     flag), a valid header checksum (taken on trust with IPChecked), a
//     total length equal to the packet's; TTL, TOS (ECN bits included: a
//     CE mark ends a merge) and DF equal to the first packet's; IDs one
//     more per packet or, decided at the second packet, all equal (the
//     kernel's ip_fixedid, with or without DF since 6.18).
//   - IPv6: a payload length equal to the packet's; the first 32 bits
//     (traffic class with its ECN bits, flow label), next header and hop
//     limit equal; Hop-by-Hop Options (first only), Routing and
//     Destination Options headers merge when byte-identical (the kernel's
//     INET6_PROTO_GSO_EXTHDR headers); a Fragment header passes through.
//   - TCP: the checksum verifies; no SYN, RST, URG or CWR (6.18 delivers a
//     CWR segment on its own); a payload; contiguous sequence numbers; ACK
//     number, data offset, reserved bits, window and option bytes
//     (timestamps included) equal; flags equal but for PSH and FIN; every
//     payload at most the first one's, and a shorter one ends the merge; a
//     segment with PSH or FIN joins as the last one (its PSH/FIN go to the
//     super-packet) or, if it cannot join, passes through.
//   - UDP: the checksum verifies and is not zero; the UDP length equals
//     the IP payload length, and the payload is not empty; every datagram
//     at most as long as the first, and a shorter one ends the merge; at
//     most 64 datagrams (UDP_GRO_CNT_MAX).
//   - A merged IP packet is at most 65535 bytes long (gro_max_size).
//
// Where it differs from the kernel, it never reorders a flow or is
// stricter:
//
//   - The kernel lets a packet it does not even try to merge (a bad or
//     zero checksum, IP options, a wrong length) overtake its flow's held
//     merge, and a later UDP datagram over IPv6, which has no sequence
//     number or ID to tell, joins the held merge across it. Here such a
//     packet closes its flow's merge and comes out after it.
//   - Checksums are verified here only for packets that merge (the first
//     one once a second would join it); the kernel verifies every packet
//     it has no CHECKSUM_UNNECESSARY for.
//   - The TCP urgent pointer must be equal (the kernel ignores it while
//     URG is clear, and its super-packet keeps only the first one), so
//     that re-segmenting gives back every packet byte for byte.
//   - A Hop-by-Hop Options header after another extension header (RFC
//     8200 forbids it, IPv6 input drops it) passes through; the kernel
//     merges it.
//   - The kernel keeps merges of one 5-tuple with different IPv6 flow
//     labels or extension headers side by side, and at most 8 merges per
//     hash bucket; here a flow has one merge at a time, and there is room
//     for every flow of a batch.
//
// A super-packet's virtio-net header has NEEDS_CSUM, CsumStart at the
// transport header, CsumOffset 16 (TCP) or 6 (UDP), GSOSize the first
// packet's payload length, HdrLen the length of the IP and transport
// headers and GSOType GSOTCPv4, GSOTCPv6 or GSOUDPL4 (never GSOECN: that
// takes a first segment with CWR); its checksum field holds the
// pseudo-header sum, as tcp4_gro_complete and udp4_gro_complete leave it.
// A packet passed through gets an all-zero header: Coalesce has verified
// nothing it could vouch for with DATA_VALID (the kernel's GRO marks the
// singles it verified), and the kernel checks it on its way in.
//
// Re-segmenting a super-packet (Split, or the kernel's GSO) gives back the
// packets that went into it, except that the IPv4 IDs of a fixed-ID merge
// come back counting up: a virtio-net header cannot carry the kernel's
// SKB_GSO_TCP_FIXEDID.
type Coalescer struct {
	hdrSize int
	rules   groRules
	stats   CoalesceStats

	pkts  []groPacket // per input packet of the current batch
	items []groItem   // output packets of the current batch, in order
	flows groTable
	iov   [][]byte   // the output's slices, item by item
	out   [][][]byte // the output
}

// NewCoalescer returns a Coalescer for batches of up to cfg.MaxBatch
// packets.
func NewCoalescer(cfg CoalescerConfig) (*Coalescer, error) {
	if err := checkHeaderSize(cfg.HeaderSize); err != nil {
		return nil, err
	}
	if cfg.MaxBatch < 1 {
		return nil, fmt.Errorf("segment: coalescer batch size %d, want at least 1", cfg.MaxBatch)
	}
	n := cfg.MaxBatch
	return &Coalescer{
		hdrSize: cfg.HeaderSize,
		rules:   groRules{tcp: cfg.TCP, udp: cfg.UDP, ipChecked: cfg.IPChecked},
		pkts:    make([]groPacket, n),
		items:   make([]groItem, 0, n),
		flows:   newGROTable(n),
		iov:     make([][]byte, 0, n),
		out:     make([][][]byte, 0, n),
	}, nil
}

// SetTCP switches merging of TCP segments on or off, for example when the
// TUN device refuses a TSO write. It takes effect at the next Coalesce.
func (c *Coalescer) SetTCP(on bool) { c.rules.tcp = on }

// SetUDP switches merging of UDP datagrams on or off, for example when the
// TUN device refuses a USO write. It takes effect at the next Coalesce.
func (c *Coalescer) SetUDP(on bool) { c.rules.udp = on }

// Stats returns the cumulative counters.
func (c *Coalescer) Stats() CoalesceStats { return c.stats }

// Coalesce merges the batch of IP packets bufs[i][offset:offset+sizes[i]],
// for i < len(bufs), and returns the packets to write to the TUN device,
// in order: each is a list of slices to be written as one packet with
// writev(2). The first slice starts with the virtio-net header, written
// into the headroom bufs[i][offset-HeaderSize:offset], followed by the
// whole first packet of the merge, whose headers are rewritten in place
// (IP length, IPv4 header checksum, the pseudo-header sum in the transport
// checksum, TCP PSH/FIN, UDP length); the following slices are the
// payloads of the packets merged into it, not copied. A packet passed
// through is one slice: an all-zero header and the packet, unchanged.
//
// Packets come out in the order of the first packet of each output
// packet; packets of one flow are never reordered. Nothing is held from
// one call to the next. The result is valid until the next call.
// Coalesce never panics and does not allocate, but for an error: a call
// that breaks its contract (more than MaxBatch packets, fewer sizes than
// bufs, offset smaller than the header size, a size that does not fit its
// buffer) returns an *Error, takes nothing and counts nothing.
func (c *Coalescer) Coalesce(bufs [][]byte, sizes []int, offset int) ([][][]byte, error) {
	if err := c.check(bufs, sizes, offset); err != nil {
		return nil, err
	}
	c.items = c.items[:0]
	c.flows.reset()
	c.stats.Packets += uint64(len(bufs))
	for i := range bufs {
		c.add(i, bufs[i][offset:offset+sizes[i]])
	}
	return c.finish(bufs, sizes, offset), nil
}

// check checks the call's contract.
func (c *Coalescer) check(bufs [][]byte, sizes []int, offset int) error {
	if len(bufs) > len(c.pkts) || len(sizes) < len(bufs) || offset < c.hdrSize {
		return misuse(ruleBatch, "%d buffers, %d sizes, offset %d; MaxBatch %d, header size %d",
			len(bufs), len(sizes), offset, len(c.pkts), c.hdrSize)
	}
	for i, b := range bufs {
		if sizes[i] < 0 || offset+sizes[i] > len(b) {
			return misuse(ruleBatch, "packet %d of %d bytes at offset %d in a %d-byte buffer", i, sizes[i], offset, len(b))
		}
	}
	return nil
}

// add takes packet i of the batch.
func (c *Coalescer) add(i int, b []byte) {
	p := &c.pkts[i]
	*p = groPacket{b: b, next: -1}
	if why := c.rules.classify(p); why != passNone {
		c.passThrough(i, why)
		return
	}
	f := c.flows.claim(c.pkts, i)
	if f.item >= 0 && c.items[f.item].open {
		it := &c.items[f.item]
		switch it.merge(c.pkts, i) {
		case mergeDone:
			return
		case mergeBadPacket:
			it.open = false
			c.passThrough(i, passBadChecksum)
			return
		case mergeBadFirst:
			c.stats.BadChecksum++
		}
		it.open = false
	}
	if p.tcpEnd() {
		c.passThrough(i, passFlags)
		return
	}
	f.item = int32(len(c.items))
	c.items = append(c.items, newGROItem(i, p))
}

// passThrough makes packet i an output packet of its own, counts why and
// closes its flow's open merge, if any, so that it does not overtake it.
func (c *Coalescer) passThrough(i int, why passReason) {
	*why.counter(&c.stats) += 1
	p := &c.pkts[i]
	if p.keyed {
		if f := c.flows.find(c.pkts, i); f != nil && f.item >= 0 {
			c.items[f.item].open = false
		}
	}
	c.items = append(c.items, groItem{head: int32(i), tail: int32(i), count: 1, pass: true})
}

// finish writes the virtio-net headers, rewrites the merged packets'
// headers and lays out the result.
func (c *Coalescer) finish(bufs [][]byte, sizes []int, offset int) [][][]byte {
	iov, out := c.iov[:0], c.out[:0]
	for k := range c.items {
		it := &c.items[k]
		c.count(it)
		start, h := len(iov), bufs[it.head]
		vh := h[offset-c.hdrSize : offset]
		iov = append(iov, h[offset-c.hdrSize:offset+sizes[it.head]])
		if it.count == 1 {
			clear(vh)
		} else {
			it.complete(&c.pkts[it.head], vh)
			for j := c.pkts[it.head].next; j >= 0; j = c.pkts[j].next {
				p := &c.pkts[j]
				iov = append(iov, p.b[p.hdrLen:])
			}
		}
		out = append(out, iov[start:len(iov):len(iov)])
	}
	c.iov, c.out = iov, out
	return out
}

// count counts an output packet in the stats; packets passed through for
// a reason are counted already.
func (c *Coalescer) count(it *groItem) {
	switch {
	case it.count > 1:
		c.stats.SuperPackets++
		c.stats.Merged += uint64(it.count)
		if it.open {
			c.stats.Flushes++
		}
	case !it.pass:
		c.stats.Unmerged++
	}
}
