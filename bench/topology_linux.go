package main

// The reference topology (netlab.Topology), built fresh for every
// measured run: the gateway and the sender in namespace A, the receiver
// in B, a veth pair gw-a/gw-b with two queues between them. Traffic only
// ever goes to 198.18.0.0/15 and 2001:2::/48.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

const (
	nicA    = netlab.NICA
	nicB    = netlab.NICB
	tunName = "gsotun0"
	labTag  = "bench" // the bench's namespaces are netlab.Prefix + "bench-…"
)

var (
	app4    = netlab.App4
	srv4    = netlab.Srv4
	aRoutes = netlab.AppRoutes
)

// lab is one instance of the topology, with what the bench adds to it.
type lab struct {
	*netlab.Topology
	// bpf are the BPF programs the bench loaded (dropUDPAtB,
	// countAtIngress) and their attachments, closed in reverse order.
	bpf []io.Closer
}

// liveLabs are the labs not yet closed (the reference topology, or a
// pair for the tunnel scenario), removed by closeAllLabs on the way out
// (also after a failure or an interrupt).
var liveLabs struct {
	sync.Mutex
	m map[io.Closer]bool
}

// track records a lab as live.
func track(c io.Closer) {
	liveLabs.Lock()
	defer liveLabs.Unlock()
	if liveLabs.m == nil {
		liveLabs.m = make(map[io.Closer]bool)
	}
	liveLabs.m[c] = true
}

// closeLab removes a lab and forgets it.
func closeLab(c io.Closer) error {
	liveLabs.Lock()
	delete(liveLabs.m, c)
	liveLabs.Unlock()
	return c.Close()
}

// newPairLab builds two namespaces over a veth (netlab.Pair), tracked
// as a lab.
func newPairLab() (*netlab.Pair, error) {
	p, err := netlab.NewPair(labTag)
	if err != nil {
		return nil, err
	}
	track(p)
	return p, nil
}

// newLab builds the topology without a gateway: the caller adds one, or
// the kernel route (RouteKernel).
func newLab() (*lab, error) {
	tp, err := newTopology()
	if err != nil {
		return nil, err
	}
	l := &lab{Topology: tp}
	track(l)
	return l, nil
}

// labNICs are the real NICs the labs are built on (-link nics), or none:
// a veth pair.
var labNICs [2]string

// newTopology builds the reference topology on the wire -link says.
func newTopology() (*netlab.Topology, error) {
	if labNICs[0] != "" {
		return netlab.NewTopologyOnNICs(labTag, labNICs[0], labNICs[1])
	}
	return netlab.NewTopology(labTag)
}

// close removes the lab (Close) and forgets it.
func (l *lab) close() error { return closeLab(l) }

// Close detaches and closes the bench's BPF programs and deletes the
// namespaces (and with them every device inside).
func (l *lab) Close() error {
	var errs []error
	for i := len(l.bpf) - 1; i >= 0; i-- {
		errs = append(errs, l.bpf[i].Close())
	}
	l.bpf = nil
	return errors.Join(append(errs, l.Topology.Close())...)
}

// closeAllLabs removes every lab still open.
func closeAllLabs() error {
	liveLabs.Lock()
	labs := make([]io.Closer, 0, len(liveLabs.m))
	for l := range liveLabs.m {
		labs = append(labs, l)
	}
	liveLabs.Unlock()
	var errs []error
	for _, l := range labs {
		errs = append(errs, closeLab(l))
	}
	return errors.Join(errs...)
}

// setNoQueue gives a device in A the noqueue qdisc, as the gateway does
// for its TUN device, so that peers' TUN devices are set up alike.
func (l *lab) setNoQueue(name string) error {
	dev, err := l.A.Link(name)
	if err != nil {
		return err
	}
	q := &netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: dev.Attrs().Index, Parent: netlink.HANDLE_ROOT}, QdiscType: "noqueue"}
	if err := l.A.Netlink().QdiscReplace(q); err != nil {
		return fmt.Errorf("noqueue qdisc on %s: %w", name, err)
	}
	return nil
}

// dropUDPAtB drops IPv4 UDP packets to port on gw-b's ingress with a tcx
// eBPF program, so that a small-packet flood costs B as little as
// possible; ARP and everything else pass.
func (l *lab) dropUDPAtB(port int) error {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "gsob_udp_drop", Type: ebpf.SchedCLS, License: "GPL", Instructions: udpDropInstructions(port),
	})
	if err != nil {
		return fmt.Errorf("load the UDP drop program: %w", err)
	}
	l.bpf = append(l.bpf, prog)
	dev, err := l.B.Link(nicB)
	if err != nil {
		return err
	}
	return l.B.Run(func() error { // the interface index is B's
		lk, err := link.AttachTCX(link.TCXOptions{Interface: dev.Attrs().Index, Program: prog, Attach: ebpf.AttachTCXIngress})
		if err != nil {
			return fmt.Errorf("attach the UDP drop program to %s: %w", nicB, err)
		}
		l.bpf = append(l.bpf, lk)
		return nil
	})
}

// udpDropInstructions is, in C, on a tc program's __sk_buff (data at the
// Ethernet header on ingress):
//
//	if (data + 38 > data_end) return TCX_PASS;
//	if (eth->h_proto != htons(ETH_P_IP) || ip->ihl_version != 0x45 ||
//	    ip->protocol != IPPROTO_UDP || udp->dest != htons(port)) return TCX_PASS;
//	return TCX_DROP;
func udpDropInstructions(port int) asm.Instructions {
	const (
		skbData, skbDataEnd = 76, 80 // offsets in struct __sk_buff
		tcxPass, tcxDrop    = 0, 2
	)
	be := func(v uint16) int32 { return int32(v>>8 | v<<8&0xff00) } // htons, as a little-endian load sees it
	return asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, skbData, asm.Word),
		asm.LoadMem(asm.R3, asm.R1, skbDataEnd, asm.Word),
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, 14+20+4),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 12, asm.Half),
		asm.JNE.Imm(asm.R5, be(0x0800), "pass"),
		asm.LoadMem(asm.R5, asm.R2, 14, asm.Byte),
		asm.JNE.Imm(asm.R5, 0x45, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 14+9, asm.Byte),
		asm.JNE.Imm(asm.R5, 17, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 14+20+2, asm.Half),
		asm.JNE.Imm(asm.R5, be(uint16(port)), "pass"),
		asm.Mov.Imm(asm.R0, tcxDrop),
		asm.Return(),
		asm.Mov.Imm(asm.R0, tcxPass).WithSymbol("pass"),
		asm.Return(),
	}
}

// rxPacketsB returns how many packets gw-b has received.
func (l *lab) rxPacketsB() uint64 {
	dev, err := l.B.Link(nicB)
	if err != nil || dev.Attrs().Statistics == nil {
		return 0
	}
	return dev.Attrs().Statistics.RxPackets
}

// udpCounterB returns a field of B's Udp counters (/proc/net/snmp), such
// as RcvbufErrors (datagrams dropped for want of socket buffer) or NoPorts
// (datagrams for a port nobody listens on).
func (l *lab) udpCounterB(field string) uint64 {
	var v uint64
	l.B.Run(func() error {
		// /proc/thread-self/net is the namespace of this (locked) thread.
		b, err := os.ReadFile("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		v = snmpField(string(b), "Udp:", field)
		return nil
	})
	return v
}
