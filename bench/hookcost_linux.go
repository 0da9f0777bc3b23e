package main

// The cost of a hook measured in isolation: the forwarder's call (through
// a pipeline.Hook function value, on a 92-byte IPv4/UDP segment) timed
// over millions of calls. On a 2-core machine shared with the sender, the
// end-to-end pps of the hook rows varies by several percent from run to
// run, far more than a few nanoseconds per segment can move it; this
// bounds what the hook can cost instead: at r segments per second, a hook
// of c ns per call takes at most r·c·1e-9 of the producer's time, and so
// of its rate.

import (
	"runtime"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/dataplane/pipeline"
)

// hookUnderTest holds the hook being timed: called through a package
// variable, it cannot be inlined or dropped.
var hookUnderTest pipeline.Hook

// hookCost returns the minimum, over several rounds, of the mean time per
// call of h in nanoseconds (nil: the forwarder's nil check only).
func hookCost(h pipeline.Hook) float64 {
	pkt := smallPacket(hookPayload, hookSrcPort)
	hookUnderTest = h
	const calls, rounds = 10_000_000, 5
	best := time.Duration(1 << 62)
	for range rounds {
		pass := 0
		start := time.Now()
		for range calls {
			if f := hookUnderTest; f == nil || f(pkt) {
				pass++
			}
		}
		best = min(best, time.Since(start))
		runtime.KeepAlive(pass)
	}
	return float64(best.Nanoseconds()) / calls
}

// hookSrcPort is the first source port of the generated flows.
const hookSrcPort = 40000

// smallPacket builds an IPv4/UDP packet from the application's address,
// port srcPort, to B's discard port with payload bytes of payload (zeros,
// no UDP checksum), as the small-packet flood sends.
func smallPacket(payload int, srcPort uint16) []byte {
	pkt := make([]byte, header.IPv4MinimumSize+header.UDPMinimumSize+payload)
	ip := header.IPv4(pkt)
	ip.Encode(&header.IPv4Fields{
		TotalLength: uint16(len(pkt)), TTL: 64, Protocol: uint8(header.UDPProtocolNumber),
		SrcAddr: tcpip.AddrFrom4(app4.As4()), DstAddr: tcpip.AddrFrom4(srv4.As4()),
	})
	ip.SetChecksum(^ip.CalculateChecksum())
	header.UDP(pkt[header.IPv4MinimumSize:]).Encode(&header.UDPFields{SrcPort: srcPort, DstPort: hookPort, Length: uint16(header.UDPMinimumSize + payload)})
	return pkt
}
