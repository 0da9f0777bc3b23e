//go:build linux

package segment

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// The kernel as the receiver of what ForWire and Split make of wire
// packets: a sender namespace writes Ethernet frames from an AF_PACKET
// socket into a veth whose MTU is 1500; the receiving kernel in the other
// namespace must accept every segment and fragment. For TCP the sender
// plays a whole client from raw frames (the address it uses exists in no
// namespace, so no kernel answers for it): it sends a SYN, reads the
// SYN-ACK (which comes with the partial checksum a veth peer leaves), and
// sends a super-packet cut by ForWire at the MSS the MSS table learned;
// the server socket must read the stream intact. For UDP a datagram larger
// than the MTU, DF clear, is cut into fragments that the receiver must
// reassemble. Every packet the sender writes goes through the gateway's
// path: Clamp, Observe, MSS, ForWire, Split; every frame it reads through
// Observe. The receiver's error counters must not grow and every frame it
// received must fit the MTU.
//
//	netns snd                           netns rcv
//	  AF_PACKET → wsa (1500) ======= wsb (1500) 198.18.5.1, 2001:2:0:5::1
//	  "client" 198.18.5.2,                        listening TCP, UDP sockets
//	  2001:2:0:5::2 (nowhere)                     AF_PACKET capture

const (
	wireMTU   = 1500
	wireSndIf = "wsa"
	wireRcvIf = "wsb"
)

var (
	wireRcv4 = netip.MustParseAddr("198.18.5.1")
	wireSnd4 = netip.MustParseAddr("198.18.5.2")
	wireRcv6 = netip.MustParseAddr("2001:2:0:5::1")
	wireSnd6 = netip.MustParseAddr("2001:2:0:5::2")
)

// wireLab is the throwaway topology.
type wireLab struct {
	snd, rcv       *netlab.NS
	tx             int // AF_PACKET socket on wsa in snd: sends and reads
	capture        int // AF_PACKET socket on everything in rcv
	ifindex        int
	sndMAC, rcvMAC net.HardwareAddr
	tbl            mssBook
	seg            Segmenter
}

func newWireLab(t *testing.T) *wireLab {
	t.Helper()
	lab := &wireLab{
		snd: netlab.NewT(t, "wire-snd"), // skips unless root
		rcv: netlab.NewT(t, "wire-rcv"),
		tx:  -1, capture: -1,
		tbl: mssBook{},
	}
	t.Cleanup(func() {
		for _, fd := range []int{lab.tx, lab.capture} {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	})
	writeSysctls(t, lab.rcv, "net/ipv6/conf/all/accept_dad", "0", "net/ipv6/conf/default/accept_dad", "0")
	writeSysctls(t, lab.snd, "net/ipv6/conf/all/disable_ipv6", "1", "net/ipv6/conf/default/disable_ipv6", "1")
	netlab.Must(t, netlab.AddVeth(lab.snd, wireSndIf, lab.rcv, wireRcvIf, 0))
	sl, rl := lab.snd.LinkT(t, wireSndIf), lab.rcv.LinkT(t, wireRcvIf)
	if sl.Attrs().MTU != wireMTU || rl.Attrs().MTU != wireMTU {
		netlab.Must(t, lab.snd.Netlink().LinkSetMTU(sl, wireMTU))
		netlab.Must(t, lab.rcv.Netlink().LinkSetMTU(rl, wireMTU))
	}
	lab.ifindex, lab.sndMAC, lab.rcvMAC = sl.Attrs().Index, sl.Attrs().HardwareAddr, rl.Attrs().HardwareAddr
	netlab.Must(t, lab.rcv.AddAddr(wireRcvIf, wireRcv4.String()+"/24"))
	netlab.Must(t, lab.rcv.AddAddr(wireRcvIf, wireRcv6.String()+"/64"))
	permanentNeigh(t, lab.rcv, wireRcvIf, wireSnd4.String(), lab.sndMAC.String())
	permanentNeigh(t, lab.rcv, wireRcvIf, wireSnd6.String(), lab.sndMAC.String())
	// The receiver shows each segment as it arrived.
	featuresOff(t, lab.rcv, wireRcvIf, []string{"gro"}, "rx-gro", "rx-gro-list", "rx-udp-gro-forwarding")

	lab.snd.Do(t, func() {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		netlab.Must(t, err)
		lab.tx = fd
		netlab.Must(t, unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: lab.ifindex}))
	})
	lab.rcv.Do(t, func() {
		fd, err := openCapture()
		netlab.Must(t, err)
		lab.capture = fd
	})
	return lab
}

// recv returns the next frame the socket fd read within timeout, or nil.
func recvOn(t *testing.T, fd int, buf []byte, timeout time.Duration) []byte {
	return (&kernelLab{capture: fd}).recvFrame(t, buf, timeout)
}

// send puts one IP packet on the wire the way the gateway would: Clamp
// (SYNs), Observe, MSS, ForWire, Split, one frame per segment. It returns
// the header ForWire chose.
func (lab *wireLab) send(t *testing.T, pkt []byte) Header {
	t.Helper()
	return lab.sendMSS(t, pkt, -1)
}

// sendMSS is send with the MSS given to ForWire instead of the table's,
// unless it is negative.
func (lab *wireLab) sendMSS(t *testing.T, pkt []byte, mss int) Header {
	t.Helper()
	Clamp(pkt, wireMTU)
	lab.tbl.Observe(pkt)
	if mss < 0 {
		mss = lab.tbl.MSS(pkt)
	}
	h, st, err := lab.seg.ForWire(pkt, wireMTU, mss)
	if err != nil || st == CsumBad {
		t.Fatalf("ForWire: %v (checksum %v)", err, st)
	}
	l, err := lab.seg.Validate(pkt, h)
	if err != nil {
		t.Fatalf("Validate(%+v): %v", h, err)
	}
	const eth = header.EthernetMinimumSize
	bufs := make([][]byte, l.Segments())
	for i := range bufs {
		bufs[i] = make([]byte, eth+l.MaxSegLen())
	}
	sizes := make([]int, len(bufs))
	n, err := lab.seg.Split(pkt, l, bufs, sizes, eth)
	if err != nil {
		t.Fatalf("Split: %v", err)
	}
	etype := header.IPv4ProtocolNumber
	if pkt[0]>>4 == 6 {
		etype = header.IPv6ProtocolNumber
	}
	for i := range n {
		f := bufs[i][:eth+sizes[i]]
		header.Ethernet(f).Encode(&header.EthernetFields{
			SrcAddr: tcpip.LinkAddress(lab.sndMAC), DstAddr: tcpip.LinkAddress(lab.rcvMAC), Type: etype,
		})
		if err := unix.Sendto(lab.tx, f, 0, &unix.SockaddrLinklayer{Ifindex: lab.ifindex}); err != nil {
			t.Fatalf("send segment %d of %d (%d bytes): %v", i, n, len(f), err)
		}
	}
	return h
}

// await reads frames in snd until one carries an IP packet for which want
// is true, passing every IP packet to Observe, as the gateway's other
// direction would.
func (lab *wireLab) await(t *testing.T, want func(p []byte) bool) []byte {
	t.Helper()
	buf := make([]byte, 1<<16)
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		f := recvOn(t, lab.tx, buf, time.Until(deadline))
		p := ipOf(f)
		if p == nil {
			continue
		}
		lab.tbl.Observe(p)
		if want(p) {
			return bytes.Clone(p)
		}
	}
	t.Fatal("the expected packet never came")
	return nil
}

// drainCapture returns the sizes of the frames received in rcv from the
// sender's address until the wire has been quiet for a while.
func (lab *wireLab) drainCapture(t *testing.T, from netip.Addr) (sizes []int) {
	buf := make([]byte, 1<<17)
	for {
		f := recvOn(t, lab.capture, buf, 300*time.Millisecond)
		if f == nil {
			return sizes
		}
		if src, _, ok := ipAddrs(ipOf(f)); ok && src == from {
			sizes = append(sizes, len(f))
		}
	}
}

// snmp reads the receiver's IP, TCP and UDP counters (IPv4 and IPv6).
func (lab *wireLab) snmp(t *testing.T) map[string]int64 {
	t.Helper()
	m := map[string]int64{}
	lab.rcv.Do(t, func() {
		// /proc/thread-self/net is the namespace of this locked thread.
		b, err := os.ReadFile("/proc/thread-self/net/snmp")
		netlab.Must(t, err)
		lines := strings.Split(string(b), "\n")
		for i := 0; i+1 < len(lines); i += 2 {
			keys, vals := strings.Fields(lines[i]), strings.Fields(lines[i+1])
			for j := 1; j < len(keys) && j < len(vals); j++ {
				v, _ := strconv.ParseInt(vals[j], 10, 64)
				m[strings.TrimSuffix(keys[0], ":")+"."+keys[j]] = v
			}
		}
		b, err = os.ReadFile("/proc/thread-self/net/snmp6")
		netlab.Must(t, err)
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) == 2 {
				v, _ := strconv.ParseInt(f[1], 10, 64)
				m[f[0]] = v
			}
		}
	})
	return m
}

// errorCounters must not grow.
var errorCounters = []string{
	"Ip.InHdrErrors", "Ip.ReasmFails", "Ip.ReasmTimeout", "Tcp.InErrs", "Tcp.InCsumErrors",
	"Udp.InErrors", "Udp.InCsumErrors", "Ip6InHdrErrors", "Ip6ReasmFails", "Ip6InTruncatedPkts",
	"Udp6InErrors", "Udp6InCsumErrors",
}

func (lab *wireLab) checkCounters(t *testing.T, before map[string]int64) map[string]int64 {
	t.Helper()
	after := lab.snmp(t)
	for _, k := range errorCounters {
		if after[k] != before[k] {
			t.Errorf("receiver's %s grew from %d to %d", k, before[k], after[k])
		}
	}
	return after
}

// checkSizes checks that every frame fits the MTU and returns how many
// there were.
func checkSizes(t *testing.T, sizes []int) int {
	t.Helper()
	for i, n := range sizes {
		if n > wireMTU+header.EthernetMinimumSize {
			t.Errorf("frame %d: %d bytes, more than the MTU %d allows", i, n, wireMTU)
		}
	}
	return len(sizes)
}

// setAck writes a TCP packet's acknowledgment number and fixes a complete
// checksum (a partial one does not cover it).
func setAck(pkt []byte, ack uint32) {
	l3, _, v6, _ := tcpOf(pkt)
	partial := l4Csum(pkt, l3, protoTCP, v6) == CsumPartial
	binary.BigEndian.PutUint32(pkt[l3+8:], ack)
	if partial {
		return
	}
	l4 := pkt[l3:]
	binary.BigEndian.PutUint16(l4[16:], 0)
	src, dst := addrs(pkt, v6)
	binary.BigEndian.PutUint16(l4[16:], ^checksum.Checksum(l4, header.PseudoHeaderChecksum(header.TCPProtocolNumber, src, dst, uint16(len(l4)))))
}

type wireTCPCase struct {
	name      string
	v6        bool
	partial   bool // the client's packets carry partial checksums, as a veth peer's
	synMSS    uint16
	serverMSS int    // TCP_MAXSEG on the listener; 0: from the MTU
	ipOpts    []byte // in the data super-packet
	tcpOpts   []byte
	payload   int
	wantGSO   int
	// noTable cuts the data at the MTU, ignoring the MSS the server
	// announced: Linux accepts segments above its advertised MSS.
	noTable bool
}

func TestWireKernelTCP(t *testing.T) {
	lab := newWireLab(t)
	for i, c := range []wireTCPCase{
		{name: "v4-partial", partial: true, synMSS: 1460, payload: 40000, wantGSO: 1460},
		{name: "v4-complete-options", synMSS: 1460, ipOpts: ipOptsNOP, tcpOpts: nops(12), payload: 30000, wantGSO: 1440},
		{name: "v4-server-mss-1000", partial: true, synMSS: 1460, serverMSS: 1000, payload: 30000, wantGSO: 1000},
		{name: "v4-clamped-syn", partial: true, synMSS: 9000, payload: 20000, wantGSO: 1460},
		{name: "v4-above-server-mss", partial: true, synMSS: 1460, serverMSS: 1000, payload: 30000, wantGSO: 1460, noTable: true},
		{name: "v6-partial", v6: true, partial: true, synMSS: 1440, payload: 40000, wantGSO: 1440},
		{name: "v6-complete-clamped-syn", v6: true, synMSS: 8940, payload: 30000, wantGSO: 1440},
	} {
		t.Run(c.name, func(t *testing.T) { lab.tcp(t, c, uint16(5201+i)) })
	}
}

func (lab *wireLab) tcp(t *testing.T, c wireTCPCase, port uint16) {
	srv, cli := wireRcv4, wireSnd4
	network := "tcp4"
	if c.v6 {
		srv, cli, network = wireRcv6, wireSnd6, "tcp6"
	}
	var ln net.Listener
	lab.rcv.Do(t, func() {
		lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				if c.serverMSS > 0 {
					serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG, c.serverMSS)
				}
			})
			if err != nil {
				return err
			}
			return serr
		}}
		var err error
		ln, err = lc.Listen(context.Background(), network, netip.AddrPortFrom(srv, port).String())
		netlab.Must(t, err)
	})
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer conn.Close()
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, _ := io.ReadAll(io.LimitReader(conn, int64(c.payload)))
		got <- b
	}()

	before := lab.snmp(t)
	spec := func(flags uint8, opts []byte, payload int) superSpec {
		return superSpec{v6: c.v6, proto: tcp, src: cli, dst: srv, srcPort: 40000, dstPort: port, tcpFlags: flags,
			tcpOpts: opts, payload: payload, needsCsum: c.partial, df: true, seq: 1000, id: 100, seed: uint64(port)}
	}
	// SYN, clamped on the way if it announces more than the MTU allows.
	syn := wirePacket(spec(flagSYN, mssOpt(c.synMSS), 0))
	lab.send(t, syn)
	synack := lab.await(t, func(p []byte) bool {
		l3, _, _, ok := tcpOf(p)
		return ok && binary.BigEndian.Uint16(p[l3:]) == port && p[l3+tcpFlagsOff]&(tcpSYN|tcpAckFlag) == tcpSYN|tcpAckFlag
	})
	l3, _, _, _ := tcpOf(synack)
	th := header.TCP(synack[l3:])
	if th.AckNumber() != 1001 {
		t.Fatalf("SYN-ACK acknowledges %d, want 1001", th.AckNumber())
	}
	if st := l4Csum(synack, l3, protoTCP, c.v6); st != CsumPartial && st != CsumComplete {
		t.Fatalf("SYN-ACK checksum %v", st)
	}
	isn, window := th.SequenceNumber(), int(th.WindowSize())
	ack := wirePacket(spec(flagACK, nil, 0))
	setSeq(ack, 1001)
	setAck(ack, isn+1)
	lab.send(t, ack)

	// The data: one super-packet, as a TSO peer hands it over.
	payload := min(c.payload, window)
	s := spec(flagACK|flagPSH, c.tcpOpts, payload)
	s.ipOpts = c.ipOpts
	data := wirePacket(s)
	setSeq(data, 1001)
	setAck(data, isn+1)
	mss := -1 // the table's
	if c.noTable {
		mss = 0
	} else if m, want := lab.tbl.MSS(data), c.wantGSO; m < want {
		t.Fatalf("MSS table says %d for the data, want at least %d", m, want)
	}
	h := lab.sendMSS(t, data, mss)
	if int(h.GSOSize) != c.wantGSO {
		t.Fatalf("ForWire chose gso_size %d, want %d (header %+v)", h.GSOSize, c.wantGSO, h)
	}
	var stream []byte
	select {
	case stream = <-got:
	case <-time.After(6 * time.Second):
		t.Fatal("the server read nothing")
	}
	dl3 := l3Of(t, data)
	want := data[dl3+20+len(c.tcpOpts):]
	if !bytes.Equal(stream, want) {
		t.Fatalf("the server read %d bytes, want the %d sent (equal prefix: %v)", len(stream), len(want), bytes.HasPrefix(want, stream))
	}
	n := checkSizes(t, lab.drainCapture(t, cli))
	segs := (payload + c.wantGSO - 1) / c.wantGSO
	if n < segs+2 { // SYN, ACK, data segments (and maybe our RST-less goodbye)
		t.Errorf("receiver saw %d frames from the client, want at least %d", n, segs+2)
	}
	after := lab.checkCounters(t, before)
	t.Logf("%d-byte super-packet → %d segments of ≤ %d bytes of payload; receiver's Tcp.InSegs +%d",
		len(data), segs, c.wantGSO, after["Tcp.InSegs"]-before["Tcp.InSegs"])
	// Tell the server we are gone.
	rst := wirePacket(spec(flagRST, nil, 0))
	setSeq(rst, uint32(1001+payload))
	lab.send(t, rst)
}

const tcpAckFlag = 0x10

// setSeq writes a TCP packet's sequence number and fixes a complete
// checksum.
func setSeq(pkt []byte, seq uint32) {
	l3, _, _, _ := tcpOf(pkt)
	ack := binary.BigEndian.Uint32(pkt[l3+8:])
	binary.BigEndian.PutUint32(pkt[l3+4:], seq)
	setAck(pkt, ack) // redoes the checksum
}

func TestWireKernelUDP(t *testing.T) {
	lab := newWireLab(t)
	var conn net.PacketConn
	lab.rcv.Do(t, func() {
		var err error
		conn, err = net.ListenPacket("udp4", netip.AddrPortFrom(wireRcv4, 5300).String())
		netlab.Must(t, err)
	})
	defer conn.Close()
	for i, c := range []struct {
		name    string
		spec    superSpec
		wantGSO int
	}{
		{"partial", superSpec{payload: 30000, needsCsum: true}, 1480},
		{"complete", superSpec{payload: 20001}, 1480},
		{"no-checksum", superSpec{payload: 5000}, 1480},
		{"ip-options", superSpec{payload: 9000, needsCsum: true, ipOpts: ipOptsNOP}, 1472},
		{"64k", superSpec{payload: 65535 - 28, needsCsum: true}, 1480},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := c.spec
			s.proto, s.src, s.dst, s.srcPort, s.dstPort = udp, wireSnd4, wireRcv4, 40000, 5300
			s.id, s.seed = uint16(7000+i), uint64(i)
			pkt := wirePacket(s)
			l3 := l3Of(t, pkt)
			if c.name == "no-checksum" {
				setL4Csum(pkt, l3, 0)
			}
			before := lab.snmp(t)
			h := lab.send(t, pkt)
			if h.GSOType != GSOUDP || int(h.GSOSize) != c.wantGSO {
				t.Fatalf("header %+v, want UFO with gso_size %d", h, c.wantGSO)
			}
			buf := make([]byte, 1<<16)
			conn.SetReadDeadline(time.Now().Add(3 * time.Second))
			n, _, err := conn.ReadFrom(buf)
			if err != nil {
				t.Fatalf("the receiver got no datagram: %v", err)
			}
			if !bytes.Equal(buf[:n], pkt[l3+8:]) {
				t.Fatalf("the receiver got %d bytes, not the %d sent", n, len(pkt)-l3-8)
			}
			frames := checkSizes(t, lab.drainCapture(t, wireSnd4))
			if want := (len(pkt) - l3 + c.wantGSO - 1) / c.wantGSO; frames != want {
				t.Errorf("receiver saw %d fragments, want %d", frames, want)
			}
			after := lab.checkCounters(t, before)
			if d := after["Ip.ReasmOKs"] - before["Ip.ReasmOKs"]; d != 1 {
				t.Errorf("receiver reassembled %d datagrams, want 1", d)
			}
			t.Logf("%d-byte datagram → %d fragments", len(pkt), frames)
		})
	}
}
