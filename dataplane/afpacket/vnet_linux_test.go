package afpacket

import (
	"testing"

	"github.com/gsoplane/gsoplane/internal/testing/dirtybuf"
	"github.com/gsoplane/gsoplane/segment"
)

// TestVnetHeader: the sink's virtio-net header counts its offsets from
// the Ethernet header, caps hdr_len at the frame, and is the same
// whatever the frame held before.
func TestVnetHeader(t *testing.T) {
	tso := segment.Header{Flags: segment.FlagNeedsCsum, GSOType: segment.GSOTCPv4, HdrLen: 52, GSOSize: 1448, CsumStart: 20, CsumOffset: 16}
	stale := segment.Header{Flags: segment.FlagNeedsCsum, GSOType: segment.GSOUDPL4, HdrLen: 0xfff, GSOSize: 0xeee, CsumStart: 0xddd, CsumOffset: 6}
	for _, c := range []struct {
		name string
		h    segment.Header
		n    int
		want segment.Header
	}{
		{"tso", tso, 3000, segment.Header{Flags: segment.FlagNeedsCsum, GSOType: segment.GSOTCPv4, HdrLen: 66, GSOSize: 1448, CsumStart: 34, CsumOffset: 16}},
		{"hdr_len capped", tso, 40, segment.Header{Flags: segment.FlagNeedsCsum, GSOType: segment.GSOTCPv4, HdrLen: 54, GSOSize: 1448, CsumStart: 34, CsumOffset: 16}},
		{"partial", segment.Header{Flags: segment.FlagNeedsCsum, CsumStart: 40, CsumOffset: 6}, 100, segment.Header{Flags: segment.FlagNeedsCsum, CsumStart: 54, CsumOffset: 6}},
		{"plain", segment.Header{}, 100, segment.Header{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			prev := func(bufs [][]byte) [][]byte {
				putVnetHeader(bufs[0], stale, c.n)
				return bufs
			}
			out := dirtybuf.Check(t, dirtybuf.New(1, Headroom+c.n), prev, func(bufs [][]byte) [][]byte {
				putVnetHeader(bufs[0], c.h, c.n)
				return [][]byte{bufs[0][:vnetHdrLen]}
			})
			if got, err := segment.DecodeHeader(out[0], vnetHdrLen); err != nil || got != c.want {
				t.Fatalf("header %+v (%v), want %+v", got, err, c.want)
			}
		})
	}
}
