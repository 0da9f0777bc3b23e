package segment

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
)

// propFlow is one flow of a property-test batch: the super-packet a sender
// wrote, its segments after Split and what was done to them on the way.
type propFlow struct {
	pkt     []byte
	hdr     Header
	segs    [][]byte
	clean   bool // the segments are Split's, so they must merge back into pkt
	pending int  // segments not yet put into the batch
}

// TestCoalesceProperties feeds random flows, cut with Split and shuffled
// across flows but in order within each, to Coalesce. Every output must
// satisfy checkCoalesced (re-splitting gives back the input packets), and
// a flow left as Split cut it, in one batch, must come back as the very
// super-packet its sender wrote.
func TestCoalesceProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	n := 400
	if testing.Short() {
		n = 50
	}
	co, _ := NewCoalescer(CoalescerConfig{HeaderSize: HeaderSizeMrg, TCP: true, UDP: true, MaxBatch: 256})
	merged := 0
	for iter := range n {
		flows := make([]*propFlow, 1+r.IntN(6))
		for k := range flows {
			flows[k] = randomFlow(t, r, uint16(30000+k))
		}
		in, owner := interleave(r, flows)
		whole := r.IntN(3) != 0
		for start := 0; start < len(in); {
			end := len(in)
			if !whole {
				end = min(len(in), start+1+r.IntN(64))
			}
			outs := coalesce(t, co, in[start:end])
			checkCoalesced(t, in[start:end], outs)
			if whole {
				merged += checkCleanFlows(t, iter, flows, owner, outs)
			}
			start = end
		}
		checkStats(t, co.Stats())
	}
	if merged < n/2 {
		t.Fatalf("only %d clean flows checked in %d batches", merged, n)
	}
}

// checkCleanFlows checks that every clean flow of a whole batch came out
// as its sender's super-packet, and returns how many it checked.
func checkCleanFlows(t *testing.T, iter int, flows []*propFlow, owner []int, outs []groOut) int {
	t.Helper()
	n := 0
	for _, o := range outs {
		f := flows[owner[o.idx[0]]]
		if !f.clean || len(f.segs) < 2 {
			continue
		}
		if len(o.idx) != len(f.segs) || !bytes.Equal(o.pkt, f.pkt) || o.hdr != f.hdr {
			t.Fatalf("iteration %d: flow of %d segments came out as %d (header %+v, sender's %+v)", iter, len(f.segs), len(o.idx), o.hdr, f.hdr)
		}
		n++
	}
	return n
}

// interleave merges the flows' segments in random order, keeping each
// flow's own order, and says which flow each packet is from.
func interleave(r *rand.Rand, flows []*propFlow) (in [][]byte, owner []int) {
	var left []int
	for k, f := range flows {
		f.pending = len(f.segs)
		for range f.segs {
			left = append(left, k)
		}
	}
	r.Shuffle(len(left), func(i, j int) { left[i], left[j] = left[j], left[i] })
	for _, k := range left {
		f := flows[k]
		in = append(in, f.segs[len(f.segs)-f.pending])
		owner = append(owner, k)
		f.pending--
	}
	return in, owner
}

// randomFlow draws a super-packet that GRO can merge back whole, cuts it
// and sometimes damages the cut.
func randomFlow(t *testing.T, r *rand.Rand, port uint16) *propFlow {
	s := superSpec{v6: r.IntN(2) == 0, proto: udp, gso: GSOUDPL4, srcPort: port, seed: r.Uint64(),
		id: uint16(r.Uint32()), seq: r.Uint32(), df: r.IntN(2) == 0, ttl: uint8(1 + r.IntN(255)), tos: uint8(r.IntN(256))}
	if r.IntN(2) == 0 {
		s.proto, s.gso = tcp, GSOTCPv4
		if s.v6 {
			s.gso = GSOTCPv6
		}
		s.tcpOpts = tcpOpts40[:4*r.IntN(11)]
		s.tcpFlags = flagACK | uint8(r.IntN(2))*flagECE | uint8(r.IntN(2))*flagPSH | uint8(r.IntN(4)/3)*flagFIN
	}
	if s.v6 && r.IntN(3) == 0 {
		s.ext = []extHdr{{extDestOpts, 8 * (1 + r.IntN(3))}, {extRouting, 8 * (1 + r.IntN(3))}}
	}
	s.mss = 1 + r.IntN(1500)
	if r.IntN(4) == 0 {
		s.mss = 1 + r.IntN(9000)
	}
	segs := 2 + r.IntN(40)
	if s.proto == udp {
		segs = min(segs, udpGROMax)
	}
	room := 65535 - 40 - 40 - 40 - 48
	s.payload = min(room, segs*s.mss-r.IntN(s.mss))
	s.needsCsum = true
	pkt, h := buildSuper(s)
	f := &propFlow{pkt: pkt, hdr: h, segs: cut(t, s), clean: true}
	damage(t, r, f, s)
	return f
}

// damage sometimes changes a flow on its way: a lost or repeated segment,
// a bad or zero checksum, a pure ACK in between, or fixed IPv4 IDs (with
// DF the flow still merges whole).
func damage(t *testing.T, r *rand.Rand, f *propFlow, s superSpec) {
	if r.IntN(3) != 0 || len(f.segs) < 2 {
		return
	}
	i := r.IntN(len(f.segs))
	f.clean = false
	switch r.IntN(6) {
	case 0:
		f.segs = slices.Delete(f.segs, i, i+1)
	case 1:
		f.segs = slices.Insert(f.segs, i, f.segs[i])
	case 2:
		f.segs = corrupt(f.segs, i)
	case 3:
		if s.proto == udp {
			f.segs = slices.Clone(f.segs)
			f.segs[i] = bytes.Clone(f.segs[i])
			clear(f.segs[i][layoutOf(t, f.segs[i]).L3Len()+udpCsumOffset:][:2])
		}
	case 4:
		ack, _ := buildSuper(superSpec{v6: s.v6, proto: tcp, srcPort: s.srcPort, seq: s.seq, ext: s.ext, df: s.df, ttl: s.ttl, tos: s.tos})
		f.segs = slices.Insert(f.segs, i, ack)
	default:
		if !s.v6 && s.df {
			f.segs = editAt(t, f.segs, setID(s.id), from(0, len(f.segs))...)
			f.clean = true
		}
	}
}
