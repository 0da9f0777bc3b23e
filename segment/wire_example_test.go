package segment_test

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gsoplane/gsoplane/segment"
)

// A forwarder that reads wire packets (an AF_XDP port) and sends them on
// through a link with a smaller MTU: a SYN goes through Clamp, and each
// packet gets the virtio-net header that makes Split cut it (a gateway
// passes ForWire the MSS its table learned from the flow's handshake,
// pipeline.MSSTable, instead of 0).
func ExampleSegmenter_ForWire() {
	const mtu = 1500
	var seg segment.Segmenter

	forward := func(pkt []byte) {
		segment.Clamp(pkt, mtu) // only if the two sides' MTUs differ
		h, st, err := seg.ForWire(pkt, mtu, 0)
		switch {
		case errors.Is(err, segment.ErrTooBig):
			fmt.Println("drop, ICMP too big, MTU", mtu)
			return
		case errors.Is(err, segment.ErrBadChecksum), errors.Is(err, segment.ErrInvalid):
			fmt.Println("drop and count:", st)
			return
		}
		if st == segment.CsumBad {
			fmt.Print("count a bad checksum; ")
		}
		// Here the forwarder would encode h in front of pkt; it then
		// validates and splits as for a packet from a TUN device.
		l, err := seg.Validate(pkt, h)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%v gso_size %d: %d packets of at most %d bytes\n", h.GSOType, h.GSOSize, l.Segments(), l.MaxSegLen())
	}

	forward(tcp4(40000, 0x10))  // a 40 KB TSO super-packet from a veth peer
	forward(udp4(20000, false)) // a big UDP datagram, DF clear
	forward(udp4(20000, true))  // the same with DF
	forward(tcp4(200, 0x10))    // a small segment
	// Output:
	// tcpv4 gso_size 1460: 28 packets of at most 1500 bytes
	// udp gso_size 1480: 14 packets of at most 1500 bytes
	// drop, ICMP too big, MTU 1500
	// none gso_size 0: 1 packets of at most 240 bytes
}

// tcp4 builds an IPv4 TCP packet with a partial checksum, as a veth peer
// doing TSO hands it over.
func tcp4(payload int, flags byte) []byte {
	p := ipv4(6, 20+payload, true)
	l4 := p[20:]
	binary.BigEndian.PutUint16(l4[0:], 40000)
	binary.BigEndian.PutUint16(l4[2:], 443)
	l4[12], l4[13] = 5<<4, flags
	binary.BigEndian.PutUint16(l4[16:], pseudo(p, 6, len(l4)))
	return p
}

// udp4 builds an IPv4 UDP datagram with a partial checksum.
func udp4(payload int, df bool) []byte {
	p := ipv4(17, 8+payload, df)
	l4 := p[20:]
	binary.BigEndian.PutUint16(l4[0:], 40000)
	binary.BigEndian.PutUint16(l4[2:], 5300)
	binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
	binary.BigEndian.PutUint16(l4[6:], pseudo(p, 17, len(l4)))
	return p
}

func ipv4(proto byte, l4 int, df bool) []byte {
	p := make([]byte, 20+l4)
	p[0], p[8], p[9] = 0x45, 64, proto
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	if df {
		p[6] = 0x40
	}
	copy(p[12:], []byte{198, 18, 0, 1, 198, 19, 0, 1})
	binary.BigEndian.PutUint16(p[10:], segment.Checksum(p[:20], 0))
	return p
}

// pseudo returns the folded pseudo-header sum, what Linux leaves in the
// checksum field of a packet whose checksum the device is to complete.
func pseudo(p []byte, proto byte, l4 int) uint16 {
	var s uint32 = uint32(proto) + uint32(l4)
	for i := 12; i < 20; i += 2 {
		s += uint32(binary.BigEndian.Uint16(p[i:]))
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}
