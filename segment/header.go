package segment

import (
	"encoding/binary"
	"fmt"
)

// checkHeaderSize reports a header size other than HeaderSize,
// HeaderSizeMrg and HeaderSizeTunnel.
func checkHeaderSize(size int) error {
	if size != HeaderSize && size != HeaderSizeMrg && size != HeaderSizeTunnel {
		return misuse(ruleHeaderSize, "header size %d, want %d, %d or %d", size, HeaderSize, HeaderSizeMrg, HeaderSizeTunnel)
	}
	return nil
}

// Sizes of the virtio-net header on the wire. A TUN device uses HeaderSize
// unless TUNSETVNETHDRSZ set it to HeaderSizeMrg (which adds num_buffers)
// or to HeaderSizeTunnel: struct virtio_net_hdr_v1_hash_tunnel (Linux
// 6.17), whose hash fields a TUN leaves zero and whose last two fields are
// the offsets of a UDP-tunnel super-packet's outer transport header and
// inner network header.
const (
	HeaderSize       = 10
	HeaderSizeMrg    = 12
	HeaderSizeTunnel = 24
)

// Offsets of the tunnel fields in a HeaderSizeTunnel header.
const (
	outerTHOff = 20
	innerNHOff = 22
)

// Flags of virtio_net_hdr.flags. FlagNeedsCsum says the checksum at
// CsumStart+CsumOffset is partial; FlagUDPTunnelCsum says a UDP-tunnel
// super-packet's outer UDP checksum is to be computed for every segment
// (without it the outer checksum field is copied as it is, normally 0).
const (
	FlagNeedsCsum     = 1
	FlagUDPTunnelCsum = 8
)

// GSOType is virtio_net_hdr.gso_type: a kind in the low bits and the ECN
// bit on top.
type GSOType uint8

// GSO kinds and the ECN flag, as in include/uapi/linux/virtio_net.h.
const (
	GSONone  GSOType = 0    // not a super-packet
	GSOTCPv4 GSOType = 1    // TSO over IPv4
	GSOUDP   GSOType = 3    // UFO: one UDP datagram cut into IP fragments
	GSOTCPv6 GSOType = 4    // TSO over IPv6
	GSOUDPL4 GSOType = 5    // USO: one UDP datagram per segment
	GSOECN   GSOType = 0x80 // TCP with ECN: CWR is set on the first segment only

	// A UDP-tunnel super-packet (VXLAN, Geneve: Linux 6.17's
	// TUN_F_UDP_TUNNEL_GSO) has one of these on top of its inner kind
	// (GSOTCPv4, GSOTCPv6 or GSOUDPL4): its outer IP version.
	GSOUDPTunnelIPv4 GSOType = 0x20
	GSOUDPTunnelIPv6 GSOType = 0x40
)

const gsoTunnel = GSOUDPTunnelIPv4 | GSOUDPTunnelIPv6

// gsoByFrags is GSO_BY_FRAGS, a gso_size reserved for the kernel: never
// valid from a device.
const gsoByFrags = 0xffff

// Kind returns the GSO kind without the ECN and tunnel flags: a tunnel
// super-packet's inner kind.
func (t GSOType) Kind() GSOType { return t &^ (GSOECN | gsoTunnel) }

// ECN reports whether the ECN flag is set.
func (t GSOType) ECN() bool { return t&GSOECN != 0 }

func (t GSOType) String() string {
	var s string
	switch t.Kind() {
	case GSONone:
		s = "none"
	case GSOTCPv4:
		s = "tcpv4"
	case GSOUDP:
		s = "udp"
	case GSOTCPv6:
		s = "tcpv6"
	case GSOUDPL4:
		s = "udp_l4"
	default:
		s = fmt.Sprintf("unknown(%d)", uint8(t.Kind()))
	}
	switch t & gsoTunnel {
	case GSOUDPTunnelIPv4:
		s += "|udp_tunnel_ipv4"
	case GSOUDPTunnelIPv6:
		s += "|udp_tunnel_ipv6"
	case gsoTunnel:
		s += "|udp_tunnel_ipv4|udp_tunnel_ipv6"
	}
	if t.ECN() {
		s += "|ecn"
	}
	return s
}

// Header is struct virtio_net_hdr, the metadata a TUN device with
// IFF_VNET_HDR puts in front of every packet. All fields are in host
// (little-endian) order; NumBuffers exists only in the 12- and 24-byte
// forms, OuterTH and InnerNH only in the 24-byte form.
type Header struct {
	Flags      uint8
	GSOType    GSOType
	HdrLen     uint16 // untrusted: Validate recomputes it from the packet
	GSOSize    uint16 // payload bytes per segment (UFO: L4 bytes per fragment)
	CsumStart  uint16 // offset of the transport header
	CsumOffset uint16 // offset of the checksum field from CsumStart
	NumBuffers uint16
	OuterTH    uint16 // tunnel: offset of the outer UDP header
	InnerNH    uint16 // tunnel: offset of the inner IP header
}

// NeedsCsum reports whether FlagNeedsCsum is set.
func (h Header) NeedsCsum() bool { return h.Flags&FlagNeedsCsum != 0 }

// DecodeHeader decodes a virtio-net header of size HeaderSize or
// HeaderSizeMrg from the front of b.
func DecodeHeader(b []byte, size int) (Header, error) {
	if err := checkHeaderSize(size); err != nil {
		return Header{}, err
	}
	if len(b) < size {
		return Header{}, misuse(ruleShortPacket, "%d bytes, header needs %d", len(b), size)
	}
	h := Header{
		Flags:      b[0],
		GSOType:    GSOType(b[1]),
		HdrLen:     binary.LittleEndian.Uint16(b[2:]),
		GSOSize:    binary.LittleEndian.Uint16(b[4:]),
		CsumStart:  binary.LittleEndian.Uint16(b[6:]),
		CsumOffset: binary.LittleEndian.Uint16(b[8:]),
	}
	if size >= HeaderSizeMrg {
		h.NumBuffers = binary.LittleEndian.Uint16(b[10:])
	}
	if size == HeaderSizeTunnel {
		h.OuterTH = binary.LittleEndian.Uint16(b[outerTHOff:])
		h.InnerNH = binary.LittleEndian.Uint16(b[innerNHOff:])
	}
	return h, nil
}

// Encode writes h to the front of b in the form of the given size
// (HeaderSize, HeaderSizeMrg or HeaderSizeTunnel, whose hash fields it
// zeroes).
func (h Header) Encode(b []byte, size int) error {
	if err := checkHeaderSize(size); err != nil {
		return err
	}
	if len(b) < size {
		return misuse(ruleShortBuffer, "%d bytes, header needs %d", len(b), size)
	}
	b[0] = h.Flags
	b[1] = uint8(h.GSOType)
	binary.LittleEndian.PutUint16(b[2:], h.HdrLen)
	binary.LittleEndian.PutUint16(b[4:], h.GSOSize)
	binary.LittleEndian.PutUint16(b[6:], h.CsumStart)
	binary.LittleEndian.PutUint16(b[8:], h.CsumOffset)
	if size >= HeaderSizeMrg {
		binary.LittleEndian.PutUint16(b[10:], h.NumBuffers)
	}
	if size == HeaderSizeTunnel {
		clear(b[HeaderSizeMrg:outerTHOff])
		binary.LittleEndian.PutUint16(b[outerTHOff:], h.OuterTH)
		binary.LittleEndian.PutUint16(b[innerNHOff:], h.InnerNH)
	}
	return nil
}
