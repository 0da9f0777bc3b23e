package xsk

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/internal/testing/dirtybuf"
)

// TestTXMetadata: the TX metadata in front of a frame asks for checksum
// offload at csum_start and csum_offset and is the same whatever the
// UMEM held there before.
func TestTXMetadata(t *testing.T) {
	const addr, frame = 4096, 4096
	stale := make([]byte, txMetadataLen)
	for i := range stale {
		stale[i] = 0xff
	}
	x := &Socket{}
	out := dirtybuf.Check(t, dirtybuf.New(1, 2*frame), dirtybuf.Leave(addr, stale), func(bufs [][]byte) [][]byte {
		x.umem = bufs[0]
		x.txMetadata(addr, 34<<16|16)
		return [][]byte{bufs[0][addr : addr+txMetadataLen]}
	})
	m := out[0]
	if binary.NativeEndian.Uint64(m) != unix.XDP_TXMD_FLAGS_CHECKSUM || binary.NativeEndian.Uint16(m[8:]) != 34 || binary.NativeEndian.Uint16(m[10:]) != 16 {
		t.Fatalf("metadata % x", m)
	}
}
