package tun_test

import (
	"fmt"
	"log"

	"github.com/gsoplane/gsoplane/dataplane/tun"
	"github.com/gsoplane/gsoplane/segment"
)

// Open a TUN device with offloads and read a batch of super-packets,
// each behind its virtio-net header. It needs CAP_NET_ADMIN, so it only
// compiles here.
func ExampleOpen() {
	dev, err := tun.Open(tun.Config{Name: "tun0", MTU: 1420, Offload: true})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	fmt.Println("offloads:", dev.Offloads()) // csum,tso4,tso6,tso_ecn,uso4,uso6 on Linux 6.2+

	q := dev.Queues()[0]
	bufs, sizes := make([][]byte, 32), make([]int, 32)
	for i := range bufs {
		bufs[i] = make([]byte, dev.HeaderSize()+65535)
	}
	n, err := q.Read(bufs, sizes, 0) // blocks until a packet comes; SetReadDeadline wakes it
	if err != nil {
		log.Fatal(err)
	}
	for i, b := range bufs[:n] {
		h, err := segment.DecodeHeader(b[:sizes[i]], dev.HeaderSize())
		if err != nil {
			continue
		}
		fmt.Printf("%v gso_size %d\n", h.GSOType, h.GSOSize)
	}
}
