package segment

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// wireRandom is one random wire packet and what ForWire should make of it.
type wireRandom struct {
	spec     superSpec
	pkt      []byte
	mtu, mss int
	bad      bool // complete checksum, then corrupted
}

// randomWire draws a TCP or UDP packet of up to 64 KiB, as a TSO peer or a
// jumbo-frame link would send it, and an MTU between the IPv4 (576) or
// IPv6 (1280) minimum and 9000.
func randomWire(r *rand.Rand) wireRandom {
	var c wireRandom
	s := &c.spec
	s.v6 = r.IntN(2) == 0
	s.proto = tcp
	if r.IntN(5) < 2 {
		s.proto = udp
	}
	lo := 576
	if s.v6 {
		lo = 1280
	}
	switch r.IntN(4) {
	case 0:
		c.mtu = []int{lo, 1280, 1500, 9000}[r.IntN(4)]
		c.mtu = max(c.mtu, lo)
	default:
		c.mtu = lo + r.IntN(9000-lo+1)
	}
	hdr := 20
	if s.v6 {
		hdr = 40
		for _, e := range []extHdr{{extHopByHop, 8}, {extDestOpts, 16}, {extRouting, 24}} {
			if r.IntN(4) == 0 {
				s.ext = append(s.ext, e)
				hdr += e.len
			}
		}
	} else if r.IntN(3) == 0 {
		s.ipOpts = nops(4 * r.IntN(11))
		hdr += len(s.ipOpts)
	}
	if s.proto == tcp {
		if r.IntN(2) == 0 {
			s.tcpOpts = nops(4 * r.IntN(11))
		}
		hdr += 20 + len(s.tcpOpts)
		flags := flagACK
		for _, f := range []uint8{flagPSH, flagFIN, flagCWR, flagECE, flagURG} {
			if r.IntN(4) == 0 {
				flags |= f
			}
		}
		if r.IntN(30) == 0 {
			flags |= flagSYN
		}
		s.tcpFlags = flags
		if r.IntN(3) == 0 {
			c.mss = 48 + r.IntN(9000)
		}
	} else {
		hdr += 8
	}
	room := 65535 - hdr
	if s.v6 {
		room = 65535 - (hdr - 40)
	}
	switch r.IntN(3) {
	case 0: // fits or about the mtu
		s.payload = max(0, min(room, c.mtu-hdr-2+r.IntN(5)))
	case 1:
		s.payload = r.IntN(room + 1)
	default:
		s.payload = room - r.IntN(100)
	}
	s.df = r.IntN(2) == 0
	s.id, s.seq, s.seed = uint16(r.Uint32()), r.Uint32(), r.Uint64()
	switch r.IntN(10) {
	case 0:
		c.bad = s.payload > 0
	case 1, 2, 3, 4, 5:
		s.needsCsum = true
	}
	c.pkt = wirePacket(*s)
	if c.bad {
		corruptLast(c.pkt)
	}
	return c
}

func nops(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 1
	}
	return b
}

// check runs ForWire on the packet and checks the result against the
// rules, then validates and splits it (checkWireSplit: every segment at
// most mtu bytes, the payloads concatenate to the input's, every checksum
// verifies with gVisor's, UFO fragments reassemble to the datagram).
func (c wireRandom) check(t *testing.T, s *Segmenter) {
	h, st, err := s.ForWire(c.pkt, c.mtu, c.mss)
	fits := len(c.pkt) <= c.mtu
	s0 := c.spec
	var tb *tooBigError
	switch {
	case fits:
		if err != nil {
			t.Fatalf("a packet that fits: %v", err)
		}
	case s0.proto == tcp && s0.tcpFlags&flagSYN != 0:
		if !errors.As(err, &tb) || tb.mtu != c.mtu {
			t.Fatalf("a SYN larger than the mtu: %v, want a tooBigError", err)
		}
		return
	case s0.proto == udp && (s0.v6 || s0.df):
		if !errors.As(err, &tb) || tb.mtu != c.mtu {
			t.Fatalf("UDP that cannot be fragmented: %v, want a tooBigError", err)
		}
		return
	case c.bad:
		if !errors.Is(err, ErrBadChecksum) || st != CsumBad {
			t.Fatalf("bad checksum, larger than the mtu: %v %v, want ErrBadChecksum", st, err)
		}
		return
	case err != nil:
		t.Fatalf("ForWire: %v", err)
	}
	wantSt := CsumComplete
	switch {
	case c.bad:
		wantSt = CsumBad
	case s0.needsCsum:
		wantSt = CsumPartial
	}
	if st != wantSt {
		t.Fatalf("checksum state %v, want %v", st, wantSt)
	}
	if h.NeedsCsum() != (st == CsumPartial) {
		t.Fatalf("header %+v for a %v checksum", h, st)
	}
	switch {
	case fits:
		if h.GSOType != GSONone {
			t.Fatalf("header %+v for a packet that fits", h)
		}
	case s0.proto == tcp:
		w, _ := parseWire(c.pkt)
		gso := c.mtu - w.l3 - w.l4
		if c.mss > 0 {
			gso = min(gso, c.mss)
		}
		kind := GSOTCPv4
		if s0.v6 {
			kind = GSOTCPv6
		}
		if s0.tcpFlags&flagCWR != 0 {
			kind |= GSOECN
		}
		if h.GSOType != kind || int(h.GSOSize) != gso {
			t.Fatalf("header %+v, want %v gso_size %d", h, kind, gso)
		}
	default:
		if h.GSOType != GSOUDP || h.GSOSize%8 != 0 || int(h.GSOSize) != (c.mtu-20-len(s0.ipOpts))&^7 {
			t.Fatalf("header %+v, want UFO", h)
		}
	}
	checkWireSplit(t, s, c.pkt, h, c.mtu, c.mss)
}

func TestForWireProperties(t *testing.T) {
	n := 600
	if testing.Short() {
		n = 100
	}
	r := rand.New(rand.NewPCG(20260101, 7))
	// A cap high enough for a 64 KiB packet at the smallest MSS.
	s := &Segmenter{MaxSegments: 1 << 11}
	for i := range n {
		c := randomWire(r)
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			defer func() {
				if t.Failed() {
					t.Logf("spec %+v mtu %d mss %d bad %v, %d bytes", c.spec, c.mtu, c.mss, c.bad, len(c.pkt))
				}
			}()
			c.check(t, s)
		})
	}
}
