package tun

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
	"github.com/gsoplane/gsoplane/segment"
)

func TestMain(m *testing.M) { os.Exit(netlab.Main(m)) }

// Test topology: the TUN holds 198.18.0.1/24 and 2001:2:0:1::1/64 and
// routes 198.19.0.0/16 and 2001:2:0:2::/64, where the peers are.
const (
	testTUN   = "gtun0"
	tunAddr4  = "198.18.0.1"
	tunAddr6  = "2001:2:0:1::1"
	peerAddr4 = "198.19.0.2"
	peerAddr6 = "2001:2:0:2::2"
	readWait  = 5 * time.Second
	bufSize   = segment.HeaderSizeMrg + 65535
)

// tunEnv is a TUN, up and addressed, alone in a throw-away netns.
type tunEnv struct {
	ns  *netlab.NS
	tun *Device
}

// newTUNEnv opens a TUN with cfg (Name defaults to testTUN) in a new netns,
// sets it up with the test addresses and routes, and closes it in cleanup.
func newTUNEnv(t *testing.T, cfg Config) *tunEnv {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = testTUN
	}
	ns := netlab.NewT(t, "tun")
	e := &tunEnv{ns: ns, tun: openTUNIn(t, ns, cfg)}
	for _, err := range []error{
		ns.LinkUp(cfg.Name),
		ns.AddAddr(cfg.Name, tunAddr4+"/24"),
		ns.AddAddr(cfg.Name, tunAddr6+"/64"),
		ns.AddRoute("198.19.0.0/16", cfg.Name, ""),
		ns.AddRoute("2001:2:0:2::/64", cfg.Name, ""),
	} {
		netlab.Must(t, err)
	}
	return e
}

// openTUNIn opens a TUN inside ns and closes it in t.Cleanup.
func openTUNIn(t *testing.T, ns *netlab.NS, cfg Config) *Device {
	t.Helper()
	var tun *Device
	var err error
	ns.Do(t, func() { tun, err = Open(cfg) })
	if err != nil {
		t.Fatalf("Open(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { tun.Close() })
	return tun
}

func parseSockaddr(addr string, port int) (unix.Sockaddr, int) {
	a := netip.MustParseAddr(addr)
	if a.Is4() {
		return &unix.SockaddrInet4{Addr: a.As4(), Port: port}, unix.AF_INET
	}
	return &unix.SockaddrInet6{Addr: a.As16(), Port: port}, unix.AF_INET6
}

// tunPacket is a packet read from a TUN, copied out of the read buffer.
type tunPacket struct {
	hdr segment.Header
	pkt []byte
}

// pktDst returns the IP destination and transport protocol of pkt.
func pktDst(pkt []byte) (netip.Addr, uint8) {
	switch {
	case len(pkt) >= header.IPv4MinimumSize && pkt[0]>>4 == 4:
		ip := header.IPv4(pkt)
		return netip.AddrFrom4(ip.DestinationAddress().As4()), ip.Protocol()
	case len(pkt) >= header.IPv6MinimumSize && pkt[0]>>4 == 6:
		ip := header.IPv6(pkt)
		return netip.AddrFrom16(ip.DestinationAddress().As16()), uint8(ip.NextHeader())
	}
	return netip.Addr{}, 0
}

// readTUNUntil reads batches from q, keeping the packets to dst with protocol
// proto (others, such as IPv6 router solicitations, are skipped), until
// done says so or readWait passes.
func readTUNUntil(t *testing.T, tun *Device, q *Queue, dst string, proto uint8, done func([]tunPacket) bool) []tunPacket {
	t.Helper()
	want := netip.MustParseAddr(dst)
	bufs, sizes := newReadBufs(8, bufSize)
	q.file.SetReadDeadline(time.Now().Add(readWait))
	defer q.file.SetReadDeadline(time.Time{})
	var got []tunPacket
	for !done(got) {
		n, err := q.Read(bufs, sizes, 0)
		if err != nil {
			t.Fatalf("Read after %d matching packets: %v", len(got), err)
		}
		for i := range n {
			b := bufs[i][:sizes[i]]
			h, err := segment.DecodeHeader(b, tun.HeaderSize())
			if err != nil {
				t.Fatalf("decode header: %v", err)
			}
			pkt := b[tun.HeaderSize():]
			if a, p := pktDst(pkt); a == want && p == proto {
				got = append(got, tunPacket{h, bytes.Clone(pkt)})
			}
		}
	}
	return got
}

func newReadBufs(n, size int) ([][]byte, []int) {
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	return bufs, make([]int, n)
}

// mustValidate checks a packet read from the TUN with segment.Validate.
func mustValidate(t *testing.T, p tunPacket) segment.Layout {
	t.Helper()
	l, err := segment.Validate(p.pkt, p.hdr)
	if err != nil {
		t.Fatalf("segment.Validate(%d bytes, %+v): %v", len(p.pkt), p.hdr, err)
	}
	return l
}

func kernelAtLeast(t *testing.T, major, minor int) bool {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var ma, mi int
	fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi)
	return ma > major || ma == major && mi >= minor
}

func TestOffloadsString(t *testing.T) {
	for o, want := range map[Offloads]string{
		0:                                "none",
		DefaultOffloads:                  "csum,tso4,tso6,tso_ecn,uso4,uso6,udp_tunnel,udp_tunnel_csum",
		OffloadCsum | OffloadUFO | 0x200: "csum,ufo,0x200",
	} {
		if got := o.String(); got != want {
			t.Errorf("Offloads(%#x).String() = %q, want %q", uint32(o), got, want)
		}
	}
}

func TestOpenTUNConfigErrors(t *testing.T) {
	// A missing clone device proves that the config is refused before any
	// system call: otherwise the error would be about the device.
	missing := "/nonexistent/net/tun"
	for _, cfg := range []Config{
		{Name: "sixteen-bytes-xx"},
		{Name: "a/b"}, {Name: "a:b"}, {Name: "a b"}, {Name: ".."},
		{Name: "ok", Queues: -1}, {Name: "ok", Queues: MaxQueues + 1},
		{Name: "ok", HeaderSize: 11},
		{Name: "ok", MTU: -1},
		{Name: "ok", SndBuf: -1},
	} {
		_, err := openTUN(cfg, missing)
		if !errors.Is(err, frame.ErrInvalidConfig) {
			t.Errorf("openTUN(%+v) = %v, want frame.ErrInvalidConfig", cfg, err)
			continue
		}
		t.Logf("%+v: %v", cfg, err)
	}
}

func TestOpenTUNMissingDevice(t *testing.T) {
	_, err := openTUN(Config{Name: "gtun-missing"}, "/nonexistent/net/tun")
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("err = %v, want one saying the device is missing", err)
	}
	t.Log(err)
}

// withoutCapNetAdmin runs fn with CAP_NET_ADMIN dropped from the effective
// set of the calling thread only. The caller must be locked to its thread.
func withoutCapNetAdmin(t *testing.T, fn func()) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var caps [2]unix.CapUserData // version 3 has two words
	if err := unix.Capget(&hdr, &caps[0]); err != nil {
		t.Fatalf("capget: %v", err)
	}
	saved := caps
	caps[unix.CAP_NET_ADMIN/32].Effective &^= 1 << (unix.CAP_NET_ADMIN % 32)
	if err := unix.Capset(&hdr, &caps[0]); err != nil {
		t.Fatalf("capset: %v", err)
	}
	defer func() {
		if err := unix.Capset(&hdr, &saved[0]); err != nil {
			t.Errorf("restore capabilities: %v", err)
		}
	}()
	fn()
}

func TestOpenTUNNotPermitted(t *testing.T) {
	t.Parallel()
	ns := netlab.NewT(t, "tun")
	var err error
	ns.Do(t, func() {
		withoutCapNetAdmin(t, func() {
			var tun *Device
			if tun, err = Open(Config{Name: testTUN}); err == nil {
				tun.Close()
			}
		})
	})
	want := "tun: create " + testTUN + ": needs CAP_NET_ADMIN: operation not permitted"
	if err == nil || err.Error() != want || !errors.Is(err, os.ErrPermission) {
		t.Fatalf("err = %v, want %q matching os.ErrPermission", err, want)
	}
	t.Log(err)
}

func TestOpenTUN(t *testing.T) {
	t.Parallel()
	ns := netlab.NewT(t, "tun")
	for i, tc := range []struct {
		cfg  Config
		want Offloads // at least
	}{
		{Config{Offload: true}, OffloadCsum | OffloadTSO4 | OffloadTSO6},
		{Config{Offload: true, HeaderSize: segment.HeaderSizeMrg, MTU: 9000}, OffloadCsum | OffloadTSO4 | OffloadTSO6},
		{Config{Offload: false, SndBuf: 1 << 20}, 0},
		{Config{Offload: true, Name: "-"}, OffloadCsum}, // kernel-chosen name
		{Config{Offload: false, HeaderSize: segment.HeaderSizeTunnel}, 0},
		{Config{Offload: true, HeaderSize: segment.HeaderSizeTunnel}, OffloadCsum | OffloadTSO4 | OffloadTSO6},
	} {
		cfg := tc.cfg
		switch cfg.Name {
		case "":
			cfg.Name = fmt.Sprintf("gtun%d", i)
		case "-":
			cfg.Name = ""
		}
		tun := openTUNIn(t, ns, cfg)
		t.Logf("%+v: name %s index %d offloads %v header %d", cfg, tun.Name(), tun.Index(), tun.Offloads(), tun.HeaderSize())
		if !tun.Offloads().Has(tc.want) || !cfg.Offload && tun.Offloads() != 0 {
			t.Errorf("%+v: offloads %v, want at least %v", cfg, tun.Offloads(), tc.want)
		}
		if cfg.Offload && kernelAtLeast(t, 6, 2) && !tun.Offloads().Has(OffloadUSO4|OffloadUSO6) {
			t.Errorf("%+v: offloads %v: no USO on Linux >= 6.2", cfg, tun.Offloads())
		}
		// The tunnel offloads with their header, where the kernel has them.
		tunnel := cfg.Offload && cfg.HeaderSize == segment.HeaderSizeTunnel && netlab.Lacks(t, netlab.VirtioNetTunnel) == nil
		want := max(cfg.HeaderSize, segment.HeaderSize)
		if tun.HeaderSize() != want || tun.Offloads().Has(OffloadUDPTunnel|OffloadUDPTunnelCsum) != tunnel {
			t.Errorf("HeaderSize() = %d, offloads %v; want %d, tunnel offloads %v", tun.HeaderSize(), tun.Offloads(), want, tunnel)
		}
		if cfg.Name != "" && tun.Name() != cfg.Name {
			t.Errorf("Name() = %q, want %q", tun.Name(), cfg.Name)
		}
		l := ns.LinkT(t, tun.Name())
		tt, ok := l.(*netlink.Tuntap)
		if !ok || tt.Attrs().Index != tun.Index() || tt.Flags&netlink.TUNTAP_VNET_HDR == 0 || tt.Flags&netlink.TUNTAP_NO_PI == 0 || !tt.NonPersist {
			t.Errorf("link %s = %T %+v, want non-persistent tun with vnet_hdr and no_pi at index %d", tun.Name(), l, l, tun.Index())
		}
		if cfg.MTU != 0 && l.Attrs().MTU != cfg.MTU {
			t.Errorf("MTU = %d, want %d", l.Attrs().MTU, cfg.MTU)
		}
		sndbuf, hdrsz := tunGetInt(t, tun, unix.TUNGETSNDBUF), tunGetInt(t, tun, unix.TUNGETVNETHDRSZ)
		if want := cmp.Or(cfg.SndBuf, DefaultSndBuf); sndbuf != want || hdrsz != tun.HeaderSize() {
			t.Errorf("kernel: sndbuf %d, vnet header size %d; want %d, %d", sndbuf, hdrsz, want, tun.HeaderSize())
		}
		if len(tun.Queues()) != 1 {
			t.Errorf("%d queues, want 1", len(tun.Queues()))
		}
	}
}

func TestOpenTUNMultiQueue(t *testing.T) {
	t.Parallel()
	ns := netlab.NewT(t, "tun")
	tun := openTUNIn(t, ns, Config{Name: testTUN, Queues: 2, Offload: true})
	qs := tun.Queues()
	if len(qs) != 2 || queueFD(t, qs[0]) == queueFD(t, qs[1]) {
		t.Fatalf("queues %v, want 2 distinct fds", qs)
	}
	tt := ns.LinkT(t, testTUN).(*netlink.Tuntap)
	if tt.Flags&netlink.TUNTAP_MULTI_QUEUE == 0 || tt.Queues != 2 {
		t.Errorf("link flags %v queues %d, want multi_queue and 2 queues", tt.Flags, tt.Queues)
	}
}

// TestOpenTUNInUse: a device another file has a queue of is refused
// (ErrInUse), multi-queue or not: attaching would take part of its flows
// or be refused EBUSY. A persistent device nobody has open is attached,
// and stays when closed.
func TestOpenTUNInUse(t *testing.T) {
	t.Parallel()
	ns := netlab.NewT(t, "tun")
	dev := &netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: testTUN}, Mode: netlink.TUNTAP_MODE_TUN,
		Flags: netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR | netlink.TUNTAP_MULTI_QUEUE_DEFAULTS}
	netlab.Must(t, ns.Run(func() error { return netlink.LinkAdd(dev) }))
	netlab.Must(t, ns.LinkUp(testTUN))
	for _, queues := range []int{2, 1} {
		first := openTUNIn(t, ns, Config{Name: testTUN, Queues: 2, Offload: true})
		var err error
		ns.Do(t, func() { _, err = Open(Config{Name: testTUN, Queues: queues, Offload: true}) })
		if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "another program has 2 queues of it open") {
			t.Errorf("%d queues on a device in use: %v, want ErrInUse", queues, err)
		}
		first.Close()
		if tt := ns.LinkT(t, testTUN).(*netlink.Tuntap); tt.Queues != 0 {
			t.Errorf("after Close: %d queues attached, want the persistent device left without", tt.Queues)
		}
	}
	// The queue mode must match.
	var err error
	ns.Do(t, func() { _, err = Open(Config{Name: testTUN}) })
	if !errors.Is(err, unix.EINVAL) || !strings.Contains(err.Error(), "attach") {
		t.Errorf("attach single-queue to multi-queue: %v, want attach ... EINVAL", err)
	}
}

func TestOpenTUNBusy(t *testing.T) {
	t.Parallel()
	ns := netlab.NewT(t, "tun")
	openTUNIn(t, ns, Config{Name: testTUN})
	var err error
	ns.Do(t, func() { _, err = Open(Config{Name: testTUN}) })
	if !errors.Is(err, ErrInUse) || !errors.Is(err, unix.EBUSY) {
		t.Errorf("second single-queue attach: %v, want ErrInUse (EBUSY)", err)
	}
	t.Log(err)
}

func TestTUNReadTCPSyn(t *testing.T) {
	t.Parallel()
	for _, offload := range []bool{true, false} {
		e := newTUNEnv(t, Config{Offload: offload})
		for _, peer := range []string{peerAddr4, peerAddr6} {
			sa, family := parseSockaddr(peer, 5201)
			fd := e.ns.SocketT(t, family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK)
			if err := unix.Connect(fd, sa); err != unix.EINPROGRESS {
				t.Fatalf("connect %s: %v, want EINPROGRESS", peer, err)
			}
			got := readTUNUntil(t, e.tun, e.tun.Queues()[0], peer, unix.IPPROTO_TCP, func(p []tunPacket) bool { return len(p) > 0 })
			l := mustValidate(t, got[0])
			tcp := header.TCP(got[0].pkt[l.L3Len():])
			t.Logf("offload=%v %s: %d bytes, %+v, flags %v", offload, peer, len(got[0].pkt), got[0].hdr, tcp.Flags())
			if tcp.Flags() != header.TCPFlagSyn || got[0].hdr.GSOType != segment.GSONone {
				t.Errorf("got flags %v gso %v, want a SYN without GSO", tcp.Flags(), got[0].hdr.GSOType)
			}
			if got[0].hdr.NeedsCsum() != offload {
				t.Errorf("offload=%v: NEEDS_CSUM=%v", offload, got[0].hdr.NeedsCsum())
			}
		}
	}
}

func TestTUNReadUDPSegment(t *testing.T) {
	t.Parallel()
	const gsoSize, segs = 1000, 8
	payload := bytes.Repeat([]byte("0123456789"), gsoSize*segs/10)
	for _, offload := range []bool{true, false} {
		t.Run(fmt.Sprintf("offload=%v", offload), func(t *testing.T) {
			if offload {
				// Without USO the TUN takes the kernel's segments.
				netlab.SkipWithout(t, netlab.VirtioNetUSO)
			}
			readUDPSegment(t, offload, payload, gsoSize, segs)
		})
	}
}

// readUDPSegment sends payload in one UDP_SEGMENT sendmsg through a TUN
// with or without offloads, and checks what the TUN reads.
func readUDPSegment(t *testing.T, offload bool, payload []byte, gsoSize, segs int) {
	e := newTUNEnv(t, Config{Offload: offload})
	for _, peer := range []string{peerAddr4, peerAddr6} {
		sa, family := parseSockaddr(peer, 4000)
		fd := e.ns.SocketT(t, family, unix.SOCK_DGRAM)
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT, gsoSize); err != nil {
			t.Fatalf("UDP_SEGMENT: %v", err)
		}
		err := unix.Sendto(fd, payload, 0, sa)
		if errors.Is(err, unix.EIO) && !offload {
			// udp_send_skb refuses a GSO send (EIO) unless the
			// device checksums; this is the only EIO of the path.
			t.Skipf("send %d bytes with UDP_SEGMENT to %s: %v: UDP_SEGMENT through a device without checksum offload needs Linux 6.11", len(payload), peer, err)
		}
		if err != nil {
			t.Fatalf("send %d bytes to %s: %v", len(payload), peer, err)
		}
		total := 0
		got := readTUNUntil(t, e.tun, e.tun.Queues()[0], peer, unix.IPPROTO_UDP, func(p []tunPacket) bool {
			total = 0
			for _, q := range p {
				total += udpPayloadLen(q.pkt)
			}
			return total >= len(payload)
		})
		for _, p := range got {
			l := mustValidate(t, p)
			t.Logf("offload=%v %s: %d bytes, %+v, %d segments of %d", offload, peer, len(p.pkt), p.hdr, l.Segments(), l.MSS())
		}
		h := got[0].hdr
		switch {
		case total != len(payload):
			t.Errorf("read %d payload bytes, want %d", total, len(payload))
		case offload && (len(got) != 1 || h.GSOType != segment.GSOUDPL4 || int(h.GSOSize) != gsoSize):
			t.Errorf("offload: %d packets, first %+v, want one UDP_L4 super-packet with gso_size %d", len(got), h, gsoSize)
		case !offload && (len(got) != segs || h.GSOType != segment.GSONone):
			t.Errorf("no offload: %d packets, first %+v, want %d plain packets", len(got), h, segs)
		}
	}
}

// udpPayloadLen returns the payload length in the UDP header of pkt.
func udpPayloadLen(pkt []byte) int {
	l := header.IPv4MinimumSize
	if pkt[0]>>4 == 6 {
		l = header.IPv6MinimumSize
	}
	return int(header.UDP(pkt[l:]).Length()) - header.UDPMinimumSize
}

func TestTUNReadTruncated(t *testing.T) {
	t.Parallel()
	e := newTUNEnv(t, Config{Offload: true})
	sa, family := parseSockaddr(peerAddr4, 4000)
	fd := e.ns.SocketT(t, family, unix.SOCK_DGRAM)
	for _, size := range []int{1000, 10} {
		if err := unix.Sendto(fd, make([]byte, size), 0, sa); err != nil {
			t.Fatal(err)
		}
	}
	q := e.tun.Queues()[0]
	q.file.SetReadDeadline(time.Now().Add(readWait))
	bufs, sizes := newReadBufs(2, 200)
	for {
		n, err := q.Read(bufs, sizes, 0)
		if errors.Is(err, frame.ErrPacketTruncated) {
			t.Logf("%d packets, then %v", n, err)
			break
		}
		if err != nil {
			t.Fatalf("Read: %v, want frame.ErrPacketTruncated", err)
		}
	}
	// The next packet, the small one, reads fine.
	got := readTUNUntil(t, e.tun, q, peerAddr4, unix.IPPROTO_UDP, func(p []tunPacket) bool { return len(p) > 0 })
	mustValidate(t, got[0])
	if n := udpPayloadLen(got[0].pkt); n != 10 {
		t.Errorf("next packet has %d payload bytes, want 10", n)
	}
}

// buildUDP builds a virtio-net header of size hdrSize and an IP/UDP
// packet. With gsoSize > 0 it is a USO super-packet with a partial
// checksum; otherwise the checksum is complete and the header flags are 0.
func buildUDP(hdrSize int, src, dst netip.AddrPort, payload []byte, gsoSize int) []byte {
	ipLen := header.IPv4MinimumSize
	if src.Addr().Is6() {
		ipLen = header.IPv6MinimumSize
	}
	udpLen := header.UDPMinimumSize + len(payload)
	b := make([]byte, hdrSize+ipLen+udpLen)
	pkt := b[hdrSize:]
	s, d := tcpip.AddrFromSlice(src.Addr().AsSlice()), tcpip.AddrFromSlice(dst.Addr().AsSlice())
	if src.Addr().Is4() {
		ip := header.IPv4(pkt)
		ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(pkt)), TTL: 64, Protocol: uint8(header.UDPProtocolNumber), SrcAddr: s, DstAddr: d})
		ip.SetChecksum(^ip.CalculateChecksum())
	} else {
		header.IPv6(pkt).Encode(&header.IPv6Fields{PayloadLength: uint16(udpLen), TransportProtocol: header.UDPProtocolNumber, HopLimit: 64, SrcAddr: s, DstAddr: d})
	}
	udp := header.UDP(pkt[ipLen:])
	udp.Encode(&header.UDPFields{SrcPort: src.Port(), DstPort: dst.Port(), Length: uint16(udpLen)})
	copy(udp.Payload(), payload)
	xsum := header.PseudoHeaderChecksum(header.UDPProtocolNumber, s, d, uint16(udpLen))
	var h segment.Header
	if gsoSize > 0 {
		udp.SetChecksum(xsum) // partial: the kernel completes it per segment
		h = segment.Header{Flags: segment.FlagNeedsCsum, GSOType: segment.GSOUDPL4, GSOSize: uint16(gsoSize),
			HdrLen: uint16(ipLen + header.UDPMinimumSize), CsumStart: uint16(ipLen), CsumOffset: 6}
	} else {
		c := ^udp.CalculateChecksum(checksum.Checksum(payload, xsum))
		if c == 0 {
			c = 0xffff
		}
		udp.SetChecksum(c)
	}
	h.Encode(b, hdrSize)
	return b
}

func TestTUNWrite(t *testing.T) {
	t.Parallel()
	netlab.SkipWithout(t, netlab.VirtioNetUSO) // the USO super-packets
	e := newTUNEnv(t, Config{Offload: true, HeaderSize: segment.HeaderSizeMrg})
	hs := e.tun.HeaderSize()
	q := e.tun.Queues()[0]
	for _, tc := range []struct{ local, peer string }{{tunAddr4, peerAddr4}, {tunAddr6, peerAddr6}} {
		var conn *net.UDPConn
		var err error
		e.ns.Do(t, func() {
			conn, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(net.JoinHostPort(tc.local, "0"))))
		})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		dst := conn.LocalAddr().(*net.UDPAddr).AddrPort()
		src := netip.AddrPortFrom(netip.MustParseAddr(tc.peer), 4242)

		// One plain packet, then a bad header (refused), then a USO
		// super-packet of 8 x 1000 bytes.
		plain := buildUDP(hs, src, dst, []byte("hello gsoplane"), 0)
		bad := bytes.Clone(plain)
		bad[1] = 7 // unknown gso_type
		big := bytes.Repeat([]byte("x"), 8000)
		n, err := q.Write([][]byte{plain, bad, plain}, 0)
		t.Logf("%s: write plain, bad, plain: n=%d err=%v", tc.local, n, err)
		if n != 1 || !errors.Is(err, unix.EINVAL) {
			t.Errorf("Write(plain, bad, plain) = %d, %v; want 1, EINVAL", n, err)
		}
		if n, err := q.Write([][]byte{buildUDP(hs, src, dst, big, 1000)}, 0); n != 1 || err != nil {
			t.Fatalf("Write(USO super-packet) = %d, %v", n, err)
		}
		// The same super-packet in pieces (header, headers and first
		// datagram, the rest of the payload), as a Coalescer hands it over.
		uso := buildUDP(hs, src, dst, big, 1000)
		cut := len(uso) - 7000
		if n, err := q.WriteVectors([][][]byte{{uso[:hs], uso[hs:cut], uso[cut:]}, {plain}}); n != 2 || err != nil {
			t.Fatalf("WriteVectors(USO super-packet in 3 pieces, plain) = %d, %v", n, err)
		}
		conn.SetReadDeadline(time.Now().Add(readWait))
		buf := make([]byte, 65536)
		m, from, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil || string(buf[:m]) != "hello gsoplane" || from != src {
			t.Fatalf("receive: %q from %v, %v; want %q from %v", buf[:m], from, err, "hello gsoplane", src)
		}
		for i := range 16 {
			m, _, err := conn.ReadFromUDPAddrPort(buf)
			if err != nil || m != 1000 {
				t.Fatalf("USO segment %d: %d bytes, %v; want 1000", i, m, err)
			}
		}
		if m, _, err := conn.ReadFromUDPAddrPort(buf); err != nil || string(buf[:m]) != "hello gsoplane" {
			t.Fatalf("plain packet after the vectors: %q, %v", buf[:m], err)
		}
	}
}

func TestTUNClose(t *testing.T) {
	t.Parallel()
	e := newTUNEnv(t, Config{Offload: true, Queues: 2})
	q := e.tun.Queues()[1]
	done := make(chan error, 1)
	go func() {
		bufs, sizes := newReadBufs(1, bufSize)
		for {
			if _, err := q.Read(bufs, sizes, 0); err != nil {
				done <- err
				return
			}
		}
	}()
	time.Sleep(50 * time.Millisecond) // let Read block
	if err := e.tun.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrClosed) {
			t.Errorf("blocked Read after Close: %v, want os.ErrClosed", err)
		}
		t.Logf("blocked Read: %v", err)
	case <-time.After(readWait):
		t.Fatal("Read still blocked after Close")
	}
	if _, err := e.ns.Link(testTUN); err == nil {
		t.Errorf("device %s still there after Close", testTUN)
	}
	bufs, sizes := newReadBufs(1, bufSize)
	if _, err := q.Read(bufs, sizes, 0); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Read after Close: %v, want os.ErrClosed", err)
	}
	if _, err := q.Write(bufs, 0); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Write after Close: %v, want os.ErrClosed", err)
	}
	if err := e.tun.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// newLoopEnv is a TUN, IPv4 only, in a new netns that forwards packets
// for 198.19.0.0/16 arriving on the TUN back out of it: a packet written
// to 198.19.0.3 comes back to be read.
func newLoopEnv(t *testing.T, cfg Config) *tunEnv {
	t.Helper()
	ns := netlab.NewT(t, "tun")
	for key, v := range map[string]string{
		"net/ipv4/ip_forward":                  "1",
		"net/ipv4/conf/all/send_redirects":     "0",
		"net/ipv4/conf/default/send_redirects": "0",
		"net/ipv6/conf/default/disable_ipv6":   "1", // no router solicitations
	} {
		netlab.Must(t, ns.Sysctl(key, v))
	}
	cfg.Name = testTUN
	e := &tunEnv{ns: ns, tun: openTUNIn(t, ns, cfg)}
	netlab.Must(t, ns.LinkUp(testTUN))
	netlab.Must(t, ns.AddAddr(testTUN, tunAddr4+"/24"))
	netlab.Must(t, ns.AddRoute("198.19.0.0/16", testTUN, ""))
	return e
}

// loopPacket is a UDP packet that a loop env sends back out of its TUN.
func loopPacket(tun *Device, payload int) []byte {
	src := netip.MustParseAddrPort(peerAddr4 + ":4242")
	dst := netip.MustParseAddrPort("198.19.0.3:4243")
	return buildUDP(tun.HeaderSize(), src, dst, make([]byte, payload), 0)
}

// TestTUNAllocs writes a packet that the kernel forwards back out of the
// TUN and reads it: Read and Write must not allocate.
func TestTUNAllocs(t *testing.T) { // not parallel: AllocsPerRun refuses
	e := newLoopEnv(t, Config{Offload: true})
	q := e.tun.Queues()[0]
	wbufs := [][]byte{loopPacket(e.tun, 100)}
	hs := e.tun.HeaderSize()
	vecs := [][][]byte{{wbufs[0][:hs], wbufs[0][hs:]}}
	rbufs, sizes := newReadBufs(4, bufSize)
	q.file.SetReadDeadline(time.Now().Add(readWait))
	var err error
	allocs := testing.AllocsPerRun(200, func() {
		if _, err1 := q.Write(wbufs, 0); err1 != nil && err == nil {
			err = err1
		}
		if _, err1 := q.WriteVectors(vecs); err1 != nil && err == nil {
			err = err1
		}
		if _, err1 := q.Read(rbufs, sizes, 0); err1 != nil && err == nil {
			err = err1
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if allocs != 0 {
		t.Errorf("Write+WriteVectors+Read: %v allocations per run, want 0", allocs)
	}
}

// queueFD returns q's file descriptor (File.Fd would make it blocking).
func queueFD(t *testing.T, q *Queue) uintptr {
	var fd uintptr
	if err := q.rc.Control(func(f uintptr) { fd = f }); err != nil {
		t.Fatal(err)
	}
	return fd
}

// tunGetInt reads a TUNGET* ioctl that returns an int.
func tunGetInt(t *testing.T, tun *Device, req uint) int {
	var v int
	var err error
	if cerr := tun.Queues()[0].rc.Control(func(fd uintptr) { v, err = unix.IoctlGetInt(int(fd), req) }); cerr != nil {
		t.Fatal(cerr)
	}
	if err != nil {
		t.Fatalf("ioctl %#x: %v", req, err)
	}
	return v
}
