// Package ethernet holds what the ports share about Ethernet II framing:
// the header's length, the EtherTypes of IPv4 and IPv6, and the check
// that a received frame carries the IP packet its EtherType announces.
// It is pure Go and builds everywhere.
package ethernet

import "encoding/binary"

// Sizes and EtherTypes.
const (
	HeaderLen = 14     // destination, source, EtherType; no VLAN tag
	TypeIPv4  = 0x0800 // ETH_P_IP
	TypeIPv6  = 0x86dd // ETH_P_IPV6
)

// IsIP reports whether frame, an Ethernet frame, carries an IPv4 or IPv6
// packet (of one byte at least) and its EtherType says the same as the
// packet's IP version.
func IsIP(frame []byte) bool {
	if len(frame) <= HeaderLen {
		return false
	}
	switch binary.BigEndian.Uint16(frame[12:14]) {
	case TypeIPv4:
		return frame[HeaderLen]>>4 == 4
	case TypeIPv6:
		return frame[HeaderLen]>>4 == 6
	}
	return false
}
