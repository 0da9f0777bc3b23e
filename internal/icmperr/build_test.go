package icmperr

import (
	"bytes"
	"net/netip"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/internal/testing/dirtybuf"
)

const (
	df = header.IPv4FlagDontFragment
	mf = header.IPv4FlagMoreFragments
)

// TestAnswers decodes the errors Build writes and checks every field.
func TestAnswers(t *testing.T) {
	udp4 := pkt4{src: host4a, dst: host4b, tos: 0xb9, proto: header.UDPProtocolNumber, payload: udp(100)}
	big4 := pkt4{src: host4a, dst: host4b, flags: df, proto: header.TCPProtocolNumber, payload: make([]byte, 1480)}
	opts4 := pkt4{src: host4a, dst: host4b, flags: df, proto: header.UDPProtocolNumber,
		options: header.IPv4OptionsSerializer{&header.IPv4SerializableRouterAlertOption{}}, payload: []byte{1, 2, 3, 4}}
	udp6 := pkt6{src: host6a, dst: host6b, proto: header.UDPProtocolNumber, payload: udp(100)}
	big6 := pkt6{src: host6a, dst: host6b, proto: header.TCPProtocolNumber, payload: make([]byte, 1460)}
	for _, tc := range []struct {
		name      string
		orig      []byte
		kind      Kind
		mtu, room int // room: the buffer's size (0: MaxLen)
		typ, code uint8
		info      uint32
		quote     int
	}{
		{"v4 udp unreachable", udp4.bytes(), Unreachable, 0, 0, 3, 1, 0, 128},
		{"v4 unreachable ignores mtu", udp4.bytes(), Unreachable, 1400, 0, 3, 1, 0, 128},
		{"v4 quotes 548 bytes of a big packet", big4.bytes(), Unreachable, 0, 0, 3, 1, 0, 548},
		{"v4 fragmentation needed", big4.bytes(), TooBig, 1400, 0, 3, 4, 1400, 548},
		{"v4 fragmentation needed at 68", big4.bytes(), TooBig, 68, 0, 3, 4, 68, 548},
		{"v4 short buffer quotes less", big4.bytes(), Unreachable, 0, 28 + 40, 3, 1, 0, 40},
		{"v4 short buffer still header and 8 bytes", big4.bytes(), Unreachable, 0, 28 + 28, 3, 1, 0, 28},
		{"v4 options quoted, short packet whole", opts4.bytes(), TooBig, 1280, 0, 3, 4, 1280, 28},
		{"v4 echo request answered", pkt4{src: host4a, dst: host4b, proto: header.ICMPv4ProtocolNumber, payload: icmp4(header.ICMPv4Echo, 56)}.bytes(), Unreachable, 0, 0, 3, 1, 0, 84},
		{"v4 time exceeded", udp4.bytes(), TimeExceeded, 0, 0, 11, 0, 0, 128},
		{"v4 time exceeded without DF, mtu ignored", big4.bytes(), TimeExceeded, 1400, 0, 11, 0, 0, 548},
		{"v4 first fragment answered", pkt4{src: host4a, dst: host4b, flags: mf, proto: header.UDPProtocolNumber, payload: udp(1000)}.bytes(), Unreachable, 0, 0, 3, 1, 0, 548},
		{"v6 udp unreachable", udp6.bytes(), Unreachable, 0, 0, 1, 3, 0, 148},
		{"v6 quotes 1232 bytes of a big packet", big6.bytes(), Unreachable, 0, 0, 1, 3, 0, 1232},
		{"v6 packet too big", big6.bytes(), TooBig, 1400, 0, 2, 0, 1400, 1232},
		{"v6 packet too big at 1280", big6.bytes(), TooBig, 1280, 0, 2, 0, 1280, 1232},
		{"v6 short buffer quotes less", big6.bytes(), TooBig, 1280, 48 + 100, 2, 0, 1280, 100},
		{"v6 time exceeded", udp6.bytes(), TimeExceeded, 0, 0, 3, 0, 0, 148},
		{"v6 echo request answered", pkt6{src: host6a, dst: host6b, proto: header.ICMPv6ProtocolNumber, payload: icmp6(header.ICMPv6EchoRequest, 56)}.bytes(), Unreachable, 0, 0, 1, 3, 0, 104},
		{"v6 through hop-by-hop and destination options", pkt6{src: host6a, dst: host6b, proto: tcpip.TransportProtocolNumber(header.IPv6DestinationOptionsExtHdrIdentifier),
			ext:     header.IPv6ExtHdrSerializer{header.IPv6SerializableHopByHopExtHdr{&header.IPv6RouterAlertOption{Value: header.IPv6RouterAlertMLD}}},
			payload: destOpts6(header.ICMPv6ProtocolNumber, icmp6(header.ICMPv6EchoReply, 8))}.bytes(), Unreachable, 0, 0, 1, 3, 0, 72},
		{"v6 first fragment answered", pkt6{src: host6a, dst: host6b, proto: header.UDPProtocolNumber,
			ext: header.IPv6ExtHdrSerializer{&header.IPv6SerializableFragmentExtHdr{M: true, Identification: 7}}, payload: udp(1000)}.bytes(), TooBig, 1280, 0, 2, 0, 1280, 1056},
		{"v6 packet too big to a multicast destination", pkt6{src: host6a, dst: "ff0e::1", proto: header.UDPProtocolNumber, payload: udp(10)}.bytes(), TooBig, 1300, 0, 2, 0, 1300, 58},
	} {
		t.Run(tc.name, func(t *testing.T) {
			room, src := tc.room, router4
			if room == 0 {
				room = MaxLen
			}
			if tc.orig[0]>>4 == 6 {
				src = router6
			}
			e := buildDirty(t, room, tc.orig, src, tc.kind, tc.mtu)
			if len(e) == 0 {
				t.Fatal("no error built")
			}
			if bad := checkError(e, tc.orig, src, tc.typ, tc.code, tc.info, tc.quote); bad != "" {
				t.Error(bad)
			}
		})
	}
}

// buildDirty runs Build into a buffer of room bytes in every dirtybuf
// state (stale: holding another error), checks that it writes the same
// each time (the IPv4 ID counter set back before each run), and returns
// the error, empty for none.
func buildDirty(t testing.TB, room int, orig []byte, src netip.Addr, k Kind, mtu int) []byte {
	t.Helper()
	return dirtybuf.Check(t, [][]byte{make([]byte, room)}, staleError, func(bufs [][]byte) [][]byte {
		ipID.Store(0)
		return [][]byte{bufs[0][:Build(bufs[0], orig, src, k, mtu)]}
	})[0]
}

// staleError leaves an earlier error in a buffer: a packet too big
// quoting a large TCP segment.
func staleError(bufs [][]byte) [][]byte {
	big := pkt6{src: host6b, dst: host6a, proto: header.TCPProtocolNumber, payload: bytes.Repeat([]byte{0x5a}, 1460)}.bytes()
	for _, b := range bufs {
		Build(b, big, router6, TooBig, 1280)
	}
	return bufs
}

// TestNeverAnswer: what a router must not answer, and arguments Build
// refuses, give nothing.
func TestNeverAnswer(t *testing.T) {
	udp4 := func(src, dst string, flags uint8, off uint16) []byte {
		return pkt4{src: src, dst: dst, flags: flags, fragOff: off, proto: header.UDPProtocolNumber, payload: udp(20)}.bytes()
	}
	v4icmp := func(typ header.ICMPv4Type) []byte {
		return pkt4{src: host4a, dst: host4b, proto: header.ICMPv4ProtocolNumber, payload: icmp4(typ, 20)}.bytes()
	}
	udp6 := func(src, dst string) []byte {
		return pkt6{src: src, dst: dst, proto: header.UDPProtocolNumber, payload: udp(20)}.bytes()
	}
	frag6 := func(off uint16, proto tcpip.TransportProtocolNumber, payload []byte) []byte {
		return pkt6{src: host6a, dst: host6b, proto: proto, payload: payload,
			ext: header.IPv6ExtHdrSerializer{&header.IPv6SerializableFragmentExtHdr{FragmentOffset: off, Identification: 9}}}.bytes()
	}
	ok4 := udp4(host4a, host4b, 0, 0)
	badSum := append([]byte{}, ok4...)
	badSum[10] ^= 1
	cut := append([]byte{}, ok4...)[:len(ok4)-1]
	ihl4 := append([]byte{}, ok4...)
	ihl4[0] = 0x44
	bareICMP := pkt4{src: host4a, dst: host4b, proto: header.ICMPv4ProtocolNumber}.bytes()
	bareICMP6 := pkt6{src: host6a, dst: host6b, proto: header.ICMPv6ProtocolNumber}.bytes()
	long6 := udp6(host6a, host6b)[:60]
	b := make([]byte, MaxLen)
	if Build(b, ok4, router4, Unreachable, 0) == 0 || Build(b, udp6(host6a, host6b), router6, Unreachable, 0) == 0 {
		t.Fatal("the packets the cases below alter are not answered")
	}
	for _, tc := range []struct {
		name string
		orig []byte
		kind Kind
		mtu  int
		src  netip.Addr
	}{
		{"empty", nil, Unreachable, 0, router4},
		{"not IP", []byte{0x50, 1, 2, 3}, Unreachable, 0, router4},
		{"v4 ICMP destination unreachable", v4icmp(header.ICMPv4DstUnreachable), Unreachable, 0, router4},
		{"v4 ICMP time exceeded", v4icmp(header.ICMPv4TimeExceeded), Unreachable, 0, router4},
		{"v4 ICMP redirect", v4icmp(header.ICMPv4Redirect), TooBig, 1280, router4},
		{"v4 ICMP unknown type 42", v4icmp(42), Unreachable, 0, router4},
		{"v4 ICMP without a type", bareICMP, Unreachable, 0, router4},
		{"v4 fragment at 8", udp4(host4a, host4b, 0, 8), Unreachable, 0, router4},
		{"v4 last fragment at 1480", udp4(host4a, host4b, 0, 1480), Unreachable, 0, router4},
		{"v4 to broadcast", udp4(host4a, "255.255.255.255", 0, 0), Unreachable, 0, router4},
		{"v4 to multicast", udp4(host4a, "224.0.0.5", 0, 0), Unreachable, 0, router4},
		{"v4 to this network", udp4(host4a, "0.1.2.3", 0, 0), Unreachable, 0, router4},
		{"v4 from 0.0.0.0", udp4("0.0.0.0", host4b, 0, 0), Unreachable, 0, router4},
		{"v4 from loopback", udp4("127.0.0.1", host4b, 0, 0), Unreachable, 0, router4},
		{"v4 from multicast", udp4("239.1.1.1", host4b, 0, 0), Unreachable, 0, router4},
		{"v4 from class E", udp4("240.0.0.1", host4b, 0, 0), Unreachable, 0, router4},
		{"v4 from broadcast", udp4("255.255.255.255", host4b, 0, 0), Unreachable, 0, router4},
		{"v4 bad header checksum", badSum, Unreachable, 0, router4},
		{"v4 total length beyond the buffer", cut, Unreachable, 0, router4},
		{"v4 header length beyond total length", ihl4, Unreachable, 0, router4},
		{"v4 too big without DF", ok4, TooBig, 1280, router4},
		{"v4 too big below 68", udp4(host4a, host4b, df, 0), TooBig, 67, router4},
		{"v4 too big above 65535", udp4(host4a, host4b, df, 0), TooBig, 65536, router4},
		{"v4 from an IPv6 router", ok4, Unreachable, 0, router6},
		{"v4 from a multicast router", ok4, Unreachable, 0, netip.MustParseAddr("224.0.0.1")},
		{"v4 from no router", ok4, Unreachable, 0, netip.Addr{}},
		{"v4 unknown kind", ok4, 0, 0, router4},
		{"v6 ICMPv6 error", pkt6{src: host6a, dst: host6b, proto: header.ICMPv6ProtocolNumber, payload: icmp6(header.ICMPv6DstUnreachable, 20)}.bytes(), TooBig, 1280, router6},
		{"v6 ICMPv6 packet too big", pkt6{src: host6a, dst: host6b, proto: header.ICMPv6ProtocolNumber, payload: icmp6(header.ICMPv6PacketTooBig, 20)}.bytes(), Unreachable, 0, router6},
		{"v6 ICMPv6 without a type", bareICMP6, Unreachable, 0, router6},
		{"v6 ICMPv6 error after destination options", pkt6{src: host6a, dst: host6b, proto: tcpip.TransportProtocolNumber(header.IPv6DestinationOptionsExtHdrIdentifier),
			payload: destOpts6(header.ICMPv6ProtocolNumber, icmp6(header.ICMPv6TimeExceeded, 8))}.bytes(), Unreachable, 0, router6},
		{"v6 ICMPv6 error in a first fragment", frag6(0, header.ICMPv6ProtocolNumber, icmp6(header.ICMPv6ParamProblem, 8)), Unreachable, 0, router6},
		{"v6 fragment at 8", frag6(1, header.UDPProtocolNumber, udp(8)), Unreachable, 0, router6},
		{"v6 fragment at 1232", frag6(154, header.UDPProtocolNumber, udp(8)), TooBig, 1280, router6},
		{"v6 unreachable to multicast", udp6(host6a, "ff02::1"), Unreachable, 0, router6},
		{"v6 from ::", udp6("::", host6b), Unreachable, 0, router6},
		{"v6 from multicast", udp6("ff02::2", host6b), TooBig, 1280, router6},
		{"v6 from loopback", udp6("::1", host6b), Unreachable, 0, router6},
		{"v6 payload length beyond the buffer", long6, Unreachable, 0, router6},
		{"v6 too big below 1280", udp6(host6a, host6b), TooBig, 1279, router6},
		{"v6 from an IPv4 router", udp6(host6a, host6b), Unreachable, 0, router4},
		{"v6 from an IPv4-mapped router", udp6(host6a, host6b), Unreachable, 0, netip.AddrFrom16(router4.As16())},
		{"v6 from a multicast router", udp6(host6a, host6b), Unreachable, 0, netip.MustParseAddr("ff02::1")},
		{"v6 unknown kind", udp6(host6a, host6b), TimeExceeded + 1, 1280, router6},
		{"v6 time exceeded to multicast", udp6(host6a, "ff02::1"), TimeExceeded, 0, router6},
		{"v4 time exceeded to broadcast", udp4(host4a, "255.255.255.255", 0, 0), TimeExceeded, 0, router4},
		{"v4 time exceeded for an ICMP error", v4icmp(header.ICMPv4DstUnreachable), TimeExceeded, 0, router4},
	} {
		if n := Build(b, tc.orig, tc.src, tc.kind, tc.mtu); n != 0 {
			t.Errorf("%s: built a %d-byte error %x", tc.name, n, b[:n])
		}
	}
	if n := Build(b[:28+27], pkt4{src: host4a, dst: host4b, proto: header.TCPProtocolNumber, payload: make([]byte, 100)}.bytes(), router4, Unreachable, 0); n != 0 {
		t.Errorf("a buffer without room for the header and 8 bytes: built %d bytes", n)
	}
}

// TestBuildAllocs: building an error allocates nothing.
func TestBuildAllocs(t *testing.T) {
	v4 := pkt4{src: host4a, dst: host4b, flags: df, proto: header.TCPProtocolNumber, payload: make([]byte, 1000)}.bytes()
	v6 := pkt6{src: host6a, dst: host6b, proto: header.TCPProtocolNumber, payload: make([]byte, 1000)}.bytes()
	b := make([]byte, MaxLen)
	if a := testing.AllocsPerRun(1000, func() {
		Build(b, v4, router4, TooBig, 1280)
		Build(b, v6, router6, Unreachable, 0)
	}); a != 0 {
		t.Errorf("%v allocations per pair of errors", a)
	}
}

func BenchmarkBuild(b *testing.B) {
	for _, tc := range []struct {
		name string
		orig []byte
		src  netip.Addr
	}{
		{"v4", pkt4{src: host4a, dst: host4b, flags: df, proto: header.TCPProtocolNumber, payload: make([]byte, 1480)}.bytes(), router4},
		{"v6", pkt6{src: host6a, dst: host6b, proto: header.TCPProtocolNumber, payload: make([]byte, 1460)}.bytes(), router6},
	} {
		b.Run(tc.name, func(b *testing.B) {
			buf := make([]byte, MaxLen)
			b.ReportAllocs()
			b.SetBytes(int64(Build(buf, tc.orig, tc.src, TooBig, 1280)))
			for b.Loop() {
				Build(buf, tc.orig, tc.src, TooBig, 1280)
			}
		})
	}
}
