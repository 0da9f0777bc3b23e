package afpacket

// The port's two eBPF programs and their maps. Both test the same thing,
// "is this a packet the port takes": a frame for this host (PACKET_HOST),
// without a VLAN tag in the metadata, IPv4 or IPv6, not IPv6 neighbour
// discovery, whose destination is in one of the redirect prefixes (two
// LPM tries, shared). The socket filter (SO_ATTACH_BPF on every socket)
// keeps what the test accepts and nothing else, so ARP, ND and the host's
// own traffic never reach the return path; the tcx ingress program drops
// exactly what the test accepts, so the host's stack does not handle
// those packets a second time. Both run on a __sk_buff whose data starts
// at the Ethernet header: packet_rcv pushes it back for a SOCK_RAW socket
// before it runs the filter, and tcx pushes it for its programs.

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/internal/ethernet"
	"github.com/gsoplane/gsoplane/internal/port"
	"github.com/gsoplane/gsoplane/internal/prefix"
)

// Offsets in struct __sk_buff, return codes and packet offsets.
const (
	skbPktType     = 4  // __sk_buff.pkt_type
	skbProtocol    = 16 // __sk_buff.protocol: skb->protocol, network order
	skbVLANPresent = 20 // __sk_buff.vlan_present
	packetHost     = 0  // PACKET_HOST
	protoIPv4LE    = 0x0008
	protoIPv6LE    = 0xDD86
	tcxNext        = -1 // TCX_NEXT: the next program (or the stack) decides
	tcxDrop        = 2  // TCX_DROP
	filterKeep     = -1 // a socket filter's snap length: the whole packet
	filterDrop     = 0
	ipv4DstOff     = ethernet.HeaderLen + 16
	ipv6NextHdrOff = ethernet.HeaderLen + 6
	ipv6DstOff     = ethernet.HeaderLen + 24
	icmpv6TypeOff  = ethernet.HeaderLen + 40
	icmpv6Proto    = 58
	ndFirstType    = 133 // router solicitation
	ndLastType     = 137 // redirect
)

// filter is the port's programs and maps, and the tcx attachment.
type filter struct {
	v4, v6 *ebpf.Map     // LPM tries of the redirect prefixes
	sock   *ebpf.Program // socket filter: keep what the port takes
	drop   *ebpf.Program // tcx ingress: drop what the port takes
	tcx    link.Link     // the drop program's attachment, once attached
	tries  *prefix.Tries // v4 and v6 as the redirect prefixes
}

// newFilter creates the maps and loads both programs.
func newFilter() (*filter, error) {
	f := &filter{}
	if err := f.load(); err != nil {
		return nil, errors.Join(err, f.close())
	}
	f.tries = prefix.NewTries(f.v4, f.v6)
	return f, nil
}

func (f *filter) load() error {
	var err error
	spec := func(name string, keyLen uint32) *ebpf.MapSpec {
		return &ebpf.MapSpec{Name: name, Type: ebpf.LPMTrie, KeySize: keyLen, ValueSize: 1,
			MaxEntries: maxPrefixes, Flags: unix.BPF_F_NO_PREALLOC}
	}
	if f.v4, err = ebpf.NewMap(spec("gsop_pkt_redir4", prefix.KeyLen4)); err != nil {
		return bpfError("create BPF map", err)
	}
	if f.v6, err = ebpf.NewMap(spec("gsop_pkt_redir6", prefix.KeyLen6)); err != nil {
		return bpfError("create BPF map", err)
	}
	f.sock, err = ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "gsop_pkt_keep", Type: ebpf.SocketFilter, License: "GPL",
		Instructions: matchInstructions(f.v4, f.v6, filterKeep, filterDrop),
	})
	if err != nil {
		return bpfError("load the socket filter", err)
	}
	f.drop, err = ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "gsop_pkt_drop", Type: ebpf.SchedCLS, License: "GPL",
		Instructions: matchInstructions(f.v4, f.v6, tcxDrop, tcxNext),
	})
	if err != nil {
		return bpfError("load the tcx ingress program", err)
	}
	return nil
}

// bpfError names the missing capability when the kernel refuses.
func bpfError(what string, err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("afpacket: %s: needs CAP_BPF (or CAP_SYS_ADMIN): %w", what, err)
	}
	return fmt.Errorf("afpacket: %s: %w", what, err)
}

// matchInstructions is the test, returning yes or no. In C, on a
// __sk_buff whose data starts at the Ethernet header:
//
//	if (skb->pkt_type != PACKET_HOST || skb->vlan_present) return no;
//	if (skb->protocol == htons(ETH_P_IP)) {
//		struct { __u32 len; __u32 addr; } k = {32};
//		if (bpf_skb_load_bytes(skb, 14+16, &k.addr, 4)) return no;
//		return bpf_map_lookup_elem(&redir4, &k) ? yes : no;
//	}
//	if (skb->protocol != htons(ETH_P_IPV6)) return no;
//	__u8 b;
//	if (bpf_skb_load_bytes(skb, 14+6, &b, 1)) return no;
//	if (b == IPPROTO_ICMPV6) {                // neighbour discovery: no
//		if (bpf_skb_load_bytes(skb, 14+40, &b, 1)) return no;
//		if (b >= 133 && b <= 137) return no;
//	}
//	struct { __u32 len; __u8 addr[16]; } k = {128};
//	if (bpf_skb_load_bytes(skb, 14+24, k.addr, 16)) return no;
//	return bpf_map_lookup_elem(&redir6, &k) ? yes : no;
//
// bpf_skb_load_bytes, not direct packet access: socket filters have none,
// and it works on the paged super-packets GRO makes.
func matchInstructions(v4, v6 *ebpf.Map, yes, no int32) asm.Instructions {
	const lNo, lYes, lV4, lV6, lLookup6 = "no", "yes", "v4", "v6", "lookup6"
	load := func(off, stack, n int32) asm.Instructions { // bpf_skb_load_bytes(skb, off, fp+stack, n)
		return asm.Instructions{
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.Mov.Imm(asm.R2, off),
			asm.Mov.Reg(asm.R3, asm.RFP),
			asm.Add.Imm(asm.R3, stack),
			asm.Mov.Imm(asm.R4, n),
			asm.FnSkbLoadBytes.Call(),
			asm.JNE.Imm(asm.R0, 0, lNo),
		}
	}
	lookup := func(m *ebpf.Map, key int32) asm.Instructions { // bpf_map_lookup_elem(m, fp+key)
		return asm.Instructions{
			asm.LoadMapPtr(asm.R1, m.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, key),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, lNo),
			asm.Ja.Label(lYes),
		}
	}
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R6, skbPktType, asm.Word),
		asm.JNE.Imm(asm.R2, packetHost, lNo),
		asm.LoadMem(asm.R2, asm.R6, skbVLANPresent, asm.Word),
		asm.JNE.Imm(asm.R2, 0, lNo),
		asm.LoadMem(asm.R2, asm.R6, skbProtocol, asm.Word),
		asm.JEq.Imm(asm.R2, protoIPv4LE, lV4),
		asm.JEq.Imm(asm.R2, protoIPv6LE, lV6),
		asm.Ja.Label(lNo),
	}
	// IPv4: key at fp-8 (prefix length, then the address at fp-4).
	v4Load := load(ipv4DstOff, -4, 4)
	v4Load[0] = v4Load[0].WithSymbol(lV4)
	insns = append(insns, v4Load...)
	insns = append(insns, asm.StoreImm(asm.RFP, -8, 32, asm.Word))
	insns = append(insns, lookup(v4, -8)...)
	// IPv6: a scratch byte at fp-24, the key at fp-20 (address at fp-16).
	v6Load := load(ipv6NextHdrOff, -24, 1)
	v6Load[0] = v6Load[0].WithSymbol(lV6)
	insns = append(insns, v6Load...)
	insns = append(insns,
		asm.LoadMem(asm.R2, asm.RFP, -24, asm.Byte),
		asm.JNE.Imm(asm.R2, icmpv6Proto, lLookup6))
	insns = append(insns, load(icmpv6TypeOff, -24, 1)...)
	insns = append(insns,
		asm.LoadMem(asm.R2, asm.RFP, -24, asm.Byte),
		asm.JLT.Imm(asm.R2, ndFirstType, lLookup6),
		asm.JLE.Imm(asm.R2, ndLastType, lNo))
	v6Addr := load(ipv6DstOff, -16, 16)
	v6Addr[0] = v6Addr[0].WithSymbol(lLookup6)
	insns = append(insns, v6Addr...)
	insns = append(insns, asm.StoreImm(asm.RFP, -20, 128, asm.Word))
	insns = append(insns, lookup(v6, -20)...)
	return append(insns,
		asm.Mov.Imm(asm.R0, yes).WithSymbol(lYes),
		asm.Return(),
		asm.Mov.Imm(asm.R0, no).WithSymbol(lNo),
		asm.Return(),
	)
}

// setPrefixes makes the tries hold exactly prefixes (normalised): new
// ones first, then the stale ones go.
func (f *filter) setPrefixes(prefixes []netip.Prefix) error {
	if err := f.tries.Set(prefixes); err != nil {
		return fmt.Errorf("afpacket: %w", err)
	}
	return nil
}

// attachSocket attaches the socket filter to fd.
func (f *filter) attachSocket(fd int) error {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ATTACH_BPF, f.sock.FD()); err != nil {
		return fmt.Errorf("attach the socket filter: %w", bpfError("SO_ATTACH_BPF", err))
	}
	return nil
}

// attach attaches the drop program to the interface's tcx ingress, ahead
// of every other tcx program there (link.Head), through a BPF link: the
// kernel detaches it when the link's last file descriptor closes, also
// when the process dies. Call it on a thread in the interface's network
// namespace.
func (f *filter) attach(ifname string, ifindex int) error {
	l, err := link.AttachTCX(link.TCXOptions{
		Interface: ifindex, Program: f.drop, Attach: ebpf.AttachTCXIngress, Anchor: link.Head(),
	})
	switch {
	case err == nil:
		f.tcx = l
		return nil
	case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES):
		return fmt.Errorf("afpacket: attach the tcx ingress program to %s: needs CAP_NET_ADMIN and CAP_BPF: %w", ifname, err)
	case errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("afpacket: attach the tcx ingress program to %s: tcx needs Linux 6.6 or later: %w", ifname, err)
	}
	return fmt.Errorf("afpacket: attach the tcx ingress program to %s: %w", ifname, err)
}

// detach closes the tcx link: our program, and only it, leaves the
// interface.
func (f *filter) detach() error { return port.Detach(&f.tcx, "tcx ingress program") }

// close detaches and releases the programs and the maps; idempotent.
func (f *filter) close() error {
	err := f.detach()
	for _, p := range []**ebpf.Program{&f.sock, &f.drop} {
		if *p != nil {
			err = errors.Join(err, (*p).Close())
			*p = nil
		}
	}
	for _, m := range []**ebpf.Map{&f.v4, &f.v6} {
		if *m != nil {
			err = errors.Join(err, (*m).Close())
			*m = nil
		}
	}
	return err
}
