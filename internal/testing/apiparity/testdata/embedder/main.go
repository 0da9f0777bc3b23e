// Command embedder embeds the ports and the gateway through their public
// API and reports which of them this system has. TestEmbedderBuilds
// builds it for systems other than Linux, where every part reports that
// it is not supported but the program must still compile.
package main

import (
	"errors"
	"fmt"
	"log"
	"net"
	"net/netip"
	"os"

	"github.com/gsoplane/gsoplane/dataplane"
	"github.com/gsoplane/gsoplane/dataplane/afpacket"
	"github.com/gsoplane/gsoplane/dataplane/tun"
	"github.com/gsoplane/gsoplane/dataplane/udp"
	"github.com/gsoplane/gsoplane/dataplane/xsk"
)

// nic is the interface the ports and the gateway open.
const nic = "eth0"

func main() {
	parts := []struct {
		name string
		open func() error
	}{
		{"TUN device", openTUN},
		{"gateway", openGateway},
		{"AF_XDP port", openXDP},
		{"AF_PACKET port", openPacket},
		{"UDP tunnel", openUDP},
	}
	failed := false
	for _, p := range parts {
		switch err := p.open(); {
		case errors.Is(err, errors.ErrUnsupported):
			fmt.Printf("%s: not on this system (%v)\n", p.name, err)
		case err != nil:
			log.Printf("%s: %v", p.name, err)
			failed = true
		default:
			fmt.Printf("%s: ok\n", p.name)
		}
	}
	if failed {
		os.Exit(1)
	}
}

func openTUN() error {
	dev, err := tun.Open(tun.Config{Name: "embed0", Offload: true})
	if err != nil {
		return err
	}
	fmt.Printf("%s (index %d): offloads %v, %d-byte headers, %d queues\n",
		dev.Name(), dev.Index(), dev.Offloads(), dev.HeaderSize(), len(dev.Queues()))
	return dev.Close()
}

func openGateway() error {
	gw, err := dataplane.OpenGateway(dataplane.GatewayConfig{
		TUN:    dataplane.TUNOptions{Name: "embed1"},
		NIC:    nic,
		Routes: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")},
	})
	if err != nil {
		return err
	}
	fmt.Printf("gateway on %s (index %d, %d queues): %d segments forwarded\n",
		gw.Port(), gw.Ifindex(), gw.Queues(), gw.Stats().Forward.Transmitted)
	return gw.Close()
}

func openXDP() error {
	p, err := xsk.Open(xsk.Config{Ifname: nic})
	if err != nil {
		return err
	}
	for _, x := range p.Sockets() {
		sink, err := xsk.NewSink(x, p.Ifindex(), netip.Addr{})
		if err != nil {
			p.Close()
			return err
		}
		fmt.Printf("AF_XDP socket: %d frames of %d bytes, %d received\n", x.NumFrames(), x.FrameSize(), x.Stats().RX)
		sink.Close()
	}
	return p.Close()
}

func openPacket() error {
	p, err := afpacket.Open(afpacket.Config{Ifname: nic})
	if err != nil {
		return err
	}
	for _, s := range p.Sockets() {
		sink, err := afpacket.NewSink(s, p.Ifindex(), netip.Addr{}, afpacket.GSOModeAuto)
		if err != nil {
			p.Close()
			return err
		}
		fmt.Printf("AF_PACKET socket %d: mode %v, %d received\n", s.Index(), sink.Mode(), s.Stats().RX)
		sink.Close()
	}
	return p.Close()
}

func openUDP() error {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return err
	}
	defer conn.Close()
	sink, err := udp.NewSink(conn, udp.SinkConfig{Headroom: 16})
	if err != nil {
		return err
	}
	recv, err := udp.NewReceiver(conn, udp.ReceiverConfig{Headroom: 16})
	if err != nil {
		return err
	}
	fmt.Printf("UDP tunnel: %d frames of %d bytes, UDP_SEGMENT %v, UDP_GRO %v\n",
		sink.Frames(), sink.FrameSize(), sink.Stats().GSO, recv.Stats().GRO)
	return nil
}
