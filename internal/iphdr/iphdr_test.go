package iphdr

import (
	"bytes"
	"net/netip"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

var (
	src4, dst4 = netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.19.0.1")
	src6, dst6 = netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8:1::1")
)

// ipv4 builds an IPv4 packet with opts bytes of options and payload bytes
// after the header.
func ipv4(opts, payload int) []byte {
	hl := header.IPv4MinimumSize + opts
	p := make([]byte, hl+payload)
	header.IPv4(p).Encode(&header.IPv4Fields{TotalLength: uint16(len(p)), TTL: 64, Protocol: uint8(header.UDPProtocolNumber),
		SrcAddr: tcpip.AddrFrom4(src4.As4()), DstAddr: tcpip.AddrFrom4(dst4.As4())})
	p[0] = 0x40 | byte(hl/4)
	return p
}

func ipv6(payload int) []byte {
	p := make([]byte, header.IPv6MinimumSize+payload)
	header.IPv6(p).Encode(&header.IPv6Fields{PayloadLength: uint16(payload), TransportProtocol: header.UDPProtocolNumber, HopLimit: 64,
		SrcAddr: tcpip.AddrFrom16(src6.As16()), DstAddr: tcpip.AddrFrom16(dst6.As16())})
	return p
}

func bend(p []byte, f func([]byte)) []byte { f(p); return p }

func TestRead(t *testing.T) {
	cases := []struct {
		name    string
		pkt     []byte
		version int
		n       int  // Len
		lenOK   bool // Len: the length field is there
		ok      bool // Dst: the fixed header is there
		hl      int
		whole   bool
		dst     netip.Addr
	}{
		{name: "empty", pkt: nil},
		{name: "version only", pkt: []byte{0x45}, version: 4},
		{name: "IPv4 before the length", pkt: ipv4(0, 0)[:3], version: 4},
		{name: "IPv6 before the length", pkt: ipv6(0)[:5], version: 6},
		{name: "short IPv4", pkt: ipv4(0, 0)[:19], version: 4, n: 20, lenOK: true},
		{name: "short IPv6", pkt: ipv6(0)[:39], version: 6, n: 40, lenOK: true},
		{name: "IPv4", pkt: ipv4(0, 100), version: 4, n: 120, ok: true, hl: 20, whole: true, dst: dst4},
		{name: "IPv4 options", pkt: ipv4(40, 8), version: 4, n: 68, ok: true, hl: 60, whole: true, dst: dst4},
		{name: "IPv4 header only", pkt: ipv4(0, 0), version: 4, n: 20, ok: true, hl: 20, whole: true, dst: dst4},
		{name: "IPv4 with a trailer", pkt: append(ipv4(0, 10), 0, 0), version: 4, n: 30, ok: true, hl: 20, dst: dst4},
		{name: "IPv4 truncated", pkt: ipv4(0, 10)[:25], version: 4, n: 30, ok: true, hl: 20, dst: dst4},
		{name: "IPv4 IHL 4", pkt: bend(ipv4(0, 10), func(p []byte) { p[0] = 0x44 }), version: 4, n: 30, ok: true, hl: 16, dst: dst4},
		{name: "IPv4 IHL beyond the total length", pkt: bend(ipv4(0, 10), func(p []byte) { p[0] = 0x4f }), version: 4, n: 30, ok: true, hl: 60, dst: dst4},
		{name: "IPv4 total length 0", pkt: bend(ipv4(0, 10), func(p []byte) { p[2], p[3] = 0, 0 }), version: 4, n: 0, ok: true, hl: 20, dst: dst4},
		{name: "IPv6", pkt: ipv6(100), version: 6, n: 140, ok: true, hl: 40, whole: true, dst: dst6},
		{name: "IPv6 header only", pkt: ipv6(0), version: 6, n: 40, ok: true, hl: 40, whole: true, dst: dst6},
		{name: "IPv6 truncated", pkt: ipv6(100)[:139], version: 6, n: 140, ok: true, hl: 40, dst: dst6},
		{name: "IPv6 payload length 0", pkt: bend(ipv6(100), func(p []byte) { p[4], p[5] = 0, 0 }), version: 6, n: 40, ok: true, hl: 40, dst: dst6},
		{name: "version 5", pkt: bend(ipv6(100), func(p []byte) { p[0] = 0x50 }), version: 5},
	}
	for _, c := range cases {
		n, ok := Len(c.pkt)
		dst, dok := Dst(c.pkt)
		got := []any{Version(c.pkt), n, ok, HeaderLen(c.pkt), Whole(c.pkt), dst, dok}
		want := []any{c.version, c.n, c.lenOK || c.ok, c.hl, c.whole, c.dst, c.ok}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%s: Version, Len, HeaderLen, Whole, Dst = %v, want %v", c.name, got, want)
				break
			}
		}
		a := Addrs(c.pkt)
		switch {
		case !c.ok && a != nil:
			t.Errorf("%s: Addrs %x, want nil", c.name, a)
		case c.ok && (len(a) != 2*c.dst.BitLen()/8 || !bytes.Equal(a[len(a)/2:], c.dst.AsSlice())):
			t.Errorf("%s: Addrs %x, destination %v", c.name, a, c.dst)
		}
	}
}

func TestAllocs(t *testing.T) {
	p := ipv6(100)
	if n := testing.AllocsPerRun(100, func() { Len(p); Whole(p); Dst(p); Addrs(p); LinkControl(p) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

// FuzzRead: on any bytes the functions never panic, agree with each other
// and with gVisor's header parsers.
func FuzzRead(f *testing.F) {
	f.Add(ipv4(0, 10))
	f.Add(ipv4(8, 0))
	f.Add(ipv6(10))
	f.Add([]byte{0x45})
	f.Fuzz(func(t *testing.T, b []byte) {
		n, ok := Len(b)
		dst, dok := Dst(b)
		hl, whole, a := HeaderLen(b), Whole(b), Addrs(b)
		LinkControl(b) // never panics
		if dok != (a != nil) || dok && !ok || hl != 0 && !dok {
			t.Fatalf("Len ok %v, Dst ok %v, Addrs %x, HeaderLen %d", ok, dok, a, hl)
		}
		if whole && (!dok || n != len(b) || hl < IPv4Len || hl > n) {
			t.Fatalf("Whole with Len %d, HeaderLen %d, %d bytes", n, hl, len(b))
		}
		if !ok {
			return
		}
		if !dok {
			if len(b) >= IPv4Len && Version(b) == 4 || len(b) >= IPv6Len {
				t.Fatalf("no fixed header in %d bytes of IPv%d", len(b), Version(b))
			}
			return
		}
		switch Version(b) {
		case 4:
			h := header.IPv4(b)
			if n != int(h.TotalLength()) || hl != int(h.HeaderLength()) || dst != netip.AddrFrom4(h.DestinationAddress().As4()) {
				t.Fatalf("IPv4: Len %d, HeaderLen %d, Dst %v; gVisor %d, %d, %v", n, hl, dst, h.TotalLength(), h.HeaderLength(), h.DestinationAddress())
			}
		case 6:
			h := header.IPv6(b)
			if n != IPv6Len+int(h.PayloadLength()) || hl != IPv6Len || dst != netip.AddrFrom16(h.DestinationAddress().As16()) {
				t.Fatalf("IPv6: Len %d, HeaderLen %d, Dst %v; gVisor payload %d, %v", n, hl, dst, h.PayloadLength(), h.DestinationAddress())
			}
		default:
			t.Fatalf("version %d read", Version(b))
		}
	})
}

// TestLinkControl tells the host's own link signalling (what a kernel
// sends on a link with IPv6 and multicast: RS, NS, MLD reports behind a
// hop-by-hop header, IGMP) from other packets, truncated ones included.
func TestLinkControl(t *testing.T) {
	icmp6 := func(hbh bool, typ byte) []byte {
		p := ipv6(8)
		p[6] = 58
		if hbh { // a router alert option, as MLD reports carry
			p = append(ipv6(0), 58, 0, 5, 2, 0, 0, 1, 0, typ, 0, 0, 0, 0, 0, 0, 0)
			p[6] = 0
		} else {
			p[40] = typ
		}
		return p
	}
	igmp := ipv4(4, 8)
	igmp[9] = 2
	for _, c := range []struct {
		name string
		pkt  []byte
		want bool
	}{
		{"router solicitation", icmp6(false, 133), true},
		{"neighbour solicitation", icmp6(false, 135), true},
		{"MLDv2 report", icmp6(true, 143), true},
		{"MLDv1 report", icmp6(true, 131), true},
		{"IGMP", igmp, true},
		{"echo request", icmp6(false, 128), false},
		{"UDP (mDNS, say)", ipv6(8), false},
		{"UDP over IPv4", ipv4(0, 8), false},
		{"ICMPv6 without its type", icmp6(false, 133)[:40], false},
		{"hop-by-hop header cut short", icmp6(true, 143)[:41], false},
		{"hop-by-hop header without what follows", icmp6(true, 143)[:48], false},
		{"not IP", []byte{0x10, 0, 0}, false},
	} {
		if got := LinkControl(c.pkt); got != c.want {
			t.Errorf("%s: LinkControl %v, want %v", c.name, got, c.want)
		}
	}
}
