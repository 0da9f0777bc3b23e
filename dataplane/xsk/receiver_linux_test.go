package xsk

// The receive side's ring logic without the kernel: a socket whose rings
// live in Go memory, the kernel's side played by xskSim, checked against
// a reference that cuts the descriptor stream into packets at the
// descriptors without XDP_PKT_CONTD.

import (
	"bytes"
	"testing"

	"golang.org/x/sys/unix"
)

// xskSim is a socket whose rings are Go memory and a kernel that takes
// frames from the fill ring and puts descriptors on the RX ring.
type xskSim struct {
	t                             testing.TB
	x                             *Socket
	fillProd, fillCons, fillFlags uint32
	rxProd, rxCons, rxFlags       uint32
	held                          []uint64 // frames taken from the fill ring, not yet on the RX ring
	ref                           xskRef
	untracked                     bool     // the reference is not told (it allocates)
	outstanding                   []uint64 // frames receive handed over, not recycled yet
	seq                           byte     // pattern of the next frame's bytes
	frames                        [][]byte // receive's buffers
	addrs                         []uint64
	gotPackets, gotMulti          int
}

// newXSKSim makes a socket of numFrames frameSize-byte frames (half of
// them RX), rings of ringSize entries and chains of up to maxChain
// frames (1: multi-buffer off), and the kernel's side of it.
func newXSKSim(t testing.TB, frameSize, numFrames, ringSize, maxChain int) *xskSim {
	s := &xskSim{t: t, frames: make([][]byte, 64), addrs: make([]uint64, 64)}
	x := newSocket(-1, 0, Config{FrameSize: frameSize, NumFrames: numFrames})
	x.umem = make([]byte, numFrames*frameSize)
	ring := func(prod, cons, flags *uint32) xskRing {
		return xskRing{producer: prod, consumer: cons, flags: flags, mask: uint32(ringSize - 1), size: uint32(ringSize)}
	}
	x.fill = xskAddrRing{xskRing: ring(&s.fillProd, &s.fillCons, &s.fillFlags), descs: make([]uint64, ringSize)}
	x.rx = xskDescRing{xskRing: ring(&s.rxProd, &s.rxCons, &s.rxFlags), descs: make([]unix.XDPDesc, ringSize)}
	x.initFrames(numFrames)
	x.initChains(maxChain)
	s.x = x
	s.ref.maxChain = maxChain
	return s
}

// take moves a frame from the fill ring into the kernel's hands; false if
// the fill ring is empty.
func (s *xskSim) take() bool {
	if s.fillCons == s.fillProd {
		return false
	}
	s.held = append(s.held, s.x.fill.descs[s.fillCons&s.x.fill.mask])
	s.fillCons++
	return true
}

// room reports whether the RX ring takes n more descriptors.
func (s *xskSim) room(n int) bool { return int(s.rxProd-s.rxCons)+n <= int(s.x.rx.size) }

// put puts a descriptor on the RX ring and tells the reference.
func (s *xskSim) put(d unix.XDPDesc, good bool) {
	var data []byte
	if good {
		data = s.x.umem[d.Addr : d.Addr+uint64(d.Len)]
	}
	s.x.rx.descs[s.rxProd&s.x.rx.mask] = d
	s.rxProd++
	if !s.untracked {
		s.ref.add(d, good, data)
	}
}

// deliver puts a packet of len(lens) frames on the RX ring, descriptor i
// lens[i] bytes long, its frames filled with a pattern; the last one's
// options are last (0 ends the packet, XDP_PKT_CONTD leaves it open).
// It reports false, and puts nothing, if frames or ring room are short.
func (s *xskSim) deliver(lens []int, last uint32) bool {
	for len(s.held) < len(lens) && s.take() {
	}
	if len(s.held) < len(lens) || !s.room(len(lens)) {
		return false
	}
	for i, n := range lens {
		a := s.held[len(s.held)-1]
		s.held = s.held[:len(s.held)-1]
		d := unix.XDPDesc{Addr: a + xdpPacketHeadroom, Len: uint32(n), Options: unix.XDP_PKT_CONTD}
		if i == len(lens)-1 {
			d.Options = last
		}
		for j := range n {
			s.x.umem[d.Addr+uint64(j)] = s.seq + byte(j)
		}
		s.seq += 7
		s.put(d, true)
	}
	return true
}

// deliverBad puts a bad descriptor on the RX ring: an address outside
// the UMEM, a TX frame, or (if the kernel holds one) an RX frame with a
// length past its end or a packet too close to its start for the room
// the receiver keeps in front (rxFront).
func (s *xskSim) deliverBad(kind byte, options uint32) bool {
	if !s.room(1) {
		return false
	}
	fs := uint64(s.x.frameSize)
	d := unix.XDPDesc{Len: 60, Options: options}
	switch kind % 4 {
	case 0:
		d.Addr = uint64(len(s.x.umem)) + xdpPacketHeadroom
	case 1:
		d.Addr = uint64(s.x.rxFrames)*fs + xdpPacketHeadroom
	case 2:
		if len(s.held) == 0 && !s.take() {
			return false
		}
		d.Addr = s.held[len(s.held)-1] + xdpPacketHeadroom
		d.Len = uint32(fs - xdpPacketHeadroom + 1)
		s.held = s.held[:len(s.held)-1]
	case 3:
		if len(s.held) == 0 && !s.take() {
			return false
		}
		d.Addr = s.held[len(s.held)-1] + rxFront - 1
		s.held = s.held[:len(s.held)-1]
	}
	s.put(d, false)
	return true
}

// receive runs the socket's receive with room for bufs packets and
// addrs frames, and checks what it returns against the reference.
func (s *xskSim) receive(bufs, addrs int) int {
	s.t.Helper()
	n, m := s.x.receive(s.frames[:bufs], s.addrs[:addrs], rxFront)
	singles := 0
	for _, f := range s.frames[:n] {
		want, ok := s.ref.next()
		if len(f) < rxFront {
			s.t.Fatalf("receive: a view of %d bytes, without the %d bytes of room in front", len(f), rxFront)
		}
		if f = f[rxFront:]; !ok || !bytes.Equal(f, want.data) {
			s.t.Fatalf("receive: packet of %d bytes, want %d (%v): %x", len(f), len(want.data), ok, f[:min(len(f), 32)])
		}
		if want.multi {
			s.gotMulti++
		} else {
			singles++
		}
	}
	if singles != m {
		s.t.Fatalf("receive: %d packets in one frame, %d frames", singles, m)
	}
	s.gotPackets += n
	s.outstanding = append(s.outstanding, s.addrs[:m]...)
	return n
}

// recycle gives the first n frames receive handed over back.
func (s *xskSim) recycle(n int) {
	n = min(n, len(s.outstanding))
	s.x.recycle(s.outstanding[:n])
	s.outstanding = append(s.outstanding[:0], s.outstanding[n:]...)
}

// check drains the ring, gives every frame back and checks the counters
// against the reference and that no RX frame is lost: each one is in
// the fill ring, in the kernel's hands or spare.
func (s *xskSim) check() {
	s.t.Helper()
	s.drain()
	if s.ref.open() && !s.deliver([]int{100}, 0) { // ends the open chain
		s.t.Fatal("no frame to end the open chain with")
	}
	s.drain()
	if len(s.ref.want) > 0 {
		s.t.Fatalf("%d packets never came", len(s.ref.want))
	}
	st := s.x.Stats()
	want := s.ref.stats
	want.RX, want.RXMultiBuffer = uint64(s.gotPackets), uint64(s.gotMulti)
	if st != want {
		s.t.Fatalf("stats\n%+v, want\n%+v", st, want)
	}
	var kernel, spare, other int
	for _, state := range s.x.state[:s.x.rxFrames] {
		switch state {
		case xskFrameKernel:
			kernel++
		case xskFrameSpare:
			spare++
		default:
			other++
		}
	}
	inFill := int(s.fillProd - s.fillCons)
	if other != 0 || kernel != inFill+len(s.held) || spare != len(s.x.rxSpare) {
		s.t.Fatalf("RX frames: %d the kernel's (%d in the fill ring, %d held), %d spare (%d listed), %d other",
			kernel, inFill, len(s.held), spare, len(s.x.rxSpare), other)
	}
}

// drain receives until the RX ring is empty and recycles every frame.
func (s *xskSim) drain() {
	s.t.Helper()
	for s.rxCons != s.rxProd || len(s.outstanding) > 0 {
		s.receive(len(s.frames), len(s.addrs))
		s.recycle(len(s.outstanding))
	}
}

// xskRef is the reference: it cuts the descriptors put on the RX ring
// into packets at the descriptors without XDP_PKT_CONTD and says what
// receive must return and count.
type xskRef struct {
	maxChain int
	group    []xskRefDesc // the packet being put on the ring
	want     []xskRefPacket
	stats    Stats
}

type xskRefDesc struct {
	good bool
	data []byte
}

type xskRefPacket struct {
	data  []byte
	multi bool
}

// add takes a descriptor put on the ring and a copy of its bytes (the
// frame goes back to the fill ring before a chain's end is on the ring).
func (r *xskRef) add(d unix.XDPDesc, good bool, data []byte) {
	r.group = append(r.group, xskRefDesc{good, bytes.Clone(data)})
	if !good {
		r.stats.BadFrames++
	}
	if d.Options&unix.XDP_PKT_CONTD == 0 {
		r.end()
	}
}

// open reports whether a packet's last descriptor is still to come.
func (r *xskRef) open() bool { return len(r.group) > 0 }

// end ends the packet being put on the ring.
func (r *xskRef) end() {
	g := r.group
	r.group = nil
	var data []byte
	good := true
	for _, d := range g {
		data = append(data, d.data...)
		good = good && d.good
	}
	switch {
	case len(g) == 1 && good:
		r.want = append(r.want, xskRefPacket{data: data})
	case len(g) == 1:
	case len(g) > r.maxChain:
		r.stats.RXChainTooLong++
	case !good || len(data) < ethHdrLen:
		r.stats.RXChainBroken++
	default:
		r.want = append(r.want, xskRefPacket{data: data, multi: true})
	}
}

// next returns the packet receive must return next.
func (r *xskRef) next() (xskRefPacket, bool) {
	if len(r.want) == 0 {
		return xskRefPacket{}, false
	}
	p := r.want[0]
	r.want = r.want[1:]
	return p, true
}

// run plays script: each step is an opcode byte and its arguments.
func (s *xskSim) run(script []byte) {
	arg := func(i int) int {
		if i < len(script) {
			return int(script[i])
		}
		return 0
	}
	maxLen := s.x.frameSize - xdpPacketHeadroom
	for i := 0; i < len(script); i += 3 {
		a, b := arg(i+1), arg(i+2)
		switch script[i] % 6 {
		case 0, 1: // a packet of 1 to maxChain+2 frames
			lens := make([]int, 1+a%(s.ref.maxChain+2))
			for j := range lens {
				lens[j] = (b*131 + j*977) % (maxLen + 1)
				if b&1 == 0 && j < len(lens)-1 {
					lens[j] = maxLen // full frames but the last, as the kernel cuts them in copy mode
				}
			}
			s.deliver(lens, 0)
		case 2: // the start of a chain, ended later
			s.deliver([]int{1 + a%maxLen}, unix.XDP_PKT_CONTD)
		case 3:
			s.deliverBad(byte(a), uint32(b&1)*unix.XDP_PKT_CONTD)
		case 4:
			s.receive(1+a%len(s.frames), b%(len(s.addrs)+1))
		case 5:
			s.recycle(a % 8)
		}
	}
	s.check()
}

// FuzzReceiveChains plays random scripts of descriptors (packets of one
// or more frames, chains left open across receives, bad descriptors) and
// receives (with room for few or many packets and frames) on a socket
// with small rings, so that chains wrap around the ring's end: receive
// must return exactly the packets the reference cuts out, byte for byte,
// count the rest, and lose no frame.
func FuzzReceiveChains(f *testing.F) {
	for _, seed := range [][]byte{
		{0, 0, 0, 4, 63, 64},                                              // one frame
		{0, 2, 1, 4, 63, 64},                                              // a chain of three
		{0, 9, 0, 4, 63, 64},                                              // too long
		{2, 5, 0, 4, 1, 1, 0, 1, 2},                                       // a chain across receives
		{3, 2, 1, 0, 1, 2, 4, 9, 9},                                       // a bad length inside a chain
		{3, 0, 0, 3, 1, 1, 0, 0, 0},                                       // bad descriptors alone and in a chain
		{0, 3, 0, 0, 3, 0, 0, 3, 0, 4, 1, 0, 4, 1, 0, 4, 63, 64},          // room for one packet, no frame
		{0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 4, 63, 64, 5, 7, 0}, // the arena fills
	} {
		f.Add(uint8(4), seed)
	}
	f.Fuzz(func(t *testing.T, maxChain uint8, script []byte) {
		s := newXSKSim(t, 2048, 32, 8, 1+int(maxChain)%5)
		s.run(script)
	})
}

// TestReceiveChains plays scripts that show the cases one by one.
func TestReceiveChains(t *testing.T) {
	for _, c := range []struct {
		name     string
		maxChain int
		script   []byte
	}{
		{"single frames", 4, []byte{0, 0, 0, 0, 0, 1, 4, 63, 64, 5, 2, 0}},
		{"chains wrap the ring", 4, []byte{0, 2, 0, 4, 63, 64, 5, 9, 0, 0, 3, 1, 4, 63, 64, 0, 3, 0, 4, 63, 64}},
		{"too long", 4, []byte{0, 4, 0, 0, 5, 1, 4, 63, 64}},
		{"multi-buffer off", 1, []byte{0, 1, 0, 0, 0, 0, 4, 63, 64}},
		{"open across receives", 4, []byte{2, 100, 0, 4, 63, 64, 0, 1, 0, 4, 63, 64}},
		{"too long across receives", 2, []byte{2, 1, 0, 2, 2, 0, 4, 63, 64, 2, 3, 0, 4, 63, 64, 0, 0, 0}},
		{"broken", 4, []byte{0, 1, 0, 3, 2, 1, 0, 0, 0, 3, 0, 0, 3, 1, 1, 0, 0, 1}},
		{"room for one", 4, []byte{0, 1, 0, 0, 0, 0, 0, 1, 0, 4, 0, 1, 4, 0, 0, 4, 0, 1}},
		{"no room in front", 4, []byte{3, 3, 0, 4, 63, 64, 3, 3, 1, 0, 1, 0, 4, 63, 64}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newXSKSim(t, 2048, 32, 8, c.maxChain)
			s.run(c.script)
			t.Logf("%d packets (%d multi-buffer), %+v", s.gotPackets, s.gotMulti, s.x.Stats())
		})
	}
}

// TestReceiveAllocs: a Receive of packets in one frame and of
// multi-buffer packets does not allocate.
func TestReceiveAllocs(t *testing.T) {
	s := newXSKSim(t, 2048, 64, 16, 4)
	s.untracked = true
	r := s.x.Receiver()
	frames := make([][]byte, 8)
	full := s.x.frameSize - xdpPacketHeadroom
	for _, c := range []struct {
		name string
		lens []int
	}{{"single", []int{1500}}, {"multi-buffer", []int{full, full, 1000}}} {
		allocs := testing.AllocsPerRun(200, func() {
			if !s.deliver(c.lens, 0) {
				t.Fatal("no frames")
			}
			if n, err := r.Receive(frames); n != 1 || err != nil {
				t.Fatalf("Receive: %d, %v", n, err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per Receive", c.name, allocs)
		}
	}
	if st := s.x.Stats(); st.RXMultiBuffer == 0 || st.RXMultiBuffer == st.RX {
		t.Errorf("not both kinds were received: %+v", st)
	}
}
