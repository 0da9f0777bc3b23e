package afpacket

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/internal/ethernet"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
	"github.com/gsoplane/gsoplane/segment"
)

// capture records what gw-b receives from the application (TCP to the
// server): how many frames came whole (GSO), with a partial checksum, or
// complete, and how many of them a receiver could not use.
type capture struct {
	fd                          int
	done                        chan struct{}
	mu                          sync.Mutex
	gso, partial, complete, bad int
	bads                        []string
}

// newCapture opens an AF_PACKET socket with PACKET_VNET_HDR on gw-b in B:
// its virtio-net header says how the kernel got each packet
// (csum_start counted from the Ethernet header).
func newCapture(t *testing.T, l *lab) *capture {
	t.Helper()
	gwB := l.B.LinkT(t, netlab.NICB)
	c := &capture{done: make(chan struct{})}
	l.B.Do(t, func() {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		netlab.Must(t, err)
		c.fd = fd
		netlab.Must(t, unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1))
		netlab.Must(t, unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 32<<20))
		netlab.Must(t, unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100000}))
		netlab.Must(t, unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: ethPAll, Ifindex: gwB.Attrs().Index}))
	})
	go c.run(gwB.Attrs().HardwareAddr)
	return c
}

func (c *capture) run(mac net.HardwareAddr) {
	defer close(c.done)
	buf := make([]byte, rxBufSize)
	for {
		n, err := unix.Read(c.fd, buf)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		if err != nil {
			return
		}
		c.check(buf[:n], mac)
	}
}

// stop closes the socket and waits for the reader.
func (c *capture) stop() {
	unix.Shutdown(c.fd, unix.SHUT_RDWR)
	unix.Close(c.fd)
	<-c.done
}

// check classifies one frame for gw-b carrying TCP from the application
// to the server and verifies its checksum as the receiving kernel would
// finish it.
func (c *capture) check(f []byte, mac net.HardwareAddr) {
	if len(f) < Headroom+header.IPv4MinimumSize || string(f[vnetHdrLen:vnetHdrLen+6]) != string(mac) {
		return
	}
	h, _ := segment.DecodeHeader(f, vnetHdrLen)
	pkt := f[Headroom:]
	var src, dst tcpip.Address
	var l3 int
	switch pkt[0] >> 4 {
	case 4:
		ip := header.IPv4(pkt)
		if ip.Protocol() != uint8(header.TCPProtocolNumber) || ip.SourceAddress() != tcpip.AddrFrom4(netlab.App4.As4()) {
			return
		}
		src, dst, l3 = ip.SourceAddress(), ip.DestinationAddress(), int(ip.HeaderLength())
		pkt = pkt[:ip.TotalLength()]
	case 6:
		ip := header.IPv6(pkt)
		if len(pkt) < header.IPv6MinimumSize || ip.TransportProtocol() != header.TCPProtocolNumber || ip.SourceAddress() != tcpip.AddrFrom16(netlab.App6.As16()) {
			return
		}
		src, dst, l3 = ip.SourceAddress(), ip.DestinationAddress(), header.IPv6MinimumSize
		pkt = pkt[:header.IPv6MinimumSize+int(ip.PayloadLength())]
	default:
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	seg := append([]byte(nil), pkt[l3:]...)
	pseudo := header.PseudoHeaderChecksum(header.TCPProtocolNumber, src, dst, uint16(len(seg)))
	switch {
	case h.GSOType != segment.GSONone:
		c.gso++
		if !h.NeedsCsum() || int(h.CsumStart) != ethernet.HeaderLen+l3 || h.CsumOffset != 16 || h.GSOSize == 0 {
			c.bad++
			c.bads = append(c.bads, fmt.Sprintf("GSO frame with header %+v", h))
		}
		return
	case h.NeedsCsum():
		c.partial++
		if int(h.CsumStart) != ethernet.HeaderLen+l3 || h.CsumOffset != 16 {
			c.bad++
			c.bads = append(c.bads, fmt.Sprintf("partial frame with header %+v", h))
			return
		}
		// Finish the checksum as a NIC would: the sum from csum_start,
		// complemented, goes into the field.
		header.TCP(seg).SetChecksum(^checksum.Checksum(seg, 0))
	default:
		c.complete++
	}
	if checksum.Checksum(seg, pseudo) != 0xffff {
		c.bad++
		c.bads = append(c.bads, fmt.Sprintf("bad TCP checksum (header %+v)", h))
	}
}

// TestTCPModes moves SHA-256-checked TCP streams from the application in
// A through a TUN device, the forwarder and the port's sinks to the
// server in B (whose kernel checksums in software and runs GRO), over
// IPv4 and IPv6, in each GSO mode, and checks on gw-b that the frames
// came as the mode says: whole super-packets the peer kernel takes as
// they are, partial checksums that complete correctly, or complete ones.
func TestTCPModes(t *testing.T) {
	for _, mode := range []GSOMode{GSOModeAuto, GSOModeOffload, GSOModePartial, GSOModeFull} {
		t.Run(mode.String(), func(t *testing.T) {
			l := newLab(t, false)
			l.gateway(t, Config{}, mode)
			c := newCapture(t, l)
			for _, srv := range []netip.Addr{netlab.Srv4, netlab.Srv6} {
				netlab.TCPTransfer(t, l.A, l.B, netip.AddrPortFrom(srv, 5201), 16<<20, false)
			}
			time.Sleep(50 * time.Millisecond)
			c.stop()
			st := l.sumStats()
			t.Logf("%v: gw-b saw %d whole, %d partial, %d complete; port %+v", mode, c.gso, c.partial, c.complete, st)
			if c.bad > 0 {
				t.Errorf("%d frames a receiver could not use, such as: %v", c.bad, c.bads[:min(len(c.bads), 5)])
			}
			switch mode {
			case GSOModeAuto, GSOModeOffload: // a veth segments everything: super-packets go whole
				if c.gso == 0 || st.TXSuper == 0 {
					t.Errorf("no whole super-packets (gw-b %d, port %d)", c.gso, st.TXSuper)
				}
			case GSOModePartial:
				if c.gso != 0 || st.TXSuper != 0 || c.partial == 0 || st.TXPartial == 0 {
					t.Errorf("want partial checksums only: gw-b %d whole, %d partial; port %d whole, %d partial", c.gso, c.partial, st.TXSuper, st.TXPartial)
				}
			case GSOModeFull:
				if c.gso != 0 || c.partial != 0 || st.TXSuper != 0 || st.TXPartial != 0 || c.complete == 0 {
					t.Errorf("want complete segments only: gw-b %d whole, %d partial, %d complete; port %d whole, %d partial",
						c.gso, c.partial, c.complete, st.TXSuper, st.TXPartial)
				}
			}
			if st.Drops.Total() != st.Drops.NotRouted { // the host's MLD reports and the like
				t.Errorf("drops: %+v", st.Drops)
			}
		})
	}
}

// TestGSOWithoutTSO: on a NIC that does not segment, the kernel drops a
// super-packet a qdisc-bypassing packet socket sends (ENOBUFS, tx_dropped)
// instead of segmenting it in software. So the sink in auto mode cuts
// super-packets itself on such a NIC, offload mode refuses it, and a sink
// whose NIC stops segmenting under it gives up on whole super-packets.
func TestGSOWithoutTSO(t *testing.T) {
	l := newLab(t, false)
	p := l.open(t, Config{Queues: 1})
	s := p.Sockets()[0]
	sinkOn := func(mode GSOMode) (*Sink, error) { return l.newSink(t, s, netlab.NICB4, mode) }
	before, err := sinkOn(GSOModeAuto) // the NIC segments now
	netlab.Must(t, err)
	checkPlan := func(mode GSOMode, want string) {
		t.Helper()
		var plan string
		l.A.Do(t, func() { plan, err = p.GSOPlan(mode) })
		if err != nil || !strings.HasPrefix(plan, want) {
			t.Errorf("GSOPlan(%v) = %q, %v; want %s", mode, plan, err, want)
		}
	}
	checkPlan(GSOModeAuto, "offload (the NIC segments TCPv4, TCPv6, UDP)")
	checkPlan(GSOModePartial, "partial")
	checkPlan(GSOModeFull, "full")
	netlab.Must(t, l.A.SetFeatures(netlab.NICA, map[string]bool{"tso": false, "tx-udp-segmentation": false}))
	checkPlan(GSOModeAuto, "partial")
	checkPlan(GSOModeOffload, "partial")

	pkt, h := superPacket(false, uint8(header.TCPProtocolNumber), 20000, 1400, false)
	lay := layoutOf(t, pkt, h)
	after, err := sinkOn(GSOModeAuto)
	netlab.Must(t, err)
	if got := after.Offload(lay); got != frame.OffloadCsum {
		t.Errorf("auto without TSO: Offload = %v, want %v", got, frame.OffloadCsum)
	}
	if _, err := sinkOn(GSOModeOffload); err == nil || !errors.Is(err, ErrNoOffload) {
		t.Errorf("offload mode without TSO: %v, want ErrNoOffload", err)
	}

	// The sink made while the NIC segmented still offers it whole; the
	// kernel refuses it again and again, until the sink drops it and
	// stops offloading.
	if got := before.Offload(lay); got != frame.OffloadGSO {
		t.Fatalf("Offload = %v, want %v", got, frame.OffloadGSO)
	}
	dropped0 := l.A.LinkT(t, netlab.NICA).Attrs().Statistics.TxDropped
	f, ok := before.AllocLarge(len(pkt))
	if !ok {
		t.Fatal("no large frame")
	}
	f.Len, f.Header = copy(f.Buf[Headroom:], pkt), lay.GSOHeader()
	frames := []frame.Frame{f}
	deadline := time.Now().Add(labWait)
	for {
		n, err := before.Transmit(frames)
		netlab.Must(t, err)
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the super-packet was neither sent nor dropped")
		}
		before.Wait(time.Millisecond)
	}
	if n, _ := before.Complete(); n != 1 {
		t.Errorf("Complete = %d, want 1", n)
	}
	st := s.Stats()
	dropped := l.A.LinkT(t, netlab.NICA).Attrs().Statistics.TxDropped - dropped0
	t.Logf("kernel dropped %d copies (tx_dropped), sink: busy %d, refused %d", dropped, st.TXBusy, st.Drops.Refused)
	if !before.GSOOff() || st.Drops.Refused != 1 || st.TX != 0 || dropped < gsoRefusals {
		t.Errorf("GSOOff %v, refused %d, sent %d, tx_dropped +%d", before.GSOOff(), st.Drops.Refused, st.TX, dropped)
	}
	if got := before.Offload(lay); got != frame.OffloadCsum {
		t.Errorf("after the refusals: Offload = %v, want %v", got, frame.OffloadCsum)
	}
}

// TestUnresolved: frames whose next hop the kernel is resolving are
// taken at once and completed (their charges released) but kept; once
// the resolution has failed, the backlog is ready, and Transmit with no
// frames drops them, counted, and answers their senders.
func TestUnresolved(t *testing.T) {
	l := newLab(t, false)
	p := l.open(t, Config{Queues: 1})
	nobody := netip.MustParseAddr("198.18.100.77") // on gw-a's subnet, no host
	sink, err := l.newSink(t, p.Sockets()[0], nobody, GSOModeAuto)
	netlab.Must(t, err)
	var replies unreachables
	sink.SetReplier(&replies)
	pkt, _ := superPacket(false, uint8(header.UDPProtocolNumber), 100, 1400, false)
	frames := make([]frame.Frame, 2)
	if sink.Alloc(frames) != 2 {
		t.Fatal("Alloc")
	}
	for i := range frames {
		frames[i].Len = copy(frames[i].Buf[Headroom:], pkt)
	}
	start := time.Now()
	if n, err := sink.Transmit(frames); n != 2 || err != nil {
		t.Fatalf("Transmit: %d, %v; want the frames taken", n, err)
	}
	if n, _ := sink.Complete(); n != 2 || sink.Drops()[frame.DropUnresolved] != 0 {
		t.Errorf("while resolving: completed %d, unresolved %d; want 2, 0", n, sink.Drops()[frame.DropUnresolved])
	}
	for replies.n.Load() == 0 {
		select {
		case <-sink.Backlog():
		case <-time.After(10 * time.Second):
			t.Fatalf("no sender answered %v after the frames", time.Since(start))
		}
		if _, err := sink.Transmit(nil); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := sink.Complete(); n != 0 || sink.Drops()[frame.DropUnresolved] != 2 || replies.n.Load() != 2 || sink.Backlog() != nil {
		t.Errorf("after the failure: completed %d more, unresolved %d, replies %d, backlog %v; want 0, 2, 2, none", n, sink.Drops()[frame.DropUnresolved], replies.n.Load(), sink.Backlog())
	}
	if st := p.Sockets()[0].Stats(); st.TX != 0 || st.Drops.Unresolved != 2 {
		t.Errorf("stats %+v", st)
	}
	t.Logf("failed after %v", time.Since(start))
}

// unreachables is a frame.Replier that counts Unreachable calls.
type unreachables struct{ n atomic.Int64 }

func (u *unreachables) Unreachable([]byte)  { u.n.Add(1) }
func (u *unreachables) TooBig([]byte, int)  { panic("TooBig from a sink") }
func (u *unreachables) TimeExceeded([]byte) { panic("TimeExceeded from a sink") }
