package segment

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"

	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// Tunnel super-packets for the tests: an inner super-packet from
// buildSuper behind an Ethernet header, a VXLAN or Geneve header and the
// outer UDP and IP headers, as a VXLAN or Geneve device hands it to a TUN
// with TUN_F_UDP_TUNNEL_GSO.

// UDP ports of the tunnels (IANA).
const (
	vxlanPort  = 4789
	genevePort = 6081
)

// tunnelSpec describes a tunnel packet for buildTunnel.
type tunnelSpec struct {
	outer6     bool
	geneve     bool // Geneve (with genevOpts option bytes) instead of VXLAN
	geneveOpts int  // a multiple of 4
	csum       bool // FlagUDPTunnelCsum: outer UDP checksum, else 0
	plain      bool // not a super-packet: GSONone, NEEDS_CSUM at the inner checksum, outer checksum 0
	outerID    uint16
	src, dst   netip.Addr // outer addresses; zero: the defaults
	inner      superSpec  // needsCsum set: a tunnel carries NEEDS_CSUM
}

// tunnelHeader returns the bytes between the outer UDP header and the
// inner IP header: VXLAN or Geneve, then the inner Ethernet header.
func (s tunnelSpec) tunnelHeader() ([]byte, uint16) {
	var b []byte
	port := uint16(vxlanPort)
	if s.geneve {
		port = genevePort
		b = make([]byte, 8+s.geneveOpts)
		b[0] = uint8(s.geneveOpts / 4)
		binary.BigEndian.PutUint16(b[2:], 0x6558) // transparent Ethernet bridging
		for i := 8; i+4 <= len(b); i += 4 {       // options of class 0xff01, type 1, no data
			b[i], b[i+1], b[i+2] = 0xff, 0x01, 0x01
		}
	} else {
		b = make([]byte, 8)
		b[0] = 0x08 // VNI present
	}
	copy(b[4:7], []byte{0x00, 0x12, 0x34}) // VNI 0x1234
	eth := make([]byte, header.EthernetMinimumSize)
	copy(eth, []byte{0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1})
	binary.BigEndian.PutUint16(eth[12:], uint16(header.IPv4ProtocolNumber))
	if s.inner.v6 {
		binary.BigEndian.PutUint16(eth[12:], uint16(header.IPv6ProtocolNumber))
	}
	return append(b, eth...), port
}

// buildTunnel builds the tunnel packet s describes and the
// HeaderSizeTunnel header a Linux 6.17 TUN gives it.
func buildTunnel(s tunnelSpec) ([]byte, Header) {
	inner, ih := buildSuper(s.inner)
	tnl, port := s.tunnelHeader()
	outer, _ := buildSuper(superSpec{
		v6: s.outer6, proto: uint8(header.UDPProtocolNumber), payload: len(tnl) + len(inner),
		needsCsum: true, src: s.src, dst: s.dst, srcPort: 49152 + s.outerID%1000, dstPort: port,
		id: s.outerID, df: true,
	})
	outerTH := header.IPv4MinimumSize
	if s.outer6 {
		outerTH = header.IPv6MinimumSize
	}
	innerNH := outerTH + header.UDPMinimumSize + len(tnl)
	copy(outer[outerTH+header.UDPMinimumSize:], tnl)
	copy(outer[innerNH:], inner)
	h := ih
	h.GSOType |= GSOUDPTunnelIPv4
	if s.outer6 {
		h.GSOType ^= GSOUDPTunnelIPv4 | GSOUDPTunnelIPv6
	}
	if s.csum {
		h.Flags |= FlagUDPTunnelCsum // the outer checksum field holds the pseudo-header sum
	} else {
		binary.BigEndian.PutUint16(outer[outerTH+pbUDPCsumOff:], 0)
	}
	h.HdrLen += uint16(innerNH)
	h.CsumStart += uint16(innerNH)
	h.OuterTH, h.InnerNH = uint16(outerTH), uint16(innerNH)
	if s.plain {
		binary.BigEndian.PutUint16(outer[outerTH+pbUDPCsumOff:], 0)
		h = Header{Flags: FlagNeedsCsum, CsumStart: h.CsumStart, CsumOffset: h.CsumOffset}
	}
	return outer, h
}

// checkTunnelSplit checks the segments of a tunnel packet: the outer
// headers of each, then the inner packets as checkSplit checks any.
func checkTunnelSplit(pkt []byte, l Layout, segs [][]byte) error {
	inner := make([][]byte, len(segs))
	for i, seg := range segs {
		if len(seg) <= l.inner {
			return fmt.Errorf("segment %d: %d bytes", i, len(seg))
		}
		if err := checkOuter(pkt, l, seg, i); err != nil {
			return fmt.Errorf("segment %d: outer headers: %w", i, err)
		}
		inner[i] = seg[l.inner:]
	}
	return checkSplit(pkt[l.inner:], innerLayout(l), inner, false)
}

// innerLayout is l of a tunnel packet as the layout of its inner packet.
func innerLayout(l Layout) Layout {
	il := l
	il.tunnel, il.tunnelCsum, il.outerL3, il.inner = 0, false, 0, 0
	il.l3Len -= l.inner
	il.csumStart -= l.inner
	il.pktLen -= l.inner
	il.maxSegLen -= l.inner
	return il
}

// checkOuter checks the outer headers of segment i: lengths, the IPv4 ID
// and header checksum, the outer UDP checksum (complete, or the input's
// without FlagUDPTunnelCsum), and nothing else changed.
func checkOuter(pkt []byte, l Layout, seg []byte, i int) error {
	o := Layout{ipv6: l.tunnel == GSOUDPTunnelIPv6}
	if err := checkIP(seg, o); err != nil {
		return err
	}
	udp := seg[l.outerL3:]
	if n := int(header.UDP(udp).Length()); n != len(udp) {
		return fmt.Errorf("UDP length %d for %d bytes", n, len(udp))
	}
	want, got := bytes.Clone(pkt[:l.inner]), bytes.Clone(seg[:l.inner])
	if !o.ipv6 {
		if id, in := header.IPv4(seg).ID(), header.IPv4(pkt).ID(); id != in+uint16(i) {
			return fmt.Errorf("IPv4 ID %d, want %d", id, in+uint16(i))
		}
		for _, b := range [][]byte{want, got} {
			clear(b[2:6])
			clear(b[10:12])
		}
	} else {
		clear(want[4:6])
		clear(got[4:6])
	}
	clear(want[l.outerL3+udpLenOff : l.outerL3+udpLen])
	clear(got[l.outerL3+udpLenOff : l.outerL3+udpLen])
	if !bytes.Equal(want, got) {
		return fmt.Errorf("headers differ beyond the rewritten fields:\n got %x\nwant %x", got, want)
	}
	field := l.outerL3 + udpCsumOffset
	if !l.tunnelCsum {
		if !bytes.Equal(seg[field:field+2], pkt[field:field+2]) {
			return fmt.Errorf("UDP checksum %x without FlagUDPTunnelCsum, input %x", seg[field:field+2], pkt[field:field+2])
		}
		return nil
	}
	if !l4Verifies(seg, Layout{ipv6: o.ipv6, proto: protoUDP}, udp) {
		return fmt.Errorf("outer UDP checksum does not verify")
	}
	return nil
}
