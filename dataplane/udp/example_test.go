package udp_test

import (
	"context"
	"encoding/binary"
	"log"
	"net"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/dataplane/tun"
	"github.com/gsoplane/gsoplane/dataplane/udp"
	"github.com/gsoplane/gsoplane/txqueue"
)

// Wire the two halves of a tunnel by hand between a TUN queue and a UDP
// socket connected to the peer, with a 16-byte header of one's own, as a
// VPN with its own framing would (dataplane/tunnel does this for one
// peer or several, with the fast defaults; SinkConfig.Peers and
// ReceiverConfig.Peers route to several on an unconnected socket). It
// needs root and a peer, so it only compiles here.
func ExampleNewSink() {
	dev, err := tun.Open(tun.Config{Name: "vpn0", MTU: 1440, Offload: true})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	conn, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: net.IPv4(198, 18, 100, 2), Port: 51820})
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	var counter uint64
	seal := func(dgrams [][]byte, _ []int) { // header: type 4, index 0, a counter; one peer
		for _, d := range dgrams {
			binary.LittleEndian.PutUint32(d, 4)
			binary.LittleEndian.PutUint64(d[8:], counter)
			counter++
		}
	}
	open := func(dgrams [][]byte, _ []int, verdicts []udp.Verdict) {
		for i, d := range dgrams {
			if binary.LittleEndian.Uint32(d) != 4 {
				verdicts[i] = udp.DropMalformed
			}
		}
	}
	sink, err := udp.NewSink(conn, udp.SinkConfig{Frames: 2048, FrameSize: 16 + 1440, Headroom: 16, Seal: seal})
	if err != nil {
		log.Fatal(err)
	}
	recv, err := udp.NewReceiver(conn, udp.ReceiverConfig{Headroom: 16, Open: open})
	if err != nil {
		log.Fatal(err)
	}
	size := txqueue.Truesize(sink.FrameSize())
	budget, _ := txqueue.NewBudget(txqueue.BudgetConfig{Burst: 64 * size, Limit: 1024 * size})
	queue, _ := txqueue.NewQueue[frame.Frame](txqueue.QueueConfig{Policy: txqueue.Block, Packets: 2048, Bytes: 2048 * size})
	q := dev.Queues()[0]
	fwd, err := pipeline.NewForwarder(pipeline.ForwarderConfig{Source: q, HeaderSize: dev.HeaderSize(),
		Sink: sink, FrameSize: sink.FrameSize(), Budget: budget, Queue: queue})
	if err != nil {
		log.Fatal(err)
	}
	ret, err := pipeline.NewReturnPath(pipeline.ReturnConfig{Receiver: recv, Writer: q,
		HeaderSize: dev.HeaderSize(), TCP: true, UDP: true})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ret.Run(ctx) // UDP_GRO datagrams → Open → GRO → TUN
	fwd.Run(ctx)    // TUN → segments → Seal → UDP_SEGMENT datagrams; both return promptly on cancel
	queue.Close()   // releases what is still charged
}
