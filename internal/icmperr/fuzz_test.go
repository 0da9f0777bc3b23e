package icmperr

import (
	"net/netip"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// FuzzErrorFor: whatever the original packet and the MTU, Build neither
// panics nor writes anything but a valid error (the right type, code, MTU,
// checksums, addresses and quote) to a single host, or nothing, the same
// whatever its buffer held; and the limiter decides without panicking.
func FuzzErrorFor(f *testing.F) {
	for _, p := range [][]byte{
		pkt4{src: host4a, dst: host4b, flags: df, proto: header.UDPProtocolNumber, payload: udp(100)}.bytes(),
		pkt4{src: host4a, dst: host4b, proto: header.ICMPv4ProtocolNumber, payload: icmp4(header.ICMPv4Echo, 8)}.bytes(),
		pkt4{src: host4a, dst: host4b, flags: df, proto: header.TCPProtocolNumber,
			options: header.IPv4OptionsSerializer{&header.IPv4SerializableRouterAlertOption{}}, payload: make([]byte, 700)}.bytes(),
		pkt6{src: host6a, dst: host6b, proto: header.UDPProtocolNumber, payload: udp(100)}.bytes(),
		pkt6{src: host6a, dst: "ff02::1", proto: header.ICMPv6ProtocolNumber, payload: icmp6(header.ICMPv6EchoRequest, 8)}.bytes(),
		pkt6{src: host6a, dst: host6b, proto: header.UDPProtocolNumber, payload: udp(1400),
			ext: header.IPv6ExtHdrSerializer{&header.IPv6SerializableFragmentExtHdr{M: true}}}.bytes(),
	} {
		f.Add(p, uint32(1280))
	}
	l := NewLimiter(LinuxLimits(), 64, nil)
	f.Fuzz(func(t *testing.T, orig []byte, mtu uint32) {
		for _, k := range []Kind{Unreachable, TooBig} {
			l.Allow(orig, k)
			for _, src := range []netip.Addr{router4, router6} {
				e := buildDirty(t, MaxLen, orig, src, k, int(mtu))
				if len(e) == 0 {
					continue
				}
				if bad := checkFuzzed(e, orig, src, k, mtu); bad != "" {
					t.Fatalf("%v from %v for %x: %s: %x", k, src, orig, bad, e)
				}
			}
		}
	})
}

// checkFuzzed checks an error built for a fuzzed packet.
func checkFuzzed(e, orig []byte, src netip.Addr, k Kind, mtu uint32) string {
	typ, code, info, hdrs := uint8(3), uint8(1), uint32(0), hdrs4
	if src.Is6() {
		typ, code, hdrs = 1, 3, hdrs6
	}
	switch {
	case k == TooBig && src.Is4():
		code, info = 4, mtu
		if header.IPv4(orig).Flags()&df == 0 {
			return "fragmentation needed without DF"
		}
	case k == TooBig:
		typ, code, info = 2, 0, mtu
	}
	if bad := checkError(e, orig, src, typ, code, info, len(e)-hdrs); bad != "" {
		return bad
	}
	to := netip.AddrFrom16(header.IPv6(e).DestinationAddress().As16())
	if src.Is4() {
		ip := header.IPv4(orig)
		to = netip.AddrFrom4(ip.SourceAddress().As4())
		if !ip.IsChecksumValid() || ip.FragmentOffset() != 0 {
			return "answers a bad header or a later fragment"
		}
	}
	if to.IsMulticast() || to.IsUnspecified() || to.IsLoopback() {
		return "sent to " + to.String()
	}
	return ""
}
