package pipeline

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"sync/atomic"

	"github.com/gsoplane/gsoplane/segment"
)

// returnBatch is how many frames the return path takes per Receive.
const returnBatch = 64

// Ethernet framing the return path strips.
const (
	ethHdrLen = 14
	etherIPv4 = 0x0800
	etherIPv6 = 0x86dd
)

// A Receiver is a port's receive side. Receive returns up to len(frames)
// received Ethernet frames, views into the port's memory that stay valid
// until the next Receive, which gives them back to the port. It waits a
// short while for frames and may return 0 with a nil error; an error
// wrapping net.ErrClosed means the port was closed. xsk.Socket's Receiver
// is one.
type Receiver interface {
	Receive(frames [][]byte) (int, error)
}

// A Writer writes packets, bufs[i][offset:] each, virtio-net header
// first, in order, and returns how many it wrote; on error, bufs[n] is
// the packet that failed. tun.Queue is one.
type Writer interface {
	Write(bufs [][]byte, offset int) (int, error)
}

// ReturnStats counts the return path.
type ReturnStats struct {
	Packets uint64 // written
	Bytes   uint64 // IP bytes written
	Drops   Drops  // DropInvalid: not a valid IP packet; DropWriteError: refused by the writer
}

// Add returns the field-by-field sum of s and o.
func (s ReturnStats) Add(o ReturnStats) ReturnStats {
	s.Packets += o.Packets
	s.Bytes += o.Bytes
	s.Drops.add(o.Drops)
	return s
}

// ReturnPath moves the IP packets of the frames a Receiver hands over into
// a Writer, one write per packet (no GRO yet). The virtio-net header is
// written over the end of the Ethernet header, so no packet byte is
// copied.
type ReturnPath struct {
	rx        Receiver
	w         Writer
	hdrSize   int
	packets   atomic.Uint64
	bytes     atomic.Uint64
	invalid   atomic.Uint64
	writeErrs atomic.Uint64
}

// NewReturnPath returns a return path from rx into w, whose packets carry
// virtio-net headers of hdrSize bytes (segment.HeaderSize or
// segment.HeaderSizeMrg): each packet is written as bufs[i][0:], the
// header (all zero) first.
func NewReturnPath(rx Receiver, w Writer, hdrSize int) *ReturnPath {
	return &ReturnPath{rx: rx, w: w, hdrSize: hdrSize}
}

// Stats returns a snapshot of the return path's counters.
func (r *ReturnPath) Stats() ReturnStats {
	s := ReturnStats{Packets: r.packets.Load(), Bytes: r.bytes.Load()}
	s.Drops[DropInvalid] = r.invalid.Load()
	s.Drops[DropWriteError] = r.writeErrs.Load()
	return s
}

// Run moves packets until ctx ends or the receiver is closed (then it
// returns nil) or fails.
func (r *ReturnPath) Run(ctx context.Context) error {
	frames := make([][]byte, returnBatch)
	out := make([][]byte, returnBatch)
	for ctx.Err() == nil {
		n, err := r.rx.Receive(frames)
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return err
		}
		m := 0
		for _, f := range frames[:n] {
			if pkt := r.frame(f); pkt != nil {
				out[m] = pkt
				m++
			}
		}
		r.write(out[:m])
	}
	return nil
}

// frame checks one received Ethernet frame and returns the virtio-net
// header and IP packet to write, or nil to drop it. The packet is trimmed
// to its IP length (Ethernet pads short frames).
func (r *ReturnPath) frame(f []byte) []byte {
	if len(f) < ethHdrLen {
		r.invalid.Add(1)
		return nil
	}
	pkt := f[ethHdrLen:]
	switch binary.BigEndian.Uint16(f[12:14]) {
	case etherIPv4:
		if len(pkt) >= 4 {
			pkt = pkt[:min(len(pkt), int(binary.BigEndian.Uint16(pkt[2:4])))]
		}
	case etherIPv6:
		if len(pkt) >= 6 {
			pkt = pkt[:min(len(pkt), 40+int(binary.BigEndian.Uint16(pkt[4:6])))]
		}
	default:
		r.invalid.Add(1)
		return nil
	}
	if _, err := segment.Validate(pkt, segment.Header{}); err != nil {
		r.invalid.Add(1)
		return nil
	}
	hdr := f[ethHdrLen-r.hdrSize : ethHdrLen]
	clear(hdr) // no offload: the kernel checks the checksums
	return f[ethHdrLen-r.hdrSize : ethHdrLen+len(pkt)]
}

// write writes packets; a packet the writer refuses is counted and
// skipped.
func (r *ReturnPath) write(pkts [][]byte) {
	for len(pkts) > 0 {
		n, err := r.w.Write(pkts, 0)
		n = min(max(n, 0), len(pkts)) // a writer's count is not trusted
		bytes := 0
		for _, p := range pkts[:n] {
			bytes += len(p) - r.hdrSize
		}
		r.bytes.Add(uint64(bytes))
		r.packets.Add(uint64(n))
		if err == nil || n == len(pkts) {
			return
		}
		r.writeErrs.Add(1)
		pkts = pkts[n+1:]
	}
}
