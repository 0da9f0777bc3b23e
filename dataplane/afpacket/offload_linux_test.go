package afpacket

import (
	"errors"
	"net/netip"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/segment"
)

var (
	testSrc4 = netip.MustParseAddr("198.18.0.1")
	testDst4 = netip.MustParseAddr("198.19.0.2")
	testSrc6 = netip.MustParseAddr("2001:2:0:1::1")
	testDst6 = netip.MustParseAddr("2001:2:0:19::2")
)

// superPacket builds an IP packet of the given protocol (TCP or UDP) with
// payload bytes, as a TUN device hands it over: with a partial checksum
// (the pseudo-header sum in the checksum field) and, when payload > mss, a
// GSO header (TSO, or USO for UDP). It returns the packet and its header
// (csum_start counted from the IP header).
func superPacket(v6 bool, proto uint8, payload, mss int, ecn bool) ([]byte, segment.Header) {
	l3 := header.IPv4MinimumSize
	if v6 {
		l3 = header.IPv6MinimumSize
	}
	l4 := header.TCPMinimumSize
	if proto == uint8(header.UDPProtocolNumber) {
		l4 = header.UDPMinimumSize
	}
	pkt := make([]byte, l3+l4+payload)
	for i := range payload {
		pkt[l3+l4+i] = byte(i * 7)
	}
	var src, dst tcpip.Address
	if v6 {
		src, dst = tcpip.AddrFrom16(testSrc6.As16()), tcpip.AddrFrom16(testDst6.As16())
		header.IPv6(pkt).Encode(&header.IPv6Fields{PayloadLength: uint16(l4 + payload), TransportProtocol: tcpip.TransportProtocolNumber(proto),
			HopLimit: 64, SrcAddr: src, DstAddr: dst})
	} else {
		src, dst = tcpip.AddrFrom4(testSrc4.As4()), tcpip.AddrFrom4(testDst4.As4())
		ip := header.IPv4(pkt)
		ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(pkt)), TTL: 64, Protocol: proto, ID: 1, Flags: header.IPv4FlagDontFragment,
			SrcAddr: src, DstAddr: dst})
		ip.SetChecksum(^ip.CalculateChecksum())
	}
	h := segment.Header{Flags: segment.FlagNeedsCsum, CsumStart: uint16(l3), HdrLen: uint16(l3 + l4)}
	pseudo := header.PseudoHeaderChecksum(tcpip.TransportProtocolNumber(proto), src, dst, uint16(l4+payload))
	if proto == uint8(header.TCPProtocolNumber) {
		flags := header.TCPFlagAck | header.TCPFlagPsh
		if ecn {
			flags |= header.TCPFlagCwr
		}
		tcp := header.TCP(pkt[l3:])
		tcp.Encode(&header.TCPFields{SrcPort: 40000, DstPort: 5201, SeqNum: 1000, AckNum: 1, DataOffset: uint8(l4), Flags: flags, WindowSize: 512})
		tcp.SetChecksum(pseudo)
		h.CsumOffset = 16
		h.GSOType = segment.GSOTCPv4
		if v6 {
			h.GSOType = segment.GSOTCPv6
		}
		if ecn {
			h.GSOType |= segment.GSOECN
		}
	} else {
		udp := header.UDP(pkt[l3:])
		udp.Encode(&header.UDPFields{SrcPort: 40000, DstPort: 5201, Length: uint16(l4 + payload)})
		udp.SetChecksum(pseudo)
		h.CsumOffset = 6
		h.GSOType = segment.GSOUDPL4
	}
	if payload > mss {
		h.GSOSize = uint16(mss)
	} else {
		h.GSOType = segment.GSONone
	}
	return pkt, h
}

func layoutOf(t *testing.T, pkt []byte, h segment.Header) segment.Layout {
	t.Helper()
	l, err := segment.Validate(pkt, h)
	if err != nil {
		t.Fatalf("Validate: %v", err)
	}
	return l
}

// TestOffload checks Sink.Offload's choice per mode, per NIC and per
// packet.
func TestOffload(t *testing.T) {
	const tcp, udp = uint8(header.TCPProtocolNumber), uint8(header.UDPProtocolNumber)
	all := nic{tso4: true, tso6: true, tsoECN: true, uso: true, csum4: true, csum6: true, gsoMaxSize: 65536, gso4MaxSize: 65536, gsoMaxSegs: 65535}
	tso4Only := nic{tso4: true, csum4: true, gsoMaxSize: 65536, gso4MaxSize: 65536, gsoMaxSegs: 65535}
	noECN := all
	noECN.tsoECN = false
	csumOnly := nic{csum4: true, csum6: true, gsoMaxSize: 65536, gso4MaxSize: 65536, gsoMaxSegs: 65535}
	fewSegs := all
	fewSegs.gsoMaxSegs = 4
	small := all
	small.gso4MaxSize = 16384
	none := nic{gsoMaxSize: 65536, gso4MaxSize: 65536, gsoMaxSegs: 65535}
	const G, C, N = frame.OffloadGSO, frame.OffloadCsum, frame.OffloadNone
	for _, c := range []struct {
		name    string
		nic     nic
		v6      bool
		proto   uint8
		payload int
		ecn     bool
		want    [4]frame.Offload // auto, offload, partial, full
	}{
		{"tso4", all, false, tcp, 20000, false, [4]frame.Offload{G, G, C, N}},
		{"tso6", all, true, tcp, 20000, false, [4]frame.Offload{G, G, C, N}},
		{"uso4", all, false, udp, 20000, false, [4]frame.Offload{G, G, C, N}},
		{"uso6", all, true, udp, 20000, false, [4]frame.Offload{G, G, C, N}},
		{"tso4 ecn", all, false, tcp, 20000, true, [4]frame.Offload{G, G, C, N}},
		{"tso4 ecn, nic without ecn", noECN, false, tcp, 20000, true, [4]frame.Offload{C, C, C, N}},
		{"tso6 on a tso4-only nic", tso4Only, true, tcp, 20000, false, [4]frame.Offload{N, N, N, N}},
		{"uso4 on a tso4-only nic", tso4Only, false, udp, 20000, false, [4]frame.Offload{C, C, C, N}},
		{"tso4 on a checksum-only nic", csumOnly, false, tcp, 20000, false, [4]frame.Offload{C, C, C, N}},
		{"tso4 over gso_max_segs", fewSegs, false, tcp, 20000, false, [4]frame.Offload{C, C, C, N}},
		{"tso4 under gso_max_segs", fewSegs, false, tcp, 3000, false, [4]frame.Offload{G, G, C, N}},
		{"tso4 over gso_ipv4_max_size", small, false, tcp, 20000, false, [4]frame.Offload{C, C, C, N}},
		{"tso6 and gso_ipv4_max_size", small, true, tcp, 20000, false, [4]frame.Offload{G, G, C, N}},
		{"one segment", all, false, tcp, 1000, false, [4]frame.Offload{C, C, C, N}},
		{"tso4 on a bare nic", none, false, tcp, 20000, false, [4]frame.Offload{N, N, N, N}},
	} {
		pkt, h := superPacket(c.v6, c.proto, c.payload, 1400, c.ecn)
		l := layoutOf(t, pkt, h)
		for m := GSOModeAuto; m <= GSOModeFull; m++ {
			s := &Sink{mode: m, nic: c.nic, nLarge: 1}
			if got := s.Offload(l); got != c.want[m] {
				t.Errorf("%s, %v: Offload = %v, want %v", c.name, m, got, c.want[m])
			}
		}
	}
	// Without large frames, nothing goes whole; after the kernel kept
	// refusing super-packets, neither.
	pkt, h := superPacket(false, tcp, 20000, 1400, false)
	l := layoutOf(t, pkt, h)
	if got := (&Sink{nic: all}).Offload(l); got != C {
		t.Errorf("no large frames: Offload = %v, want %v", got, C)
	}
	s := &Sink{nic: all, nLarge: 1}
	s.gsoOff.Store(true)
	if got := s.Offload(l); got != C {
		t.Errorf("GSO off: Offload = %v, want %v", got, C)
	}
}

func TestGSOModeString(t *testing.T) {
	for m, want := range map[GSOMode]string{GSOModeAuto: "auto", GSOModeOffload: "offload", GSOModePartial: "partial", GSOModeFull: "full", 9: "GSOMode(9)"} {
		if got := m.String(); got != want {
			t.Errorf("%d: %q, want %q", int(m), got, want)
		}
	}
}

// TestConfigErrors: bad configurations are refused before any system
// call, wrapping frame.ErrInvalidConfig.
func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Ifname: "this-name-is-too-long"},
		{Ifname: "x", Queues: -1},
		{Ifname: "x", Queues: MaxQueues + 1},
		{Ifname: "x", Frames: -1},
		{Ifname: "x", Frames: MaxFrames + 1},
		{Ifname: "x", LargeFrames: -2},
		{Ifname: "x", FrameSize: 100},
		{Ifname: "x", FrameSize: LargeFrameSize + 1},
		{Ifname: "x", SndBuf: -1},
		{Ifname: "x", RcvBuf: 2 << 30},
		{Ifname: "x", Redirect: []netip.Prefix{{}}},
	} {
		_, err := Open(cfg)
		if !errors.Is(err, frame.ErrInvalidConfig) {
			t.Errorf("Open(%+v): %v, want ErrInvalidConfig", cfg, err)
		}
	}
	cfg, err := Config{Ifname: "x", LargeFrames: -1, Redirect: []netip.Prefix{netip.MustParsePrefix("::ffff:198.18.0.7/120")}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if want := netip.MustParsePrefix("198.18.0.0/24"); len(cfg.Redirect) != 1 || cfg.Redirect[0] != want {
		t.Errorf("redirect %v, want [%v]", cfg.Redirect, want)
	}
	if cfg.LargeFrames != 0 || cfg.Frames != DefaultFrames || cfg.RcvBuf != DefaultRcvBuf {
		t.Errorf("defaults: %+v", cfg)
	}
	if got := frameSizeFor(1500); got != MinFrameSize {
		t.Errorf("frame size for MTU 1500: %d", got)
	}
	if got := frameSizeFor(9000); got != 9024 {
		t.Errorf("frame size for MTU 9000: %d", got)
	}
}

func testAddrPort(a netip.Addr, port uint16) netip.AddrPort { return netip.AddrPortFrom(a, port) }
