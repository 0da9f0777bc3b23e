package segment_test

import (
	"errors"
	"fmt"

	"github.com/gsoplane/gsoplane/segment"
)

// Cut a TCP super-packet, as a TUN device with TSO hands it over (a
// partial checksum, gso_size 1448), into segments with full checksums,
// each behind headroom for a virtio-net header.
func ExampleSplit() {
	pkt := tcp4(10000, 0x18) // 10000 bytes of payload, ACK|PSH
	h := segment.Header{
		Flags: segment.FlagNeedsCsum, GSOType: segment.GSOTCPv4, HdrLen: 40, GSOSize: 1448,
		CsumStart: 20, CsumOffset: 16,
	}
	bufs := make([][]byte, 16)
	for i := range bufs {
		bufs[i] = make([]byte, segment.HeaderSize+1500)
	}
	sizes := make([]int, len(bufs))
	n, err := segment.Split(pkt, h, bufs, sizes, segment.HeaderSize)
	var be *segment.BufferError
	switch {
	case errors.As(err, &be):
		fmt.Println("need", be.Need, "buffers of", be.Size, "bytes")
	case err != nil:
		fmt.Println("drop:", err)
	}
	fmt.Println(n, "segments:", sizes[:n])
	// Output:
	// 7 segments: [1488 1488 1488 1488 1488 1488 1352]
}

// Merge the segments of a flow back into one super-packet, as the return
// path does before writing it into a TUN device: the output is written
// with one writev(2), the virtio-net header first.
func ExampleCoalescer() {
	pkt := tcp4(10000, 0x18)
	h := segment.Header{
		Flags: segment.FlagNeedsCsum, GSOType: segment.GSOTCPv4, HdrLen: 40, GSOSize: 1448,
		CsumStart: 20, CsumOffset: 16,
	}
	bufs := make([][]byte, 16)
	for i := range bufs {
		bufs[i] = make([]byte, segment.HeaderSize+1500)
	}
	sizes := make([]int, len(bufs))
	n, err := segment.Split(pkt, h, bufs, sizes, segment.HeaderSize)
	if err != nil {
		panic(err)
	}

	gro, err := segment.NewCoalescer(segment.CoalescerConfig{HeaderSize: segment.HeaderSize, TCP: true, MaxBatch: 64})
	if err != nil {
		panic(err)
	}
	out, err := gro.Coalesce(bufs[:n], sizes[:n], segment.HeaderSize)
	if err != nil {
		panic(err)
	}
	for _, pieces := range out {
		merged, _ := segment.DecodeHeader(pieces[0], segment.HeaderSize)
		total := 0
		for _, p := range pieces {
			total += len(p)
		}
		fmt.Printf("%d pieces, %d bytes after the header, %v gso_size %d\n", len(pieces), total-segment.HeaderSize, merged.GSOType, merged.GSOSize)
	}
	// Output:
	// 7 pieces, 10040 bytes after the header, tcpv4 gso_size 1448
}
