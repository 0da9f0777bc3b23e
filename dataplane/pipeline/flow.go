package pipeline

import (
	"encoding/binary"

	"github.com/gsoplane/gsoplane/segment"
)

// flowKey hashes a packet's addresses, protocol and ports (its 5-tuple)
// into the flow key the budget's per-flow limit uses.
func flowKey(pkt []byte, l segment.Layout) uint64 {
	addrs := pkt[12:20]
	if l.IPv6() {
		addrs = pkt[8:40]
	}
	h := uint64(l.Proto()) * 0x9e3779b97f4a7c15
	for len(addrs) >= 8 {
		h = mix(h ^ binary.LittleEndian.Uint64(addrs))
		addrs = addrs[8:]
	}
	if len(addrs) > 0 {
		h = mix(h ^ uint64(binary.LittleEndian.Uint32(addrs)))
	}
	if l.L4Len() > 0 {
		h = mix(h ^ uint64(binary.LittleEndian.Uint32(pkt[l.L3Len():])))
	}
	return h
}

// mix is a 64-bit finalizer (from SplitMix64).
func mix(x uint64) uint64 {
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
