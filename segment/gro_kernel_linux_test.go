//go:build linux

package segment

import (
	"fmt"
	"net"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// The Linux kernel as a differential oracle for Coalesce: the packets of
// a case are sent as Ethernet frames from an AF_PACKET socket on one end
// of a veth pair (namespace "tx", TSO off, so that veth_xmit hands them to
// the peer's NAPI), and the peer (namespace "rx") runs GRO on them (gro
// and rx-udp-gro-forwarding on, rx-gro-list off, gro_flush_timeout 2 ms
// and napi_defer_hard_irqs 1, so that GRO sees a whole burst before it
// flushes anything, whatever the timing). An AF_PACKET socket with
// PACKET_VNET_HDR on the peer captures every skb GRO delivers with its
// gso_type, gso_size and checksum offsets (csum_start counts the Ethernet
// header; hdr_len is only a hint). Each captured packet is mapped back to
// the input packets it carries by re-splitting it with Split; then the
// kernel's output packets are compared with Coalesce's: which packets
// merged, whether a flow was reordered, and the header and bytes of every
// super-packet, field by field. The cases are the table tests' (tcpCases,
// udpCases, mixedCases) that are IP packets the kernel takes, and a UDP
// merge reaching the 64-datagram cap.
//
//	netns tx                      netns rx
//	  AF_PACKET → gxa (tso off) ==== gxb (gro, rx-udp-gro-forwarding) → GRO → AF_PACKET (vnet hdr)
//
// Where Coalesce differs from Linux 6.18 (groKernelDiffs, groKernelSkip):
//
//	case                          kernel                                Coalesce
//	tcp*/bad-checksum-middle      the bad segment 2 overtakes the held  0-1, 2, 3-4 in order:
//	udp4/bad-checksum,            merge 0-1 (it is not even looked up); a packet passed through
//	udp4/zero-checksum-middle,    3 cannot join 0-1 (TCP sequence,      closes its flow's merge
//	udp4/length-lies              IPv4 ID), so 2, 0-1, 3-4
//	udp6/bad-checksum,            2 overtakes 0-1, and 3-4 join 0-1:    0-1, 2, 3-4
//	udp6/zero-checksum-middle,    2, 0-1+3-4 (no ID to tell)
//	udp6/length-lies
//	tcp4/ip-options-middle        the options packet 2 overtakes 0-1,   0-1, 2, 3-5
//	                              3-5 continue its sequence: 2, 0-1+3-5
//	tcp*/urgent-pointer-changed   merges 0-4, keeping the first urgent  0-1, 2-4: the urgent
//	                              pointer (URG is clear)                pointer must be equal
//	tcp6/hop-by-hop-second        merges (not run: Split refuses a      passes through
//	                              Hop-by-Hop header that is not first)
//	every single packet           DATA_VALID if GRO verified it         all-zero header
//
// Other kernels differ in more cases (groKernelOther: Linux 6.1 lets a
// CWR segment start a merge, and merges fixed IPv4 IDs only with DF;
// kernels with AccECN, such as Debian's 7.3, merge a run of segments that
// all carry CWR); a kernel that merges exactly as documented there skips
// the case, naming the difference. Cases with UDP packets need a capture that
// reads UDP GRO super-packets (VIRTIO_NET_HDR_GSO_UDP_L4, Linux 6.2).
//
// In every other case the kernel merges exactly as Coalesce does, and its
// super-packets are byte for byte Coalesce's (lengths, IPv4 header
// checksum, TCP flags and the pseudo-header sum in the checksum field
// included), with the same virtio-net header but for hdr_len.

const (
	groTxIf  = "gxa"
	groRxIf  = "gxb"
	groTxMAC = "02:00:c6:12:fc:01"
	groRxMAC = "02:00:c6:12:fc:02"

	groFlushTimeout = 2 * time.Millisecond
	// groBurstMax is the longest burst: the first NAPI poll takes the
	// first packet alone (then defers), the second takes up to its budget
	// of 64, so GRO sees all of them before it flushes anything.
	groBurstMax = 65
)

// groLab is the veth pair; kernelLab.capture is the capture socket.
type groLab struct {
	kernelLab
	send         int // AF_PACKET socket on the tx end
	txIdx        int
	txMAC, rxMAC net.HardwareAddr
}

func newGROLab(t *testing.T) *groLab {
	t.Helper()
	tx, rx := netlab.NewT(t, "gro-tx"), netlab.NewT(t, "gro-rx")
	for _, ns := range []*netlab.NS{tx, rx} {
		writeSysctls(t, ns, "net/ipv6/conf/all/disable_ipv6", "1", "net/ipv6/conf/default/disable_ipv6", "1")
	}
	addVeth(t, tx, groTxIf, groTxMAC, rx, groRxIf, groRxMAC)
	netlab.Must(t, tx.LinkUp(groTxIf))
	netlab.Must(t, rx.LinkUp(groRxIf))
	sysfs := "/sys/class/net/" + groRxIf + "/"
	netlab.Must(t, rx.WriteSysfs(sysfs+"gro_flush_timeout", fmt.Sprint(groFlushTimeout.Nanoseconds())))
	netlab.Must(t, rx.WriteSysfs(sysfs+"napi_defer_hard_irqs", "1"))
	netlab.Must(t, tx.SetFeatures(groTxIf, map[string]bool{"tso": false}))
	netlab.Must(t, rx.SetFeatures(groRxIf, map[string]bool{"gro": true, "rx-udp-gro-forwarding": true, "rx-gro-list": false}))
	want := map[string]bool{"rx-gro": true, "rx-udp-gro-forwarding": true, "rx-gro-list": false}
	for name, on := range want {
		if f := features(t, rx, groRxIf)[name]; f.Active != on {
			t.Fatalf("%s on %s is %+v, want active=%v", name, groRxIf, f, on)
		}
	}
	if v, err := rx.ReadSysfs(sysfs + "gro_flush_timeout"); err != nil || v != fmt.Sprint(groFlushTimeout.Nanoseconds()) {
		t.Fatalf("gro_flush_timeout reads %q (%v)", v, err)
	}

	lab := &groLab{kernelLab: kernelLab{capture: -1}, send: tx.SocketT(t, unix.AF_PACKET, unix.SOCK_RAW)}
	lab.txIdx = tx.LinkT(t, groTxIf).Attrs().Index
	lab.txMAC, lab.rxMAC = tx.LinkT(t, groTxIf).Attrs().HardwareAddr, rx.LinkT(t, groRxIf).Attrs().HardwareAddr
	rx.Do(t, func() {
		fd, err := openCapture()
		netlab.Must(t, err)
		lab.capture = fd
	})
	t.Cleanup(func() { unix.Close(lab.capture) })
	netlab.Must(t, unix.SetsockoptInt(lab.capture, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1))
	return lab
}

// sendIP sends an IP packet as an Ethernet frame to the rx end.
func (lab *groLab) sendIP(t *testing.T, p []byte) {
	t.Helper()
	ethType := uint16(unix.ETH_P_IP)
	if len(p) > 0 && p[0]>>4 == 6 {
		ethType = unix.ETH_P_IPV6
	}
	frame := append(append(append([]byte{}, lab.rxMAC...), lab.txMAC...), byte(ethType>>8), byte(ethType))
	frame = append(frame, p...)
	sa := &unix.SockaddrLinklayer{Ifindex: lab.txIdx, Protocol: htons(ethType)}
	if err := unix.Sendto(lab.send, frame, 0, sa); err != nil {
		t.Fatalf("send: %v", err)
	}
}

// exchange sends a burst and returns what GRO delivered from it, in the
// order it was delivered, mapped back to the burst's packets. A marker
// datagram sent well after the burst (GRO has flushed everything by then)
// ends the capture.
func (lab *groLab) exchange(t *testing.T, in [][]byte) []groOut {
	t.Helper()
	buf := make([]byte, 1<<17)
	for lab.recvFrame(t, buf, 0) != nil { // drain
	}
	for _, p := range in {
		lab.sendIP(t, p)
	}
	time.Sleep(20 * groFlushTimeout)
	lab.markers++
	lab.sendIP(t, markerPacket(lab.markers)[HeaderSize:])
	var frames []groFrame
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		f := lab.recvFrame(t, buf, time.Until(deadline))
		if len(f) < HeaderSize {
			continue
		}
		p := ipOf(f[HeaderSize:])
		src, dst, ok := ipAddrs(p)
		if p == nil || !ok || !inTestRanges(src) || !inTestRanges(dst) {
			continue
		}
		if isMarker(p, lab.markers) {
			return attributeAll(t, in, frames)
		}
		h, err := DecodeHeader(f, HeaderSize)
		netlab.Must(t, err)
		frames = append(frames, groFrame{h, slices.Clone(p)})
	}
	t.Fatal("the marker never came back: the lab is broken")
	return nil
}

// groFrame is a packet GRO delivered and its virtio-net header.
type groFrame struct {
	hdr Header
	pkt []byte
}

// attributeAll maps the packets GRO delivered back to the input.
func attributeAll(t *testing.T, in [][]byte, frames []groFrame) []groOut {
	t.Helper()
	used := make([]bool, len(in))
	outs := make([]groOut, len(frames))
	for i, f := range frames {
		outs[i] = attribute(t, in, used, f.pkt, f.hdr)
	}
	return outs
}

// attribute maps a packet the kernel delivered back to the input packets
// it carries. The header's csum_start loses the Ethernet header; hdr_len,
// a hint, becomes the true header length.
func attribute(t *testing.T, in [][]byte, used []bool, p []byte, h Header) groOut {
	t.Helper()
	if h.GSOType == GSONone {
		for j := range in {
			if !used[j] && string(in[j]) == string(p) {
				used[j] = true
				return groOut{idx: []int{j}, hdr: h, pkt: p}
			}
		}
		t.Fatalf("the kernel delivered a packet that is none of the inputs: %v", dissect(p))
	}
	h.CsumStart -= 14
	hint := h.HdrLen
	l, err := resplitter.Validate(p, h)
	if err == nil {
		h.HdrLen = uint16(l.HdrLen())
	}
	_, segs, err := splitFresh(&resplitter, p, h)
	if err != nil {
		t.Fatalf("re-split of the kernel's super-packet (header %+v, hdr_len hint %d): %v", h, hint, err)
	}
	o := groOut{hdr: h, pkt: p}
	for k, seg := range segs {
		j := -1
		for i, q := range in {
			first := q
			if k > 0 {
				first = in[o.idx[0]]
			}
			if !used[i] && (sameSegment(seg, q, first, k) == nil || sameSegment(urgentOf(seg, q), q, first, k) == nil ||
				sameSegment(cwrOf(seg, q), q, first, k) == nil) {
				j = i
				break
			}
		}
		if j < 0 {
			t.Fatalf("segment %d of the kernel's super-packet %+v is none of the inputs: %v", k, h, dissect(seg))
		}
		used[j] = true
		o.idx = append(o.idx, j)
	}
	return o
}

// urgentOf returns a copy of the re-split segment seg with the urgent
// pointer of the TCP input packet q: the kernel merges segments whose
// urgent pointers differ while URG is clear, and its super-packet keeps
// only the first one's (see the table above).
func urgentOf(seg, q []byte) []byte {
	return fromInput(seg, q, func(seg, q []byte) { copy(seg[18:20], q[18:20]) })
}

// cwrOf is seg with q's CWR flag: a kernel with AccECN merges segments
// that all carry CWR and would keep it on every segment
// (SKB_GSO_TCP_ACCECN), where the virtio-net header it hands over says
// plain TCP, whose segments after the first Split gives without CWR.
func cwrOf(seg, q []byte) []byte {
	return fromInput(seg, q, func(seg, q []byte) { seg[13] |= q[13] & tcpCWR })
}

// fromInput returns a copy of seg with set applied to its TCP header from
// q's (both from the TCP header on), its checksum fixed; seg itself when
// q is not a TCP packet of seg's length.
func fromInput(seg, q []byte, set func(seg, q []byte)) []byte {
	l, err := Validate(q, Header{})
	if err != nil || l.Proto() != protoTCP || len(seg) != len(q) {
		return seg
	}
	seg = slices.Clone(seg)
	set(seg[l.L3Len():], q[l.L3Len():])
	refix(seg, l)
	return seg
}

// groKernelCase is a burst and, where the kernel differs (see the table
// above), the output packets it gives and whether it delivers packets of
// a flow out of order.
type groKernelCase struct {
	name     string
	in       [][]byte
	kernel   string // as groCase.want; "" when the kernel merges as Coalesce does
	reorders bool
}

// groKernelDiffs are the cases of the table above: the kernel's output
// packets ("" when they are Coalesce's) and whether it reorders a flow.
var groKernelDiffs = map[string]struct {
	kernel   string
	reorders bool
}{
	"tcp4/bad-checksum-middle":    {"", true},
	"tcp6/bad-checksum-middle":    {"", true},
	"tcp4/ip-options-middle":      {"0+1+3+4+5 2", true},
	"udp4/bad-checksum":           {"", true},
	"udp4/length-lies":            {"", true},
	"udp4/zero-checksum-middle":   {"", true},
	"udp6/bad-checksum":           {"0+1+3+4 2", true},
	"udp6/length-lies":            {"0+1+3+4 2", true},
	"udp6/zero-checksum-middle":   {"0+1+3+4 2", true},
	"tcp4/urgent-pointer-changed": {"0-4", false},
	"tcp6/urgent-pointer-changed": {"0-4", false},
}

// groKernelSkip are the table tests the kernel is not asked about: it
// merges the segments of hop-by-hop-second (Hop-by-Hop Options after
// another extension header, which RFC 8200 forbids and IPv6 input drops),
// and Split, which refuses such packets, cannot re-split its result.
var groKernelSkip = map[string]bool{"tcp6/hop-by-hop-second": true}

// groKernelCases are the table tests' batches that are IP packets the
// kernel takes, and the 64-datagram cap of a UDP merge.
func groKernelCases(t *testing.T) []groKernelCase {
	all := transportCases(t)
	for _, c := range mixedCases(t) {
		c.name = "mixed/" + c.name
		all = append(all, c)
	}
	all = append(all, groCase{name: "udp4/64-cap", in: udpStream(t, false, groBurstMax, 100, nil)})
	var cs []groKernelCase
	for _, c := range all {
		d := groKernelDiffs[c.name]
		sendable := !slices.ContainsFunc(c.in, func(p []byte) bool { _, _, ok := ipAddrs(p); return !ok })
		if !c.noTCP && !c.noUDP && sendable && len(c.in) <= groBurstMax && !groKernelSkip[c.name] {
			cs = append(cs, groKernelCase{name: c.name, in: c.in, kernel: d.kernel, reorders: d.reorders})
		}
	}
	return cs
}

func TestGROKernelDifferential(t *testing.T) {
	lab := newGROLab(t)
	t.Logf("kernel %s", kernelRelease())
	co, err := NewCoalescer(CoalescerConfig{HeaderSize: HeaderSize, TCP: true, UDP: true, MaxBatch: groBurstMax})
	netlab.Must(t, err)
	for _, c := range groKernelCases(t) {
		t.Run(c.name, func(t *testing.T) {
			if slices.ContainsFunc(c.in, isUDP) {
				// The capture cannot read a UDP GRO super-packet.
				netlab.SkipWithout(t, netlab.VirtioNetUSO)
			}
			lab.compare(t, co, c)
		})
	}
}

// isUDP reports whether p is a UDP packet (IPv6: UDP right after the
// fixed header, or after extension headers Validate knows).
func isUDP(p []byte) bool {
	if l, err := Validate(p, Header{}); err == nil {
		return l.Proto() == protoUDP
	}
	switch {
	case len(p) >= 20 && p[0]>>4 == 4:
		return p[9] == protoUDP
	case len(p) >= 40 && p[0]>>4 == 6:
		return p[6] == protoUDP
	}
	return false
}

// groKernelOther are the cases where older or newer kernels' GRO merges
// otherwise than Linux 6.18's, which Coalesce follows: their output
// packets there (as groCase.want) and why. A kernel that gives exactly
// that output skips the case with the reason; any other output fails it
// as before.
var groKernelOther = map[string]struct{ kernel, why string }{
	"tcp4/cwr-first":      {"0-4", groCWRWhy},
	"tcp6/cwr-first":      {"0-4", groCWRWhy},
	"tcp4/cwr-middle":     {"0-1 2-4", groCWRWhy},
	"tcp6/cwr-middle":     {"0-1 2-4", groCWRWhy},
	"tcp4/id-fixed-no-df": {"0 1 2 3 4", "this kernel's GRO merges fixed IPv4 IDs only with DF set (inet_gro_receive); Linux 6.18, which Coalesce follows, merges them without DF too"},
	"tcp4/cwr-all":        {"0-4", groAccECNWhy},
	"tcp6/cwr-all":        {"0-4", groAccECNWhy},
}

const groAccECNWhy = "this kernel's GRO (AccECN) merges a run of segments that all carry CWR into one super-packet it marks SKB_GSO_TCP_ACCECN, CWR on every segment; Coalesce, as Linux 6.18, delivers each alone, which a TUN takes from every kernel (virtio-net's AccECN flag is newer still)"

const groCWRWhy = "this kernel's GRO lets a segment with CWR start a merge that the next segments join (tcp_gro_receive flushes only before it); Linux 6.18, which Coalesce follows, delivers it on its own"

// compare runs a case through the kernel (up to three times, should a
// flush at a jiffy boundary cut a burst) and through Coalesce.
func (lab *groLab) compare(t *testing.T, co *Coalescer, c groKernelCase) {
	ours := coalesce(t, co, c.in)
	want := groups(ours)
	if c.kernel != "" {
		want = parseGroups(t, c.kernel)
	}
	other, hasOther := groKernelOther[c.name]
	var otherWant [][]int
	if hasOther {
		otherWant = parseGroups(t, other.kernel)
	}
	var kernel []groOut
	for range 3 {
		kernel = lab.exchange(t, c.in)
		if g := sortedGroups(kernel); reflect.DeepEqual(g, want) || hasOther && reflect.DeepEqual(g, otherWant) {
			break
		}
	}
	got := sortedGroups(kernel)
	t.Logf("kernel %v (single packets' flags %v), ours %v", groups(kernel), singleFlags(kernel), groups(ours))
	if hasOther && reflect.DeepEqual(got, otherWant) {
		t.Skipf("the kernel merged %v, Coalesce %v: %s", got, want, other.why)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the kernel merged %v, want %v (ours %v)", got, want, groups(ours))
	}
	if reorders := flowReordered(c.in, kernel); reorders != c.reorders {
		t.Errorf("kernel delivery order %v; reorders a flow: %v, want %v", groups(kernel), reorders, c.reorders)
	}
	if c.kernel != "" {
		return
	}
	for _, o := range ours {
		if len(o.idx) > 1 {
			compareSuper(t, o, kernel)
		}
	}
}

// compareSuper compares one of our super-packets with the kernel's.
func compareSuper(t *testing.T, o groOut, kernel []groOut) {
	t.Helper()
	k := kernel[slices.IndexFunc(kernel, func(k groOut) bool { return slices.Equal(k.idx, o.idx) })]
	if k.hdr != o.hdr {
		t.Errorf("packets %v: kernel header %+v, ours %+v", o.idx, k.hdr, o.hdr)
	}
	if d := diffPackets(k.pkt, o.pkt); len(d) > 0 {
		t.Errorf("packets %v differ from the kernel's:\n%s", o.idx, strings.Join(d, "\n"))
	}
}

// sortedGroups returns the output packets' input indices ordered by their
// first packet.
func sortedGroups(outs []groOut) [][]int {
	g := groups(outs)
	slices.SortFunc(g, func(a, b []int) int { return a[0] - b[0] })
	return g
}

// singleFlags lists the virtio-net flags of the packets delivered alone.
func singleFlags(outs []groOut) []uint8 {
	var f []uint8
	for _, o := range outs {
		if len(o.idx) == 1 {
			f = append(f, o.hdr.Flags)
		}
	}
	return f
}
