package pipeline_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"syscall"
	"testing"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/internal/testing/dirtybuf"
	"github.com/gsoplane/gsoplane/segment"
)

// frameReceiver hands out its frames, one batch per Receive, then says
// it is closed.
type frameReceiver struct {
	batches [][][]byte
}

func (r *frameReceiver) Headroom() int { return 14 }

func (r *frameReceiver) Receive(frames [][]byte) (int, error) {
	if len(r.batches) == 0 {
		return 0, net.ErrClosed
	}
	n := copy(frames, r.batches[0])
	r.batches = r.batches[1:]
	return n, nil
}

// refusingWriter records what it writes, flattened, and refuses every
// super-packet (a virtio-net header with a GSO type) with EINVAL, as a
// kernel without that offload does.
type refusingWriter struct {
	pkts [][]byte
}

func (w *refusingWriter) Write(bufs [][]byte, offset int) (int, error) {
	for _, b := range bufs {
		w.pkts = append(w.pkts, bytes.Clone(b[offset:]))
	}
	return len(bufs), nil
}

func (w *refusingWriter) WriteVectors(pkts [][][]byte) (int, error) {
	for i, p := range pkts {
		if p[0][1] != 0 { // gso_type
			return i, syscall.EINVAL
		}
		w.pkts = append(w.pkts, bytes.Join(p, nil))
	}
	return len(pkts), nil
}

// tcpSegments cuts a TCP super-packet into its segments, each behind 14
// bytes of headroom, as a NIC would hand them over.
func tcpSegments(t *testing.T, payload int) [][]byte {
	t.Helper()
	raw := tcpSuperPacket(payload)
	h, err := segment.DecodeHeader(raw, segment.HeaderSize)
	if err != nil {
		t.Fatal(err)
	}
	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = make([]byte, 14+1500)
	}
	sizes := make([]int, len(bufs))
	n, err := segment.Split(raw[segment.HeaderSize:], h, bufs, sizes, 14)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		bufs[i] = bufs[i][:14+sizes[i]]
	}
	return bufs[:n]
}

// TestReturnPathRefused: when the writer refuses a super-packet, its
// packets still arrive, one by one and unchanged, the refusal is counted
// and reported once, and that kind of merge stays off.
func TestReturnPathRefused(t *testing.T) {
	first, second := tcpSegments(t, 10*1448), tcpSegments(t, 4*1448)
	want := make([][]byte, 0, len(first)+len(second))
	for _, f := range append(append([][]byte{}, first...), second...) {
		want = append(want, bytes.Clone(f[14:]))
	}
	w := &refusingWriter{}
	var reports []segment.GSOType
	r, err := pipeline.NewReturnPath(pipeline.ReturnConfig{
		Receiver: &frameReceiver{batches: [][][]byte{first, second}}, Writer: w,
		HeaderSize: segment.HeaderSize, TCP: true, UDP: true,
		OnRefused: func(kind segment.GSOType, err error) {
			if !errors.Is(err, syscall.EINVAL) {
				t.Errorf("reported error %v", err)
			}
			reports = append(reports, kind)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(w.pkts) != len(want) {
		t.Fatalf("%d packets written, want %d", len(w.pkts), len(want))
	}
	for i, p := range w.pkts {
		if hdr := p[:segment.HeaderSize]; !bytes.Equal(hdr, make([]byte, segment.HeaderSize)) {
			t.Errorf("packet %d: virtio-net header %x, want zeros", i, hdr)
		}
		if !bytes.Equal(p[segment.HeaderSize:], want[i]) {
			t.Errorf("packet %d differs from the one received", i)
		}
	}
	st := r.Stats()
	if len(reports) != 1 || reports[0] != segment.GSOTCPv4 || st.Refused != 1 || st.GRO.Disabled != uint64(len(second)) {
		t.Errorf("reports %v, stats %+v: want one TCPv4 refusal, then merging off", reports, st)
	}
}

// recordingWriter records what it writes, flattened, and takes
// super-packets too.
type recordingWriter struct{ refusingWriter }

func (w *recordingWriter) WriteVectors(pkts [][][]byte) (int, error) {
	for _, p := range pkts {
		w.pkts = append(w.pkts, bytes.Join(p, nil))
	}
	return len(pkts), nil
}

// TestReturnPathDirtyFrames: what the return path writes (the virtio-net
// headers it puts in the headroom, the headers GRO rewrites) is the same
// whatever the receiver's frames held before the packets came in: with
// GRO, without, and for a packet the kernel merged, behind its header.
func TestReturnPathDirtyFrames(t *testing.T) {
	var in [][]byte
	for _, f := range tcpSegments(t, 6*1448) {
		in = append(in, f[14:])
	}
	in = append(in, udp4(300, true), udp6(200, 64), udp6(200, 64))
	raw := tcpSuperPacket(3 * 1448)
	kh, _ := segment.DecodeHeader(raw, segment.HeaderSize)
	stale := dirtybuf.Leave(1, tcpSegments(t, 40*1448)...) // another stream's frames, a byte off
	for _, c := range []struct {
		name     string
		gro      bool
		hdrSize  int
		kernel   bool
		want     int // packets written
		wantSupr uint64
	}{
		{"gro", true, segment.HeaderSize, false, 3, 2},
		{"gro/12-byte header", true, segment.HeaderSizeMrg, false, 3, 2},
		{"no gro", false, segment.HeaderSize, false, len(in), 0},
		{"kernel merged", false, segment.HeaderSizeMrg, true, len(in) + 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			pkts, hdrs := in, make([]segment.Header, len(in)+1)
			if c.kernel {
				pkts, hdrs[len(in)] = append(in[:len(in):len(in)], raw[segment.HeaderSize:]), kh
			}
			bufs := dirtybuf.New(len(pkts), 14+len(raw))
			dirtybuf.Check(t, bufs, stale, func(bufs [][]byte) [][]byte {
				frames := make([][]byte, len(pkts))
				for i, p := range pkts {
					frames[i] = bufs[i][:14+copy(bufs[i][14:], p)]
				}
				w := &recordingWriter{}
				r, err := pipeline.NewReturnPath(pipeline.ReturnConfig{
					Receiver: &headerReceiver{frameReceiver{batches: [][][]byte{frames}}, hdrs}, Writer: w,
					HeaderSize: c.hdrSize, TCP: c.gro, UDP: c.gro,
				})
				if err != nil {
					t.Fatal(err)
				}
				if err := r.Run(context.Background()); err != nil {
					t.Fatal(err)
				}
				if st := r.Stats(); len(w.pkts) != c.want || st.SuperPackets != c.wantSupr {
					t.Fatalf("%d packets written, %d of them merged; want %d, %d", len(w.pkts), st.SuperPackets, c.want, c.wantSupr)
				}
				return w.pkts
			})
		})
	}
}

// TestReturnPathConfig: GRO needs a writer that takes vectors, and room
// for the virtio-net header in front of every packet.
func TestReturnPathConfig(t *testing.T) {
	plain := struct{ frame.Writer }{&refusingWriter{}}
	for name, cfg := range map[string]pipeline.ReturnConfig{
		"GRO without vectors": {Receiver: &frameReceiver{}, Writer: plain, HeaderSize: segment.HeaderSize, TCP: true},
		"bad header size":     {Receiver: &frameReceiver{}, Writer: plain, HeaderSize: 11},
		"no receiver":         {Writer: plain, HeaderSize: segment.HeaderSize},
	} {
		if _, err := pipeline.NewReturnPath(cfg); !errors.Is(err, frame.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
}

// TestReturnPathBadIPHeader: with GRO on, the return path checks each IP
// header once, before the coalescer, which trusts that check: a packet
// whose IPv4 header checksum is bad is dropped as invalid, never counted
// by GRO nor merged, and the rest of its flow merges around the gap.
func TestReturnPathBadIPHeader(t *testing.T) {
	frames := tcpSegments(t, 4*1448)
	frames[1] = bytes.Clone(frames[1])
	frames[1][14+10] ^= 0x40 // the IPv4 header checksum
	w := &recordingWriter{}
	r, err := pipeline.NewReturnPath(pipeline.ReturnConfig{
		Receiver: &frameReceiver{batches: [][][]byte{frames}}, Writer: w,
		HeaderSize: segment.HeaderSize, TCP: true, UDP: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := r.Stats()
	if st.Drops[frame.DropInvalid] != 1 || st.Packets != 3 || st.GRO.Packets != 3 || st.GRO.BadChecksum != 0 ||
		st.SuperPackets != 1 || len(w.pkts) != 2 {
		t.Fatalf("stats %+v, %d packets written: want segment 1 dropped as invalid, 0 alone and 2-3 merged", st, len(w.pkts))
	}
	for i, p := range w.pkts {
		if segment.Checksum(p[segment.HeaderSize:segment.HeaderSize+20], 0) != 0 {
			t.Errorf("packet %d written with a bad IPv4 header checksum", i)
		}
	}
}
