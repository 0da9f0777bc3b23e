package tunnel

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"github.com/gsoplane/gsoplane/dataplane/frame"
)

// recorder is a queue that keeps what is written to it, and fails the
// write of packet failAt (counting from its first write) if set.
type recorder struct {
	got    [][]byte
	failAt int
}

var errRefused = errors.New("refused")

func (r *recorder) write(pkts [][]byte) (int, error) {
	for i, p := range pkts {
		if r.failAt > 0 && len(r.got)+1 == r.failAt {
			return i, errRefused
		}
		r.got = append(r.got, p)
	}
	return len(pkts), nil
}

func (r *recorder) Write(bufs [][]byte, offset int) (int, error) {
	out := make([][]byte, len(bufs))
	for i, b := range bufs {
		out[i] = b[offset:]
	}
	return r.write(out)
}

func (r *recorder) WriteVectors(pkts [][][]byte) (int, error) {
	out := make([][]byte, len(pkts))
	for i, p := range pkts {
		out[i] = slices.Concat(p...)
	}
	return r.write(out)
}

const testHdr = 12 // a virtio-net header

// flowPacket is a virtio-net header and an IPv4 (or IPv6) TCP packet of
// flow f, numbered n in its payload; frag makes it an IPv4 fragment
// past the first.
func flowPacket(f int, n byte, v6, frag bool) []byte {
	var ip []byte
	if v6 {
		ip = make([]byte, 40+20+1)
		ip[0], ip[6] = 0x60, 6
		ip[23], ip[39] = 1, 2
	} else {
		ip = make([]byte, 20+20+1)
		ip[0], ip[9] = 0x45, 6
		ip[15], ip[19] = 1, 2
		if frag {
			binary.BigEndian.PutUint16(ip[6:], 100)
		}
	}
	l4 := ip[len(ip)-21:]
	binary.BigEndian.PutUint16(l4, uint16(40000+f))
	binary.BigEndian.PutUint16(l4[2:], 443)
	ip[len(ip)-1] = n
	return append(make([]byte, testHdr), ip...)
}

// Every flow goes into one queue, in order, the flows spread over the
// queues; IPv4 fragments (no ports) go by their addresses. Write and
// WriteVectors pick alike.
func TestFlowWriter(t *testing.T) {
	for _, vectors := range []bool{false, true} {
		qs := []*recorder{{}, {}, {}}
		w := &flowWriter{hdr: testHdr}
		for _, q := range qs {
			w.queues = append(w.queues, q)
		}
		var pkts [][]byte
		for n := range byte(8) {
			for f := range 32 {
				pkts = append(pkts, flowPacket(f, n, f%2 == 1, false))
			}
			pkts = append(pkts, flowPacket(0, n, false, true), flowPacket(1, n, false, true))
		}
		written := write(t, w, pkts, vectors)
		if written != len(pkts) {
			t.Fatalf("vectors %v: wrote %d of %d", vectors, written, len(pkts))
		}
		queueOf := map[string]int{}
		for qi, q := range qs {
			if len(q.got) == 0 {
				t.Errorf("vectors %v: queue %d got nothing", vectors, qi)
			}
			next := map[string]byte{}
			for _, p := range q.got {
				flow, n := string(p[:len(p)-1]), p[len(p)-1]
				if prev, ok := queueOf[flow]; ok && prev != qi {
					t.Errorf("vectors %v: a flow on queues %d and %d", vectors, prev, qi)
				}
				queueOf[flow] = qi
				if n != next[flow] {
					t.Errorf("vectors %v: queue %d: packet %d of a flow, want %d", vectors, qi, n, next[flow])
				}
				next[flow] = n + 1
			}
		}
		frag0, frag1 := string(flowPacket(0, 0, false, true)[:testHdr+40]), string(flowPacket(1, 0, false, true)[:testHdr+40])
		if queueOf[frag0] != queueOf[frag1] {
			t.Errorf("vectors %v: fragments of one pair of addresses on queues %d and %d", vectors, queueOf[frag0], queueOf[frag1])
		}
	}
}

// write writes pkts through w, whole or in pieces (the header apart,
// as a coalescer leaves it; pick reads only the first piece, which
// holds the IP and TCP headers).
func write(t *testing.T, w *flowWriter, pkts [][]byte, vectors bool) int {
	t.Helper()
	var n int
	var err error
	if vectors {
		vecs := make([][][]byte, len(pkts))
		for i, p := range pkts {
			vecs[i] = [][]byte{p[:len(p)-1], p[len(p)-1:]}
		}
		n, err = w.WriteVectors(vecs)
	} else {
		bufs := make([][]byte, len(pkts))
		for i, p := range pkts {
			bufs[i] = append([]byte{0xee, 0xee}, p...) // at an offset
		}
		n, err = w.Write(bufs, 2)
	}
	if err != nil && !errors.Is(err, errRefused) {
		t.Fatal(err)
	}
	return n
}

// A queue's refusal stops the write there: n counts the packets written
// before the refused one, across queues, and nothing after it is tried.
func TestFlowWriterError(t *testing.T) {
	for _, vectors := range []bool{false, true} {
		qs := []*recorder{{}, {}}
		w := &flowWriter{hdr: testHdr, queues: []frame.VectorWriter{qs[0], qs[1]}}
		var pkts [][]byte
		for f := range 16 {
			pkts = append(pkts, flowPacket(f, 0, false, false))
		}
		fail := w.pick(pkts[5][testHdr:])
		qs[fail].failAt = 1 + countBefore(w, pkts[:5], fail)
		n := write(t, w, pkts, vectors)
		if n != 5 || len(qs[0].got)+len(qs[1].got) != 5 {
			t.Errorf("vectors %v: wrote %d (%d and %d on the queues), want the 5 before the refused one", vectors, n, len(qs[0].got), len(qs[1].got))
		}
	}
}

// countBefore counts the packets of pkts that go to queue q.
func countBefore(w *flowWriter, pkts [][]byte, q int) int {
	n := 0
	for _, p := range pkts {
		if w.pick(p[testHdr:]) == q {
			n++
		}
	}
	return n
}

// Picking a queue reads only what is there: short, empty or garbled
// packets go to some queue without a panic.
func TestFlowWriterShort(t *testing.T) {
	w := &flowWriter{hdr: testHdr, queues: []frame.VectorWriter{&recorder{}, &recorder{}}}
	full := flowPacket(3, 0, false, false)[testHdr:]
	full6 := flowPacket(3, 0, true, false)[testHdr:]
	for _, p := range [][]byte{nil, {0x45}, full[:20], full[:23], {0x4f, 0, 0, 0}, full6[:40], full6[:42]} {
		if q := w.pick(p); q < 0 || q > 1 {
			t.Errorf("%x: queue %d", p, q)
		}
	}
}

// Writing through the flow writer does not allocate.
func TestFlowWriterAllocs(t *testing.T) {
	w := &flowWriter{hdr: testHdr, queues: []frame.VectorWriter{discard{}, discard{}}}
	pkts := [][]byte{flowPacket(1, 0, false, false), flowPacket(2, 0, true, false), flowPacket(3, 0, false, false)}
	vecs := [][][]byte{{pkts[0]}, {pkts[1]}, {pkts[2]}}
	if a := testing.AllocsPerRun(100, func() { w.Write(pkts, 0); w.WriteVectors(vecs) }); a != 0 {
		t.Errorf("%v allocations per write", a)
	}
}

type discard struct{}

func (discard) Write(bufs [][]byte, _ int) (int, error)   { return len(bufs), nil }
func (discard) WriteVectors(pkts [][][]byte) (int, error) { return len(pkts), nil }
