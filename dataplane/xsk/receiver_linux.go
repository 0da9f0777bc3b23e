package xsk

import (
	"encoding/binary"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/pipeline"
)

// rxWait bounds one Receive's wait, so that the return path notices that
// its context ended.
const rxWait = 10 * time.Millisecond

// receiver is a socket's receive side as a pipeline.Receiver.
type receiver struct {
	x     *Socket
	addrs []uint64 // the frames of the last Receive, given back by the next
}

var _ pipeline.Receiver = (*receiver)(nil)

// Receiver returns the socket's receive side as a pipeline.Receiver: each
// Receive gives the frames of the previous one back to the kernel (fill
// ring), then returns the Ethernet frames waiting, waiting up to 10 ms
// for one. A frame whose EtherType is not IPv4 or IPv6, or does not match
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
	if n == 0 {
		if _, err := r.x.waitRX(rxWait); err != nil {
			r.addrs = r.addrs[:0]
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
