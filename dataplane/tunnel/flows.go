package tunnel

import (
	"encoding/binary"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/internal/iphdr"
)

// flowWriter is the return path's writer on a TUN device with several
// queues: each packet goes into the queue its flow hashes to, so that a
// flow is written on one queue, in order (one goroutine writes them
// all). The device's flow steering then reads the flow's packets the
// other way on that same queue.
type flowWriter struct {
	queues []frame.VectorWriter
	hdr    int // the virtio-net header's size, before each packet
}

var _ frame.VectorWriter = (*flowWriter)(nil)

// Write writes bufs[i][offset:] (a virtio-net header, then the packet)
// in order, each run of packets of one queue in one call.
func (w *flowWriter) Write(bufs [][]byte, offset int) (int, error) {
	return writeRuns(bufs, func(b []byte) int { return w.pick(b[min(len(b), offset+w.hdr):]) },
		func(q int, run [][]byte) (int, error) { return w.queues[q].Write(run, offset) })
}

// WriteVectors writes packets in pieces, the first piece a virtio-net
// header and the packet's headers, as Write does.
func (w *flowWriter) WriteVectors(pkts [][][]byte) (int, error) {
	return writeRuns(pkts, func(p [][]byte) int { return w.pick(p[0][min(len(p[0]), w.hdr):]) },
		func(q int, run [][][]byte) (int, error) { return w.queues[q].WriteVectors(run) })
}

// writeRuns writes pkts in order, each run of consecutive packets that
// pick the same queue with one call of write; on error, pkts[n] is the
// packet that failed.
func writeRuns[P any](pkts []P, pick func(P) int, write func(q int, run []P) (int, error)) (n int, err error) {
	if len(pkts) == 0 {
		return 0, nil
	}
	q := pick(pkts[0]) // each packet is hashed once
	for len(pkts) > 0 {
		end, next := 1, -1
		for ; end < len(pkts); end++ {
			if next = pick(pkts[end]); next != q {
				break
			}
		}
		k, err := write(q, pkts[:end])
		n += k
		if err != nil {
			return n, err
		}
		pkts, q = pkts[end:], next
	}
	return n, nil
}

// pick returns the queue of an IP packet's flow, from a hash (FNV-1a) of
// its addresses, protocol and, for TCP and UDP but a fragment, ports:
// the 5-tuple, as the kernel's own flow hash takes it.
func (w *flowWriter) pick(pkt []byte) int {
	h := uint32(2166136261)
	add := func(b []byte) {
		for _, c := range b {
			h = (h ^ uint32(c)) * 16777619
		}
	}
	proto, ports := transport(pkt)
	add(iphdr.Addrs(pkt))
	add(proto)
	add(ports)
	return int(h % uint32(len(w.queues)))
}

// transport returns an IP packet's protocol byte and, for TCP and UDP
// but a fragment, its ports; nothing if pkt holds no whole fixed IP
// header.
func transport(pkt []byte) (proto, ports []byte) {
	hl := iphdr.HeaderLen(pkt)
	switch {
	case hl < iphdr.IPv4Len: // none, or a bad IHL
		return nil, nil
	case iphdr.Version(pkt) == 4:
		proto = pkt[9:10]
		if binary.BigEndian.Uint16(pkt[6:])&0x3fff != 0 { // MF or an offset: a fragment
			return proto, nil
		}
	default:
		proto = pkt[6:7] // an extension header is taken as the protocol: no ports
	}
	if (proto[0] == 6 || proto[0] == 17) && len(pkt) >= hl+4 {
		ports = pkt[hl : hl+4]
	}
	return proto, ports
}
