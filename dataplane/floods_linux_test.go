package dataplane

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// floodHeapGrowth bounds how much the gateway's heap in use may grow
// across a flood. Neither path keeps state per flow: the forwarders'
// frames and the return path's buffers are allocated when the gateway
// opens, GRO's flow table lives for one batch and is sized at start,
// and the next-hop cache holds one destination here (the server). The
// bound leaves room for the runtime's and the test's own churn (span
// fragmentation, the transfers' buffers; tens of KiB measured), and a
// gateway that remembered each of the 30,000 flows of the smallest
// flood in as little as 35 bytes would cross it.
const floodHeapGrowth = 1 << 20

// floodGoroutines bounds how many goroutines may be left over a flood:
// none is started per flow or per packet.
const floodGoroutines = 4

// floodWindow is how many packets a flood keeps on their way to the
// gateway (sent, not yet received by its return path): below every ring
// between the sender and the gateway (a veth's 256 per queue, the
// AF_XDP sockets' RX rings), so that a slow machine slows the flood
// down instead of losing packets and the counts are exact.
const floodWindow = 512

// TestGatewayFloods floods the gateway from both sides, behind each
// port: a SYN flood from the application in A through the TUN to
// distinct ports of the server in B (whose kernel answers each with a
// RST through the return path), and distinct flows from B to the
// application's address (UDP and TCP source ports, one packet each,
// interleaved), which reach the return path's GRO with no two packets
// of a flow to merge. Every packet is counted through, nothing is
// dropped by the gateway, its heap and goroutines stay within fixed
// bounds, and a TCP stream each way afterwards is intact. The sizes
// are floodSizes: 10,000 SYNs and 20,000 flows per port in make test,
// 50,000 and 100,000 with GSOPLANE_SOAK set (make soak).
func TestGatewayFloods(t *testing.T) { forPorts(t, gatewayFloods) }

// floodSizes returns the SYNs and the flows per protocol of
// TestGatewayFloods: larger in a soak, where a run may take minutes.
func floodSizes() (syns, flows int) {
	if os.Getenv(soakEnv) != "" {
		return 50000, 50000
	}
	return 10000, 10000
}

func gatewayFloods(t *testing.T, port labPort) {
	syns, flows := floodSizes()
	lab := newGwLab(t, port.config(GatewayConfig{}))
	// Warm up both paths, so that what they allocate once is in the base.
	tcpTransfer(t, lab, labSrv4, 4<<20, false)
	tcpTransfer(t, lab, labSrv4, 4<<20, true)
	base := settledFootprint(0)
	st0 := lab.settledStats()

	start := time.Now()
	synFlood(t, lab, syns)
	synTook := time.Since(start)
	st1 := lab.settledStats()
	mid := settledFootprint(base.goroutines + floodGoroutines)

	start = time.Now()
	flowFlood(t, lab, flows)
	flowTook := time.Since(start)
	st2 := lab.settledStats()
	after := settledFootprint(base.goroutines + floodGoroutines)

	fwd, ret := st1.Forward.SuperPackets-st0.Forward.SuperPackets, st1.Return.Packets-st0.Return.Packets
	t.Logf("SYN flood: %d SYNs in %v; the gateway read %d packets from the TUN and wrote %d back (RSTs)", syns, synTook.Round(time.Millisecond), fwd, ret)
	if fwd < uint64(syns) || ret < uint64(syns) {
		t.Errorf("SYN flood of %d: the gateway read %d packets from the TUN and received %d answers", syns, fwd, ret)
	}
	got, writes := st2.Return.Packets-st1.Return.Packets, st2.Return.Writes-st1.Return.Writes
	gro := st2.Return.GRO
	t.Logf("flows: %d packets of %d flows in %v; the return path received %d, wrote %d (GRO: %d merged, %d unmerged, %d flags, %d no payload)",
		2*flows, 2*flows, flowTook.Round(time.Millisecond), got, writes, gro.Merged-st1.Return.GRO.Merged,
		gro.Unmerged-st1.Return.GRO.Unmerged, gro.Flags-st1.Return.GRO.Flags, gro.NoPayload-st1.Return.GRO.NoPayload)
	if got < uint64(2*flows) || writes < uint64(2*flows) {
		t.Errorf("%d flows: the return path received %d packets and wrote %d", 2*flows, got, writes)
	}
	if merged := gro.Merged - st1.Return.GRO.Merged; merged != 0 {
		t.Errorf("GRO merged %d packets of flows that had one packet each", merged)
	}
	if lost(st2.Forward.Drops) != 0 || st2.Return.Drops.Total() != 0 {
		t.Errorf("the gateway dropped: forward %v, return %v", st2.Forward.Drops, st2.Return.Drops)
	}
	t.Logf("footprint: before %s; after the SYN flood %s; after the flows %s; heap in use %+d KiB, %+d KiB",
		base, mid, after, (int64(mid.heap)-int64(base.heap))>>10, (int64(after.heap)-int64(base.heap))>>10)
	for _, s := range []soakSample{mid, after} {
		if err := s.exceeds(base, floodHeapGrowth, floodGoroutines); err != nil {
			t.Error(err)
		}
	}

	tcpTransfer(t, lab, labSrv4, 8<<20, false)
	tcpTransfer(t, lab, labSrv4, 8<<20, true)
}

// settledFootprint samples the process's footprint after a collection,
// once the goroutines are at most goroutines (0: at once): the
// goroutines of closed connections take a moment to return. It waits
// at most 10 s, then takes what it finds.
func settledFootprint(goroutines int) soakSample {
	for deadline := time.Now().Add(10 * time.Second); goroutines > 0 && runtime.NumGoroutine() > goroutines && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	return sample()
}

// exceeds says how s grew past base by more than heap bytes of heap in
// use or goroutines goroutines.
func (s soakSample) exceeds(base soakSample, heap uint64, goroutines int) error {
	switch {
	case s.heap > base.heap+heap:
		return fmt.Errorf("heap in use grew from %d KiB to %d KiB (bound +%d KiB)", base.heap>>10, s.heap>>10, heap>>10)
	case s.goroutines > base.goroutines+goroutines:
		return fmt.Errorf("goroutines grew from %d to %d (bound +%d)", base.goroutines, s.goroutines, goroutines)
	}
	return nil
}

// rawSocket opens a raw IPv4 socket in ns for packets with their own IP
// header (IPPROTO_RAW). IP_RECVERR makes a full TUN ring (the gateway's
// backpressure) an ENOBUFS for send to wait on, not a silent drop.
func rawSocket(t *testing.T, ns *netlab.NS) int {
	t.Helper()
	fd := -1
	netlab.Must(t, ns.Run(func() (err error) {
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
		return os.NewSyscallError("socket", err)
	}))
	t.Cleanup(func() { unix.Close(fd) })
	netlab.Must(t, os.NewSyscallError("setsockopt", unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVERR, 1)))
	return fd
}

// rawSend sends one IPv4 packet on a rawSocket, waiting while the
// kernel has no room for it.
func rawSend(fd int, pkt []byte) error {
	sa := &unix.SockaddrInet4{Addr: header.IPv4(pkt).DestinationAddress().As4()}
	for {
		err := unix.Sendto(fd, pkt, 0, sa)
		switch {
		case errors.Is(err, unix.ENOBUFS):
			time.Sleep(50 * time.Microsecond)
		case errors.Is(err, unix.EINTR):
		default:
			return err
		}
	}
}

// ip4Packet builds an IPv4 packet around the transport segment seg
// (whose checksum it fills in at off); the kernel completes the IP
// header's ID and checksum.
func ip4Packet(src, dst netip.Addr, proto tcpip.TransportProtocolNumber, seg []byte, off int) []byte {
	wireL4Checksum(src, dst, proto, seg, off)
	pkt := make([]byte, header.IPv4MinimumSize+len(seg))
	header.IPv4(pkt).Encode(&header.IPv4Fields{TotalLength: uint16(len(pkt)), TTL: 64, Protocol: uint8(proto),
		SrcAddr: wireAddr(src), DstAddr: wireAddr(dst)})
	copy(pkt[header.IPv4MinimumSize:], seg)
	return pkt
}

// tcp4Packet is an IPv4 TCP segment with flags and payload.
func tcp4Packet(src, dst netip.Addr, sport, dport uint16, flags header.TCPFlags, payload []byte) []byte {
	s := header.TCP(make([]byte, header.TCPMinimumSize+len(payload)))
	s.Encode(&header.TCPFields{SrcPort: sport, DstPort: dport, SeqNum: 1000, AckNum: 2000,
		DataOffset: header.TCPMinimumSize, Flags: flags, WindowSize: 65535})
	copy(s[header.TCPMinimumSize:], payload)
	return ip4Packet(src, dst, header.TCPProtocolNumber, s, 16)
}

// udp4Packet is an IPv4 UDP datagram with payload.
func udp4Packet(src, dst netip.Addr, sport, dport uint16, payload []byte) []byte {
	s := header.UDP(make([]byte, header.UDPMinimumSize+len(payload)))
	s.Encode(&header.UDPFields{SrcPort: sport, DstPort: dport, Length: uint16(len(s))})
	copy(s[header.UDPMinimumSize:], payload)
	return ip4Packet(src, dst, header.UDPProtocolNumber, s, 6)
}

// paced sends the packets next builds (until it returns nil) on fd,
// each of which brings one packet to the gateway's return path, keeping
// at most floodWindow of them ahead of what the return path has
// received, and returns how many it sent.
func paced(t *testing.T, lab *gwLab, fd int, next func(i int) []byte) int {
	t.Helper()
	base := lab.g.Stats().Return.Packets
	i := 0
	for ; ; i++ {
		pkt := next(i)
		if pkt == nil {
			return i
		}
		for deadline := time.Now().Add(10 * time.Second); uint64(i) >= lab.g.Stats().Return.Packets-base+floodWindow; {
			if time.Now().After(deadline) {
				st := lab.g.Stats()
				t.Fatalf("packet %d: nothing came back for 10 s; return %+v, port %+v", i, st.Return, st.Port.Sockets)
			}
			time.Sleep(20 * time.Microsecond)
		}
		if err := rawSend(fd, pkt); err != nil {
			t.Fatalf("send packet %d: %v", i, err)
		}
	}
}

// synFlood sends n TCP SYNs from the application's address in A
// through the TUN to n distinct ports of the server, where nothing
// listens: B's kernel answers each with a RST, which the gateway writes
// back into the TUN.
func synFlood(t *testing.T, lab *gwLab, n int) {
	fd := rawSocket(t, lab.A)
	sent := paced(t, lab, fd, func(i int) []byte {
		if i == n {
			return nil
		}
		return tcp4Packet(netlab.App4, labSrv4, 40000, uint16(1+i), header.TCPFlagSyn, nil)
	})
	if sent != n {
		t.Fatalf("sent %d SYNs of %d", sent, n)
	}
}

// flowFlood sends n UDP and n TCP packets from the server's address in
// B to the application's address, each from a source port of its own,
// UDP and TCP alternating: 2n flows of one packet each. The TCP
// segments carry data and ACK, so GRO would merge them with another of
// their flow. Nothing in A listens on the port.
func flowFlood(t *testing.T, lab *gwLab, n int) {
	fd := rawSocket(t, lab.B)
	payload := make([]byte, 100)
	sent := paced(t, lab, fd, func(i int) []byte {
		if i == 2*n {
			return nil
		}
		sport := uint16(10000 + i/2)
		if i%2 == 0 {
			return udp4Packet(labSrv4, netlab.App4, sport, 9300, payload)
		}
		return tcp4Packet(labSrv4, netlab.App4, sport, 9300, header.TCPFlagAck, payload)
	})
	if sent != 2*n {
		t.Fatalf("sent %d packets of %d", sent, 2*n)
	}
}
