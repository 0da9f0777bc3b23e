package afpacket

import (
	"testing"

	"github.com/gsoplane/gsoplane/segment"
)

// FuzzReceiveFrame feeds the receiver's frame check whatever the kernel
// might hand over: it never panics, returns the whole frame, an empty
// packet, or nil for a truncated one, and a header whose csum_start lies
// in the packet.
func FuzzReceiveFrame(f *testing.F) {
	ok := udpFrame(make([]byte, 6), make([]byte, 6), testAddrPort(testSrc4, 1), testAddrPort(testDst4, 2), 80)
	f.Add(ok, false)
	gso := append([]byte(nil), ok...)
	(segment.Header{Flags: segment.FlagNeedsCsum, GSOType: segment.GSOTCPv4, GSOSize: 10, CsumStart: 34, CsumOffset: 16, HdrLen: 60}).Encode(gso, vnetHdrLen)
	f.Add(gso, false)
	f.Add(ok[:Headroom+1], true)
	f.Add([]byte{}, false)
	f.Fuzz(func(t *testing.T, data []byte, trunc bool) {
		r := &receiver{s: &Socket{}, bufs: [][]byte{make([]byte, rxBufSize)}, hdrs: make([]segment.Header, 1)}
		l := copy(r.bufs[0], data)
		fr := r.frame(0, r.bufs[0], l, trunc)
		h := r.hdrs[0]
		switch {
		case fr == nil:
			if !trunc || h != (segment.Header{}) {
				t.Fatalf("nil frame (truncated %v), header %+v", trunc, h)
			}
		case len(fr) == Headroom:
			if h != (segment.Header{}) {
				t.Fatalf("empty packet with header %+v", h)
			}
		case len(fr) == l && l > Headroom && !trunc:
			pkt := fr[Headroom:]
			if h.NeedsCsum() && int(h.CsumStart) >= len(pkt) || int(h.HdrLen) > len(pkt) {
				t.Fatalf("header %+v for a %d-byte packet", h, len(pkt))
			}
		default:
			t.Fatalf("frame of %d bytes from %d (truncated %v)", len(fr), l, trunc)
		}
	})
}
