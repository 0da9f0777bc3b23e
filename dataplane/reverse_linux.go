package dataplane

import (
	"context"
	"encoding/binary"
	"errors"
	"sync/atomic"
	"time"

	"github.com/gsoplane/gsoplane/segment"
)

// reverseBatch is how many frames the return path takes per Receive.
const reverseBatch = 64

// ReturnStats counts the return path (NIC to TUN).
type ReturnStats struct {
	Packets  uint64 // written to the TUN
	Bytes    uint64 // IP bytes written
	Invalid  uint64 // dropped: not a valid IP packet
	WriteErr uint64 // dropped: the TUN refused the write
}

// A PacketWriter writes packets, bufs[i][offset:] each; TUNQueue is one.
type PacketWriter interface {
	Write(bufs [][]byte, offset int) (int, error)
}

// ReturnPath moves packets the XDP program redirected to an AF_XDP socket
// into the TUN device, one write per packet (GRO coalescing is not done
// yet). The virtio-net header is written over the end of the Ethernet
// header, so no packet byte is copied.
type ReturnPath struct {
	x          *XSK
	tun        PacketWriter
	hdrSize    int
	packets    atomic.Uint64
	bytes      atomic.Uint64
	invalid    atomic.Uint64
	writeError atomic.Uint64
}

// NewReturnPath returns a return path from x into tun, whose packets carry
// virtio-net headers of hdrSize bytes: each packet is written as
// bufs[i][0:], the header (all zero) first. A writer that wants only the
// packet at an offset passes hdrSize as that offset.
func NewReturnPath(x *XSK, tun PacketWriter, hdrSize int) *ReturnPath {
	return &ReturnPath{x: x, tun: tun, hdrSize: hdrSize}
}

// Stats returns a snapshot of the return path's counters.
func (r *ReturnPath) Stats() ReturnStats {
	return ReturnStats{Packets: r.packets.Load(), Bytes: r.bytes.Load(), Invalid: r.invalid.Load(), WriteErr: r.writeError.Load()}
}

// Run moves packets until ctx ends or the socket is closed.
func (r *ReturnPath) Run(ctx context.Context) error {
	frames := make([][]byte, reverseBatch)
	addrs := make([]uint64, reverseBatch)
	out := make([][]byte, reverseBatch)
	for ctx.Err() == nil {
		n := r.x.Receive(frames, addrs)
		if n == 0 {
			if _, err := r.x.WaitRX(10 * time.Millisecond); err != nil {
				if errors.Is(err, ErrXDPClosed) {
					return nil
				}
				return err
			}
			continue
		}
		m := 0
		for _, f := range frames[:n] {
			if pkt := r.frame(f); pkt != nil {
				out[m] = pkt
				m++
			}
		}
		r.write(out[:m])
		r.x.Recycle(addrs[:n])
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

// write writes packets to the TUN; a packet it refuses is counted and
// skipped.
func (r *ReturnPath) write(pkts [][]byte) {
	for len(pkts) > 0 {
		n, err := r.tun.Write(pkts, 0)
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
		r.writeError.Add(1)
		pkts = pkts[n+1:]
	}
}
