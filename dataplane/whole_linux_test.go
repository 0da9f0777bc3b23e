package dataplane

// The ingress chain leaving whole, against the gateway cutting it. C
// hands the gateway's AF_PACKET ingress port TCP super-packets (written
// by a packet socket with a virtio-net header, so that they are the same
// bytes in every run); they leave gw-a whole, with their virtio-net
// header, where gw-a does TSO, else cut by the gateway. B forwards them
// to D through a veth without TSO or checksum offload: there the kernel's
// software GSO cuts what arrives whole, as a NIC's TSO would, and
// completes every checksum. What D receives must be the same bytes both
// ways.
//
//	C app0 ==== gw-c [gateway, A] gw-a ==== gw-b [B, ip_forward] gw-d ==== rcv0 D
//	  sends from 198.18.0.77 (no namespace has it)              198.19.0.99, listens
//
// One flow's SYN goes through the gateway first and D's SYN-ACK comes
// back announcing an MSS of 1000, which bounds its segments; two flows'
// handshakes were never seen: one's segments are as large as gw-a's MTU
// allows (1500 less the IP and TCP headers, its timestamps option
// included), the other's as its sender cut them (the gso_size of its
// virtio-net header, smaller), as Linux forwards a TSO or GRO packet. A
// USO super-packet leaves as its datagrams.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
	"github.com/gsoplane/gsoplane/segment"
)

const (
	wholeBIf, wholeDIf = "gw-d", "rcv0" // B's veth into D, and its peer
	wholeDstPort       = 7000
	wholeMSS           = 1000 // D's listener announces it
	wholeTTL           = 64
	wholeID            = 0x1234 // the IPv4 ID of each super-packet
	udpChecksumOffset  = 6
)

var (
	wholeSrc = netip.MustParseAddr("198.18.0.77") // behind gw-c, in no namespace
	wholeDst = netip.MustParseAddr("198.19.0.99") // D, in the ingress routes
	wholeB   = netip.MustParseAddr("198.18.201.1")
	wholeD   = netip.MustParseAddr("198.18.201.2")
	// tsOption is a TCP timestamps option with its two NOPs.
	tsOption = []byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2}
)

// wholeFlow is a flow from wholeSrc to D and the super-packet the test
// sends on it.
type wholeFlow struct {
	name    string
	sport   uint16
	udp     bool   // USO; else TCP
	syn     bool   // its SYN goes through the gateway first
	opts    []byte // TCP options of its data
	payload int
	gsoSize int // the segment size of its sender (the virtio-net header's)
	want    int // the payload of each of its segments at D but the last
}

var wholeFlows = []wholeFlow{
	{name: "syn seen", sport: 41000, syn: true, payload: 20500, gsoSize: wholeMSS, want: wholeMSS},
	{name: "syn not seen", sport: 41001, opts: tsOption, payload: 14000, gsoSize: 1448, want: 1500 - 20 - 32},
	{name: "syn not seen, smaller segments", sport: 41002, opts: tsOption, payload: 12000, gsoSize: 1200, want: 1200},
	{name: "uso", sport: 41003, udp: true, payload: 10 * 1400, gsoSize: 1400, want: 1400},
}

// wholeLab is the topology above.
type wholeLab struct {
	tp      *netlab.Topology
	inject  int // AF_PACKET socket on app0 in C, PACKET_VNET_HDR
	app0    int // its ifindex
	gwcMAC  net.HardwareAddr
	capture *wireCapture // on rcv0 in D
	flows   []wholeFlow  // wholeFlows this kernel can send
}

func newWholeLab(t *testing.T) *wholeLab {
	t.Helper()
	tp := newIngressTopology(t, 1, 1)
	d := netlab.NewT(t, "gwd")
	b := tp.B
	netlab.Must(t, netlab.AddVeth(b, wholeBIf, d, wholeDIf, 1))
	for _, err := range []error{
		b.AddAddr(wholeBIf, wholeB.String()+"/24"),
		d.AddAddr(wholeDIf, wholeD.String()+"/24"),
		d.AddAddr(wholeDIf, wholeDst.String()+"/32"),
		b.AddRoute(wholeDst.String()+"/32", wholeBIf, wholeD.String()),
		d.AddRoute(netlab.AppRoutes[0].String(), wholeDIf, wholeB.String()),
		b.Sysctl("net/ipv4/ip_forward", "1"),
		// B forwards each packet as it arrived; the kernel cuts and
		// checksums in software what leaves for D.
		b.SetFeatures(netlab.NICB, map[string]bool{"gro": false}),
		b.SetFeatures(wholeBIf, map[string]bool{"tso": false, "tx-udp-segmentation": false, "tx": false}),
	} {
		netlab.Must(t, err)
	}
	listenMSS(t, d, netip.AddrPortFrom(wholeDst, wholeDstPort))
	lab := &wholeLab{tp: tp, capture: openWireCapture(t, d, wholeDIf), flows: wholeFlows}
	if err := netlab.VirtioNetUSO(); err != nil { // a packet socket refuses the USO super-packet (EINVAL)
		t.Logf("no USO flow: %v", err)
		lab.flows = slices.DeleteFunc(slices.Clone(wholeFlows), func(f wholeFlow) bool { return f.udp })
	}
	lab.app0 = tp.C.LinkT(t, netlab.AppIf).Attrs().Index
	lab.gwcMAC = tp.A.LinkT(t, netlab.Ingress).Attrs().HardwareAddr
	lab.inject = tp.C.SocketT(t, unix.AF_PACKET, unix.SOCK_RAW)
	netlab.Must(t, unix.SetsockoptInt(lab.inject, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1))
	return lab
}

// listenMSS listens on addr in ns, announcing an MSS of wholeMSS.
func listenMSS(t *testing.T, ns *netlab.NS, addr netip.AddrPort) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG, wholeMSS) })
		return errors.Join(err, serr)
	}}
	var ln net.Listener
	var err error
	ns.Do(t, func() { ln, err = lc.Listen(context.Background(), "tcp4", addr.String()) })
	netlab.Must(t, err)
	t.Cleanup(func() { ln.Close() })
}

// send writes pkt, an IPv4 packet with a partial TCP or UDP checksum,
// from C with the virtio-net header of a TSO or USO sender cutting at
// gsoSize (none: 0).
func (lab *wholeLab) send(t *testing.T, pkt []byte, gsoSize int) {
	t.Helper()
	const eth = header.EthernetMinimumSize
	ip := header.IPv4(pkt)
	l3 := ip.HeaderLength()
	h := segment.Header{
		Flags: segment.FlagNeedsCsum, CsumStart: uint16(eth) + uint16(l3), CsumOffset: header.TCPChecksumOffset,
		GSOType: segment.GSOTCPv4, GSOSize: uint16(gsoSize),
	}
	l4 := header.TCP(pkt[l3:]).DataOffset()
	if ip.TransportProtocol() == header.UDPProtocolNumber {
		h.CsumOffset, h.GSOType, l4 = udpChecksumOffset, segment.GSOUDPL4, header.UDPMinimumSize
	}
	h.HdrLen = uint16(eth) + uint16(l3) + uint16(l4)
	if gsoSize == 0 {
		h.GSOType = segment.GSONone
	}
	frame := make([]byte, segment.HeaderSize+eth+len(pkt))
	netlab.Must(t, h.Encode(frame, segment.HeaderSize))
	header.Ethernet(frame[segment.HeaderSize:]).Encode(&header.EthernetFields{
		DstAddr: tcpip.LinkAddress(lab.gwcMAC), Type: header.IPv4ProtocolNumber,
	})
	copy(frame[segment.HeaderSize+eth:], pkt)
	to := &unix.SockaddrLinklayer{Ifindex: lab.app0, Protocol: htons(unix.ETH_P_IP)}
	netlab.Must(t, unix.Sendto(lab.inject, frame, 0, to))
}

// packet returns an IPv4 packet of flow f, DF set: TCP with flags, TCP
// options opts and payload bytes, or UDP; its checksum field holds the
// pseudo-header sum: a partial checksum, as a TSO or USO sender leaves
// it.
func (f wholeFlow) packet(flags header.TCPFlags, opts []byte, payload int) []byte {
	proto, l4 := header.TCPProtocolNumber, header.TCPMinimumSize+len(opts)
	if f.udp {
		proto, l4 = header.UDPProtocolNumber, header.UDPMinimumSize
	}
	pkt := make([]byte, header.IPv4MinimumSize+l4+payload)
	src, dst := tcpip.AddrFrom4(wholeSrc.As4()), tcpip.AddrFrom4(wholeDst.As4())
	ip := header.IPv4(pkt)
	ip.Encode(&header.IPv4Fields{
		TotalLength: uint16(len(pkt)), ID: wholeID, Flags: header.IPv4FlagDontFragment, TTL: wholeTTL,
		Protocol: uint8(proto), SrcAddr: src, DstAddr: dst,
	})
	ip.SetChecksum(^ip.CalculateChecksum())
	seg := ip.Payload()
	for i := range payload {
		seg[l4+i] = byte(i*7 + int(f.sport))
	}
	sum := header.PseudoHeaderChecksum(proto, src, dst, uint16(len(seg)))
	if f.udp {
		u := header.UDP(seg)
		u.Encode(&header.UDPFields{SrcPort: f.sport, DstPort: wholeDstPort, Length: uint16(len(seg))})
		u.SetChecksum(sum)
		return pkt
	}
	tcp := header.TCP(seg)
	tcp.Encode(&header.TCPFields{
		SrcPort: f.sport, DstPort: wholeDstPort, SeqNum: 1000, AckNum: 1,
		DataOffset: uint8(l4), Flags: flags, WindowSize: 512,
	})
	copy(tcp[header.TCPMinimumSize:], opts)
	tcp.SetChecksum(sum)
	return pkt
}

// run starts a gateway with AF_PACKET ports, sends every flow's
// handshake and super-packet through it and returns the data segments D
// received and the gateway's counters toward the NIC.
func (lab *wholeLab) run(t *testing.T) ([][]byte, GatewayStats) {
	t.Helper()
	g, stop := startIngress(t, lab.tp, portPacket)
	defer stop()
	want := 0
	for _, f := range lab.flows {
		if f.syn {
			lab.send(t, f.packet(header.TCPFlagSyn, []byte{2, 4, 0x05, 0xb4}, 0), 0)
			waitFor(t, "D's SYN-ACK through the gateway", func() bool { return g.Stats().Wire.Packets >= 2 })
		}
		lab.send(t, f.packet(header.TCPFlagAck|header.TCPFlagPsh, f.opts, f.payload), f.gsoSize)
		want += (f.payload + f.want - 1) / f.want
	}
	var got [][]byte
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < want && time.Now().Before(deadline) {
		got = append(got, lab.dataAtD()...)
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // anything more would come now
	got = append(got, lab.dataAtD()...)
	if len(got) != want {
		t.Errorf("D received %d data segments, want %d", len(got), want)
	}
	return got, g.Stats()
}

// dataAtD returns the IP packets of the test's flows with payload that D
// received since the last call.
func (lab *wholeLab) dataAtD() [][]byte {
	var out [][]byte
	for _, f := range lab.capture.drain() {
		ip := header.IPv4(f[header.EthernetMinimumSize:])
		if header.Ethernet(f).Type() == header.IPv4ProtocolNumber && ip.IsValid(len(ip)) &&
			ip.SourceAddress() == tcpip.AddrFrom4(wholeSrc.As4()) && len(payloadOf(ip)) > 0 {
			out = append(out, []byte(ip))
		}
	}
	return out
}

// payloadOf returns the TCP or UDP payload of ip (nil for others).
func payloadOf(ip header.IPv4) []byte {
	switch ip.TransportProtocol() {
	case header.TCPProtocolNumber:
		return header.TCP(ip.Payload()).Payload()
	case header.UDPProtocolNumber:
		return header.UDP(ip.Payload()).Payload()
	}
	return nil
}

// TestIngressWhole: where gw-a does TSO and USO the super-packets leave
// whole (counted Offloaded, none Cut), where it does neither the gateway
// cuts them (counted Cut), and D receives the same segments both ways:
// each flow's payload in segments of the size its handshake allowed (the
// MSS of D's SYN-ACK), or for a flow whose SYN the gateway never saw of
// gw-a's MTU less its headers or its sender's smaller segment size, and
// the USO super-packet's datagrams; the TTL taken off once by the
// gateway and once by B, the IPv4 IDs counting up from the
// super-packet's.
func TestIngressWhole(t *testing.T) {
	lab := newWholeLab(t)
	whole, st := lab.run(t)
	if f := st.Forward; f.Offloaded != uint64(len(lab.flows)) || f.Cut != 0 {
		t.Errorf("gw-a with TSO: %d super-packets left whole, %d cut; want %d and 0", f.Offloaded, f.Cut, len(lab.flows))
	}
	netlab.Must(t, lab.tp.A.SetFeatures(netlab.NICA, map[string]bool{"tso": false, "tx-udp-segmentation": false}))
	cut, st := lab.run(t)
	if f := st.Forward; f.Offloaded != 0 || f.Cut != uint64(len(lab.flows)) {
		t.Errorf("gw-a without TSO: %d super-packets left whole, %d cut; want 0 and %d", f.Offloaded, f.Cut, len(lab.flows))
	}
	for i := range max(len(whole), len(cut)) {
		if i >= len(whole) || i >= len(cut) || !bytes.Equal(whole[i], cut[i]) {
			t.Errorf("segment %d at D: left whole %s, cut by the gateway %s", i, describe(whole, i), describe(cut, i))
		}
	}
	checkSegments(t, lab.flows, whole)
}

// checkSegments checks the segments D received of each flow: in order,
// of the flow's segment size but the last, the TTL taken off twice, the
// IPv4 IDs counting up from the super-packet's.
func checkSegments(t *testing.T, flows []wholeFlow, segs [][]byte) {
	t.Helper()
	for _, f := range flows {
		got := 0
		id := uint16(wholeID)
		for _, s := range segs {
			ip := header.IPv4(s)
			if header.UDP(ip.Payload()).SourcePort() != f.sport { // at the same offset as TCP's
				continue
			}
			n := len(payloadOf(ip))
			tcpOK := f.udp || header.TCP(ip.Payload()).SequenceNumber() == 1000+uint32(got)
			if (n != f.want && got+n != f.payload) || n > f.want || !tcpOK || ip.ID() != id || ip.TTL() != wholeTTL-2 {
				t.Errorf("%s: segment %s, want offset %d, %d bytes, ID %#x, TTL %d", f.name, describe([][]byte{s}, 0), got, f.want, id, wholeTTL-2)
			}
			got += n
			id++
		}
		if got != f.payload {
			t.Errorf("%s: D received %d bytes, want %d", f.name, got, f.payload)
		}
	}
}

// describe summarises packet i of pkts, or says there is none.
func describe(pkts [][]byte, i int) string {
	if i >= len(pkts) {
		return "none"
	}
	ip := header.IPv4(pkts[i])
	s := fmt.Sprintf("[%d bytes, ID %#x, TTL %d, %d of payload", len(ip), ip.ID(), ip.TTL(), len(payloadOf(ip)))
	if ip.TransportProtocol() == header.UDPProtocolNumber {
		u := header.UDP(ip.Payload())
		return s + fmt.Sprintf(", UDP port %d, checksum %#04x]", u.SourcePort(), u.Checksum())
	}
	tcp := header.TCP(ip.Payload())
	return s + fmt.Sprintf(", TCP port %d, seq %d, flags %v, checksum %#04x]", tcp.SourcePort(), tcp.SequenceNumber(), tcp.Flags(), tcp.Checksum())
}
