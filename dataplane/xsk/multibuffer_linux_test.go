package xsk

// Multi-buffer receive against the kernel: jumbo frames, a veth peer's
// GSO super-packets, the chain bound, the fallback without multi-buffer,
// and a 64 KiB packet through the return path.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
	"github.com/gsoplane/gsoplane/segment"
)

// rxFrameLeak returns how many RX frames are the kernel's by the socket's
// books but neither in the fill ring nor on the RX ring: frames the
// kernel is using (none when no packet is on its way) or lost ones.
func (x *Socket) rxFrameLeak() int {
	if !x.enter() {
		return 0
	}
	defer x.mu.RUnlock()
	kernel := 0
	for _, s := range x.state[:x.rxFrames] {
		if s == xskFrameKernel {
			kernel++
		}
	}
	inFill := x.fill.local - x.fill.loadConsumer()
	onRing := x.rx.loadProducer() - x.rx.local
	return kernel - int(inFill) - int(onRing)
}

// checkNoLeak checks, once the traffic is over and nothing receives any
// more, that every RX frame of p's sockets is accounted for.
func checkNoLeak(t *testing.T, p *Port) {
	t.Helper()
	for _, x := range p.Sockets() {
		leak := 0
		for deadline := time.Now().Add(xdpWait); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if leak = x.rxFrameLeak(); leak == 0 {
				break
			}
		}
		if leak != 0 {
			t.Errorf("queue %d: %d RX frames are neither in the fill ring nor on the RX ring", x.queueID, leak)
		}
	}
}

// progReceive receives from every socket of p through its Receiver, one
// goroutine each, and sends a copy of each frame, until stop (called in
// t.Cleanup too) stops the port's receiving.
func progReceive(t *testing.T, p *Port) (frames <-chan []byte, stop func()) {
	t.Helper()
	out := make(chan []byte, 1024)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, x := range p.Sockets() {
		wg.Go(func() {
			r := x.Receiver()
			frames := make([][]byte, 16)
			for {
				n, err := r.Receive(frames)
				select {
				case <-done:
					return
				default:
				}
				if err != nil {
					t.Errorf("Receive: %v", err)
					return
				}
				for _, f := range frames[:n] {
					select {
					case out <- bytes.Clone(f[rxFront:]): // the Ethernet frame
					case <-done:
						return
					}
				}
			}
		})
	}
	stop = sync.OnceFunc(func() {
		close(done)
		p.StopReceive()
		wg.Wait()
	})
	t.Cleanup(stop)
	return out, stop
}

// progAwait takes frames from ch until it has one equal to each of want
// (in any order), or the wait is over; it returns the ones it missed.
func progAwait(ch <-chan []byte, want [][]byte) [][]byte {
	missing := slices.Clone(want)
	timeout := time.After(xdpWait)
	for len(missing) > 0 {
		select {
		case f := <-ch:
			missing = slices.DeleteFunc(missing, func(w []byte) bool { return bytes.Equal(w, f) })
		case <-timeout:
			return missing
		}
	}
	return missing
}

// sumStats adds up the sockets' counters.
func sumStats(p *Port) Stats {
	var s Stats
	for _, st := range p.Stats() {
		s.RX += st.RX
		s.RXMultiBuffer += st.RXMultiBuffer
		s.RXChainTooLong += st.RXChainTooLong
		s.RXChainBroken += st.RXChainBroken
		s.BadFrames += st.BadFrames
		s.RXDropped += st.RXDropped
		s.Oversize += st.Oversize
	}
	return s
}

// TestXSKJumbo: through a 9000-byte link, in native and generic mode, IP
// packets for the redirect prefixes of 2000, 4000 and 8950 bytes, IPv4
// and IPv6, reach Receive whole and byte for byte as they were sent
// (the longer two as chains of 2 and 3 frames); no frame is lost, and
// receiving them does not allocate.
func TestXSKJumbo(t *testing.T) {
	netlab.SkipWithout(t, netlab.AFXDPMultiBuffer)
	for _, mode := range []Mode{ModeNative, ModeGeneric} {
		t.Run(mode.String(), func(t *testing.T) {
			l := newJumboLab(t)
			p := l.open(t, Config{Mode: mode, NumFrames: 1024, RingSize: 256, Redirect: progRedirect})
			if !p.MultiBuffer() {
				t.Fatal("no multi-buffer on this kernel")
			}
			var want [][]byte
			for _, size := range []int{2000, 4000, 8950} {
				for _, src := range []netip.AddrPort{progSrc4, progSrc6} {
					dst, hdr := progDst4, header.IPv4MinimumSize+header.UDPMinimumSize
					if src.Addr().Is6() {
						dst, hdr = progDst6, header.IPv6MinimumSize+header.UDPMinimumSize
					}
					payload := make([]byte, size-hdr)
					for i := range payload {
						payload[i] = byte(i*7 + size)
					}
					want = append(want, progUDP(l.macA, l.macB, src, dst, 64, payload))
				}
			}
			ch, stop := progReceive(t, p)
			l.sendRaw(t, want...)
			if missing := progAwait(ch, want); len(missing) > 0 {
				t.Fatalf("%d of %d frames did not arrive whole: %+v", len(missing), len(want), sumStats(p))
			}
			st := sumStats(p)
			t.Logf("%v: %+v", p.Mode(), st)
			if st.RX != 6 || st.RXMultiBuffer != 4 || st.RXChainTooLong+st.RXChainBroken+st.BadFrames+st.RXDropped != 0 {
				t.Errorf("received %d packets, %d multi-buffer, want 6 and 4: %+v", st.RX, st.RXMultiBuffer, st)
			}
			stop()
			checkNoLeak(t, p)
		})
	}
}

// TestXSKJumboAllocs: receiving multi-buffer packets from the kernel does
// not allocate.
func TestXSKJumboAllocs(t *testing.T) {
	netlab.SkipWithout(t, netlab.AFXDPMultiBuffer)
	l := newJumboLab(t)
	p := l.open(t, Config{NumFrames: 1024, RingSize: 256, Redirect: progRedirect})
	frame := progUDP(l.macA, l.macB, progSrc4, progDst4, 64, make([]byte, 8000))
	fd := l.peer.SocketT(t, unix.AF_PACKET, unix.SOCK_RAW)
	sa := &unix.SockaddrLinklayer{Ifindex: l.peer.LinkT(t, progIfB).Attrs().Index, Halen: 6}
	copy(sa.Addr[:], frame[:6])
	got := xdpCheckRXAllocs(t, p, func() { unix.Sendto(fd, frame, 0, sa) })
	if st := sumStats(p); st.RXMultiBuffer == 0 {
		t.Errorf("no multi-buffer packet among %d: %+v", got, st)
	}
}

// TestXSKChainBound: a chain longer than MaxChain that reaches a socket
// (here: the program is loaded to take longer frames than the sockets)
// is dropped and counted, its frames go back to the fill ring, and the
// packets after it arrive.
func TestXSKChainBound(t *testing.T) {
	netlab.SkipWithout(t, netlab.AFXDPMultiBuffer)
	l := newJumboLab(t)
	p := l.open(t, Config{Mode: ModeGeneric, NumFrames: 256, RingSize: 64, Redirect: progRedirect, MaxChain: 2})
	ch, stop := progReceive(t, p)
	l.gw.Do(t, func() {
		netlab.Must(t, p.prog.detach())
		p.prog.setReceive(MaxChainLimit*rxFrameLen(DefaultFrameSize), true)
		netlab.Must(t, p.prog.load(l.macA))
		_, err := p.prog.attach(l.gw.LinkT(t, progIfA), ModeGeneric)
		netlab.Must(t, err)
	})
	long := progUDP(l.macA, l.macB, progSrc4, progDst4, 64, make([]byte, 8000)) // 3 frames
	fits := progUDP(l.macA, l.macB, progSrc6, progDst6, 64, make([]byte, 7000)) // 2 frames
	for range 20 {
		l.sendRaw(t, long)
	}
	l.sendRaw(t, fits)
	if missing := progAwait(ch, [][]byte{fits}); len(missing) > 0 {
		t.Fatalf("the packet after the long chains did not arrive: %+v", sumStats(p))
	}
	st := sumStats(p) // the queues go at their own pace
	for deadline := time.Now().Add(xdpWait); st.RXChainTooLong < 20 && time.Now().Before(deadline); st = sumStats(p) {
		time.Sleep(time.Millisecond)
	}
	t.Logf("%+v", st)
	if st.RXChainTooLong != 20 || st.RX != 1 || st.RXMultiBuffer != 1 {
		t.Errorf("%d chains too long, %d packets, %d multi-buffer; want 20, 1, 1", st.RXChainTooLong, st.RX, st.RXMultiBuffer)
	}
	stop()
	checkNoLeak(t, p)
}

// TestXSKGSOPeer: what a veth peer's UDP GSO super-packet (63000 bytes
// of payload in 1400-byte segments, one sendmsg) becomes on the way into
// the socket. In generic mode the peer keeps its GSO (the veth is not
// told about the program) and the whole super-packet reaches the socket
// as one chain of frames: one IP packet of 63028 (63048) bytes, its
// payload intact; its UDP checksum is the peer's partial one (the veth
// hands over CHECKSUM_PARTIAL, AF_XDP only the bytes). Without
// multi-buffer the program passes it to the kernel (Oversize). In native
// mode the veth takes TSO and USO away from its peer whatever the
// program (with frags or not), so the peer segments: 45 packets of one
// frame each.
func TestXSKGSOPeer(t *testing.T) {
	const segSize, payloadLen = 1400, 45 * 1400
	payload := make([]byte, payloadLen)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	for off := 0; off < payloadLen; off += segSize {
		binary.BigEndian.PutUint32(payload[off:], uint32(off))
	}
	for _, c := range []struct {
		mode     Mode
		multi    MultiBuffer
		segments bool // the socket gets the segments, not the super-packet
	}{
		{ModeGeneric, MultiBufferOn, false},
		{ModeNative, MultiBufferOn, true},
		{ModeGeneric, MultiBufferOff, false},
	} {
		t.Run(c.mode.String()+"/multi-buffer="+c.multi.String(), func(t *testing.T) {
			if c.multi == MultiBufferOn {
				netlab.SkipWithout(t, netlab.AFXDPMultiBuffer)
			}
			n := newXDPNet(t)
			p := n.open(t, Config{Ifname: xdpIfA, Mode: c.mode, NumFrames: xdpFrames, RingSize: xdpRing,
				Redirect: xdpRedirect, MultiBuffer: c.multi})
			n.echo(t) // resolves the neighbours
			ch, stop := progReceive(t, p)
			for _, dst := range []string{"198.18.200.9", "2001:2:0:200::9"} {
				conn := xdpDialUDP(t, n.peer, netip.AddrPortFrom(netip.MustParseAddr(dst), 4789))
				setUDPSegment(t, conn, segSize)
				if _, err := conn.Write(payload); err != nil {
					t.Fatalf("send %d bytes with UDP_SEGMENT to %s: %v", payloadLen, dst, err)
				}
				got := collectUDP(ch, payloadLen)
				t.Logf("%s: %d UDP payload bytes to the socket in %d packets of %v bytes; %+v",
					dst, got.bytes, len(got.sizes), slices.Compact(slices.Clone(got.sizes)), sumStats(p))
				checkGSOPeer(t, c.multi, c.segments, got, payload)
			}
			if c.multi == MultiBufferOff {
				waitStats(t, p, Stats{Oversize: 2})
			}
			stop()
			checkNoLeak(t, p)
		})
	}
}

// setUDPSegment sets UDP_SEGMENT on conn.
func setUDPSegment(t *testing.T, conn *net.UDPConn, size int) {
	t.Helper()
	raw, err := conn.SyscallConn()
	netlab.Must(t, err)
	netlab.Must(t, raw.Control(func(fd uintptr) {
		err = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_SEGMENT, size)
	}))
	netlab.Must(t, err)
}

// udpReceived is what collectUDP got: each UDP packet's payload length,
// and the payloads, checked against the stream by their offsets.
type udpReceived struct {
	sizes    []int
	bytes    int
	payloads [][]byte
}

// collectUDP takes UDP frames from ch until it has want payload bytes or
// nothing comes for a while.
func collectUDP(ch <-chan []byte, want int) udpReceived {
	var got udpReceived
	for got.bytes < want {
		select {
		case f := <-ch:
			if _, payload, ok := xdpParseUDP(f); ok {
				got.sizes = append(got.sizes, len(payload))
				got.bytes += len(payload)
				got.payloads = append(got.payloads, payload)
			}
		case <-time.After(500 * time.Millisecond):
			return got
		}
	}
	return got
}

// checkGSOPeer checks what collectUDP got from a GSO super-packet of
// payload.
func checkGSOPeer(t *testing.T, multi MultiBuffer, segments bool, got udpReceived, payload []byte) {
	t.Helper()
	switch {
	case multi == MultiBufferOff:
		if got.bytes != 0 {
			t.Errorf("without multi-buffer the socket got %d payload bytes", got.bytes)
		}
	case segments:
		for _, pl := range got.payloads {
			off := int(binary.BigEndian.Uint32(pl))
			if off+len(pl) > len(payload) || !bytes.Equal(pl, payload[off:off+len(pl)]) {
				t.Errorf("segment at %d (%d bytes) differs from what was sent", off, len(pl))
			}
		}
		if got.bytes != len(payload) || len(got.payloads) != len(payload)/1400 {
			t.Errorf("got %d bytes in %d segments, want %d in %d", got.bytes, len(got.payloads), len(payload), len(payload)/1400)
		}
	default:
		if len(got.payloads) != 1 || !bytes.Equal(got.payloads[0], payload) {
			t.Errorf("got %d packets (%v bytes), want the super-packet's %d bytes whole", len(got.payloads), got.sizes, len(payload))
		}
	}
}

// TestXSKFallback: without the kernel's multi-buffer support (forced: the
// kernel refuses the program flag, or the socket flag), MultiBufferAuto
// goes on in single-buffer mode, the program passing longer frames to
// the kernel (Oversize), and MultiBufferOn fails with ErrNoMultiBuffer.
// A native program without frags cannot go on a veth whose peer's MTU
// is above a page less the headroom (the veth refuses it); Auto then
// runs in generic mode.
func TestXSKFallback(t *testing.T) {
	for _, c := range []struct {
		name string
		flag *uint32
		sg   *uint16
	}{{"program", &xdpFragsFlag, nil}, {"bind", nil, &xskSGFlag}} {
		t.Run(c.name, func(t *testing.T) {
			if c.flag != nil {
				defer func(v uint32) { *c.flag = v }(*c.flag)
				*c.flag = 1 << 30 // a program flag no kernel knows: EINVAL
			}
			if c.sg != nil {
				defer func(v uint16) { *c.sg = v }(*c.sg)
				*c.sg = 1 << 15 // a bind flag no kernel knows: EINVAL
			}
			l := newJumboLab(t)
			_, err := l.tryOpen(t, Config{Mode: ModeGeneric, NumFrames: 256, RingSize: 64, Redirect: progRedirect,
				MultiBuffer: MultiBufferOn})
			if !errors.Is(err, ErrNoMultiBuffer) {
				t.Fatalf("MultiBufferOn without the kernel's support: %v", err)
			}
			t.Log(err)
			p := l.open(t, Config{NumFrames: 256, RingSize: 64, Redirect: progRedirect})
			if p.MultiBuffer() || p.Mode() != ModeGeneric {
				t.Fatalf("MultiBufferAuto without the kernel's support: multi-buffer %v, mode %v", p.MultiBuffer(), p.Mode())
			}
			fit := rxFrameLen(DefaultFrameSize) - xdpEthLen
			progCheckOversize(t, l, p, []int{1500, fit, fit + 1, 8500})
		})
	}
}

// TestXSKNativeJumboNeedsFrags: the veth refuses a native XDP program
// without frags while its peer's MTU is above what one page takes
// (ERANGE, "Peer MTU is too large to set XDP"): with multi-buffer off,
// native mode fails on a 9000-byte veth, and Auto falls back to generic.
func TestXSKNativeJumboNeedsFrags(t *testing.T) {
	l := newJumboLab(t)
	_, err := l.tryOpen(t, Config{Mode: ModeNative, NumFrames: 256, RingSize: 64, MultiBuffer: MultiBufferOff})
	if !errors.Is(err, unix.ERANGE) {
		t.Errorf("native, multi-buffer off, 9000-byte MTU: %v, want ERANGE", err)
	}
	t.Log(err)
	p := l.open(t, Config{NumFrames: 256, RingSize: 64, MultiBuffer: MultiBufferOff})
	if p.Mode() != ModeGeneric {
		t.Errorf("auto mode, multi-buffer off, 9000-byte MTU: %v, want generic", p.Mode())
	}
}

// TestXSKReturnPath64K: the largest packets, an IPv4 UDP datagram of
// 65535 bytes and an IPv6 one with 65535 bytes of payload, as chains of
// 18 frames, go through pipeline.ReturnPath into its writer whole, one
// write each, with GRO (the coalescer passes them through) and without.
func TestXSKReturnPath64K(t *testing.T) {
	for _, gro := range []bool{true, false} {
		cfg := Config{FrameSize: DefaultFrameSize, NumFrames: 128, RingSize: 64}
		s := newXSKSim(t, cfg.FrameSize, cfg.NumFrames, cfg.RingSize, defaultMaxChain(cfg))
		s.untracked = true
		var want [][]byte
		for _, src := range []netip.AddrPort{progSrc4, progSrc6} {
			dst, size := progDst4, 65535-header.IPv4MinimumSize-header.UDPMinimumSize
			if src.Addr().Is6() {
				dst, size = progDst6, 65535-header.UDPMinimumSize
			}
			payload := make([]byte, size)
			for i := range payload {
				payload[i] = byte(i * 13)
			}
			frame := progUDP(progMACA, progMACB, src, dst, 64, payload)
			want = append(want, frame[xdpEthLen:])
			s.deliverBytes(frame)
		}
		ctx, cancel := context.WithCancel(t.Context())
		w := &returnWriter{cancel: cancel, hdrSize: segment.HeaderSize}
		rp, err := pipeline.NewReturnPath(pipeline.ReturnConfig{Receiver: s.x.Receiver(), Writer: w,
			HeaderSize: segment.HeaderSize, TCP: gro, UDP: gro})
		netlab.Must(t, err)
		netlab.Must(t, rp.Run(ctx))
		if len(w.pkts) != 2 || !bytes.Equal(w.pkts[0], want[0]) || !bytes.Equal(w.pkts[1], want[1]) {
			t.Fatalf("GRO %v: the writer got %d packets, want the two of %d and %d bytes", gro, len(w.pkts), len(want[0]), len(want[1]))
		}
		st := rp.Stats()
		t.Logf("GRO %v: return path %+v", gro, st)
		if st.Packets != 2 || st.Writes != 2 || s.x.Stats().RXMultiBuffer != 2 {
			t.Errorf("GRO %v: return path %+v, socket %+v", gro, st, s.x.Stats())
		}
	}
}

// returnWriter is a frame.VectorWriter that keeps the packets it is
// given, less their virtio-net header (which must be all zero), and ends
// the return path after the first batch.
type returnWriter struct {
	cancel  func()
	hdrSize int
	pkts    [][]byte
}

func (w *returnWriter) Write(bufs [][]byte, offset int) (int, error) {
	for _, b := range bufs {
		w.add(b[offset:])
	}
	w.cancel()
	return len(bufs), nil
}

func (w *returnWriter) WriteVectors(pkts [][][]byte) (int, error) {
	for _, p := range pkts {
		w.add(slices.Concat(p...))
	}
	w.cancel()
	return len(pkts), nil
}

func (w *returnWriter) add(b []byte) {
	if len(b) < w.hdrSize || !bytes.Equal(b[:w.hdrSize], make([]byte, w.hdrSize)) {
		w.pkts = append(w.pkts, nil) // no header, or one where none belongs: fails the comparison
		return
	}
	w.pkts = append(w.pkts, bytes.Clone(b[w.hdrSize:]))
}

// deliverBytes puts frame on the RX ring as the kernel does in copy
// mode: in full frames (less the headroom), the last one shorter.
func (s *xskSim) deliverBytes(frame []byte) {
	s.t.Helper()
	step := s.x.frameSize - xdpPacketHeadroom
	var lens []int
	for off := 0; off < len(frame); off += step {
		lens = append(lens, min(step, len(frame)-off))
	}
	if !s.deliver(lens, 0) {
		s.t.Fatalf("no room for %d frames", len(lens))
	}
	// Overwrite the pattern with the frame, descriptor by descriptor.
	off := 0
	for i := len(lens); i > 0; i-- {
		d := s.x.rx.descs[(s.rxProd-uint32(i))&s.x.rx.mask]
		off += copy(s.x.umem[d.Addr:d.Addr+uint64(d.Len)], frame[off:])
	}
}
