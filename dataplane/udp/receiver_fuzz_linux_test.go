package udp

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"
)

// FuzzReceiverHeaders feeds the Receiver's two parsers of what recvmmsg
// wrote, the control messages (groSize) and the source address
// (parseSockaddr), any bytes: neither panics, a segment size is never
// negative, and an address is only read from a buffer long enough for its
// family's sockaddr.
func FuzzReceiverHeaders(f *testing.F) {
	gro := make([]byte, unix.CmsgSpace(4))
	binary.NativeEndian.PutUint64(gro, uint64(unix.CmsgLen(4)))
	binary.NativeEndian.PutUint32(gro[unix.CmsgLen(0)-8:], unix.SOL_UDP)
	binary.NativeEndian.PutUint32(gro[unix.CmsgLen(0)-4:], unix.UDP_GRO)
	binary.NativeEndian.PutUint32(gro[unix.CmsgLen(0):], 1400)
	in6 := make([]byte, unix.SizeofSockaddrInet6)
	binary.NativeEndian.PutUint16(in6, unix.AF_INET6)
	f.Add(gro, in6)
	f.Add(append(gro[:len(gro):len(gro)], gro...), in6[:unix.SizeofSockaddrInet4])
	f.Add([]byte{}, []byte{2, 0})
	f.Fuzz(func(t *testing.T, oob, name []byte) {
		if size := groSize(oob); size < 0 {
			t.Fatalf("segment size %d", size)
		}
		if _, ok := parseSockaddr(name); ok && len(name) < unix.SizeofSockaddrInet4 {
			t.Fatalf("an address from %d bytes", len(name))
		}
	})
}
