package xsk

import (
	"encoding/binary"

	"github.com/gsoplane/gsoplane/dataplane/pipeline"
)

// receiver is a socket's receive side as a pipeline.Receiver.
type receiver struct {
	x     *Socket
	addrs []uint64 // the frames of the last Receive, given back by the next
}

var _ pipeline.Receiver = (*receiver)(nil)

// Receiver returns the socket's receive side as a pipeline.Receiver: each
// Receive gives the frames of the previous one back to the kernel (fill
// ring), then returns the Ethernet frames waiting, waiting (through the
// Go runtime's netpoller) until one comes, the port stops receiving
// (Port.StopReceive: then it returns none) or the port is closed. A frame whose EtherType is not IPv4 or IPv6, or does not match
// its IP version, comes back with an empty packet (the return path counts
// it as invalid). Use one Receiver per socket, from one goroutine.
func (x *Socket) Receiver() pipeline.Receiver { return &receiver{x: x} }

// Headroom is the Ethernet header.
func (r *receiver) Headroom() int { return ethHdrLen }

func (r *receiver) Receive(frames [][]byte) (int, error) {
	r.x.recycle(r.addrs)
	if cap(r.addrs) < len(frames) {
		r.addrs = make([]uint64, len(frames))
	}
	r.addrs = r.addrs[:len(frames)]
	n := r.x.receive(frames, r.addrs)
	for n == 0 {
		if err := r.x.waitRX(); err != nil {
			r.addrs = r.addrs[:0]
			if err == errStopped {
				return 0, nil
			}
			return 0, err
		}
		n = r.x.receive(frames, r.addrs)
	}
	r.addrs = r.addrs[:n]
	for i, f := range frames[:n] {
		if !ipFrame(f) {
			frames[i] = f[:ethHdrLen] // within the UMEM frame: an empty packet
		}
	}
	return n, nil
}

// ipFrame reports whether an Ethernet frame carries IPv4 or IPv6 and its
// EtherType says the same as the IP version.
func ipFrame(f []byte) bool {
	if len(f) <= ethHdrLen {
		return false
	}
	switch binary.BigEndian.Uint16(f[12:14]) {
	case etherIPv4:
		return f[ethHdrLen]>>4 == 4
	case etherIPv6:
		return f[ethHdrLen]>>4 == 6
	}
	return false
}
