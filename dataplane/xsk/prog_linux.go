package xsk

// The XDP program of the AF_XDP port and its attachment.
//
// We keep asavie/xdp's xdp.Program struct for the queue and XSKMAP maps and
// its Register and Close, but replace the rest of that package's program
// handling:
//   - xdp.NewProgram loads a program that redirects *every* packet of a
//     queue with a socket, so ARP, ND and traffic for the host itself would
//     vanish into the sockets. We load our own (below) that redirects only
//     what is the gateway's: IPv4/IPv6 packets whose destination is in the
//     redirect prefixes, sent to the NIC's own MAC address, whose IP
//     version matches their EtherType, and that the sockets take.
//   - xdp.Program.Attach first removes whatever XDP program is on the
//     interface, even someone else's. We attach through a BPF link, which
//     the kernel refuses when a program is already there (a clear error;
//     that program stays), which detaches exactly our program when closed,
//     and which the kernel closes itself if the process dies, so a killed
//     gateway leaves no program behind.
//   - xdp.Program.Unregister deletes from the queue map, an array map, and
//     array elements cannot be deleted (EINVAL), so it always fails before
//     it reaches the XSKMAP. We clear the entry instead.
//
// What the program takes, and what it leaves to the kernel (every "pass"
// below is XDP_PASS: the kernel then does with the frame what it would
// do without the program):
//   - only queues with a registered socket; everything on other queues
//     passes;
//   - only EtherType IPv4 (0x0800) or IPv6 (0x86DD) directly after the
//     Ethernet header: ARP, 802.1Q/802.1ad tagged frames and everything
//     else pass;
//   - only when the IP version nibble matches the EtherType: a mismatch
//     passes (the kernel's ip_rcv/ipv6_rcv drop it and count it as a
//     header error) and is counted (VersionMismatch); a frame too short
//     for the fixed IP header passes uncounted;
//   - IPv6 neighbour discovery (ICMPv6 types 133 to 137 directly after
//     the fixed header) passes;
//   - only destinations in the redirect prefixes (LPM tries), looked up
//     in the fixed IPv4 or IPv6 header (IPv4 options and fragments are
//     taken like any other packet). The program does not walk IPv6
//     extension headers: with a routing header the destination is the
//     fixed header's (the next segment, as a router forwards it), and an
//     ICMPv6 message behind extension headers is not recognised as
//     neighbour discovery (MLD, the one user of hop-by-hop options among
//     them, goes to multicast addresses and passes by the MAC rule);
//   - only frames sent to the NIC's own unicast MAC address (a constant
//     of the program, read from the interface when it is attached;
//     Port.Reattach loads the program again for a new address): for the
//     redirect prefixes, a frame to another host's MAC passes
//     (OtherHost: the kernel drops it as PACKET_OTHERHOST), and one to a
//     broadcast or multicast MAC passes (NotUnicast: the kernel never
//     forwards what came as PACKET_BROADCAST/MULTICAST, and delivers it
//     only to an address of its own);
//   - only frames the sockets take: with multi-buffer (Config.MultiBuffer;
//     the program is then loaded with BPF_F_XDP_HAS_FRAGS and reads the
//     frame's length, fragments included, with bpf_xdp_get_buff_len),
//     up to MaxChain UMEM frames of FrameSize less the 256 bytes of
//     XDP_PACKET_HEADROOM the kernel reserves in each (18 frames of 4096
//     bytes take any IP packet); without it, one such frame (IP packets
//     of up to 3826 bytes with 4096-byte frames). A longer frame would
//     be dropped by the socket (XDP_STATISTICS rx_dropped) or as a chain
//     too long, and is passed instead, and counted (Oversize). The
//     kernel then routes it: with forwarding on, into the TUN device (or
//     it answers "fragmentation needed" / "packet too big" if it exceeds
//     the TUN device's MTU); with forwarding off it drops it, counted in
//     its IP statistics.
//
// A program with frags may see a frame whose linear part (what it can
// read directly) ends before the headers it reads do: the kernel keeps
// up to about a page linear, but nothing promises that (BPF_PROG_TEST_RUN
// can cut a frame anywhere). Such a frame's headers are copied to the
// stack with bpf_xdp_load_bytes and read there, with the same rules.
//
// The program never changes a packet: TTL and hop limit are left to the
// kernel after the TUN device (see TestXDPReturnPathTTL).
//
// The counters live in a per-CPU array, one slot per queue and reason,
// and are bumped only on those slow paths. The fast path (a frame that
// is redirected) costs about 1 ns more than a plain prefix lookup
// (BenchmarkXDPProgram); with frags, its bpf_xdp_get_buff_len call adds
// about 3 ns to every frame. The EtherType constants assume a little-endian
// host (x86, arm64); the MAC address is encoded in the host's order.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/asavie/xdp"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	xdplink "github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/internal/port"
	"github.com/gsoplane/gsoplane/internal/prefix"
)

// XDP return codes and packet offsets used by the program.
const (
	xdpPass           = 2  // XDP_PASS
	xdpRedirectAction = 4  // XDP_REDIRECT
	xdpMdData         = 0  // struct xdp_md: data
	xdpMdDataEnd      = 4  // data_end
	xdpMdRxQueue      = 16 // rx_queue_index
	xdpEthLen         = 14
	xdpEthTypeIPv4LE  = 0x0008 // htons(0x0800) as a little-endian load sees it
	xdpEthTypeIPv6LE  = 0xDD86 // htons(0x86DD)
	// A little-endian 32-bit load at the EtherType sees it in the low 16
	// bits and the IP version in bits 20 to 23.
	xdpTypeVersionMask = 0x00F0FFFF
	xdpTypeVersionIPv4 = 0x00400000 | xdpEthTypeIPv4LE
	xdpTypeVersionIPv6 = 0x00600000 | xdpEthTypeIPv6LE
	xdpIPv4DstOff      = xdpEthLen + 16
	xdpIPv4End         = xdpEthLen + 20
	xdpIPv6NextHdrOff  = xdpEthLen + 6
	xdpIPv6DstOff      = xdpEthLen + 24
	xdpIPv6End         = xdpEthLen + 40
	xdpICMPv6Proto     = 58
	xdpNDFirstType     = 133 // router solicitation
	xdpNDLastType      = 137 // redirect
	xdpAttachedNone    = 0
)

// The program's counters, per queue: the frames for the redirect prefixes
// it passed to the kernel instead of redirecting them, by reason, and the
// IP frames whose version did not match their EtherType. Slot q*xdpNumCounters+c.
const (
	xdpCountOtherHost  = iota // unicast to another MAC address
	xdpCountNotUnicast        // to a broadcast or multicast MAC address
	xdpCountOversize          // longer than a UMEM frame takes
	xdpCountVersion           // IP version does not match the EtherType
	xdpNumCounters
)

// xdpProgram is our XDP program with its maps.
type xdpProgram struct {
	asv    *xdp.Program     // Program, Queues (array) and Sockets (XSKMAP)
	v4, v6 *ebpf.Map        // LPM tries of the redirect prefixes
	stats  *ebpf.Map        // per-CPU counters, xdpNumCounters per queue
	maxLen int              // the longest frame the sockets take (setReceive)
	frags  bool             // loaded with BPF_F_XDP_HAS_FRAGS (setReceive)
	mac    net.HardwareAddr // the MAC address the loaded program takes frames for
	id     ebpf.ProgramID
	tries  *prefix.Tries // the redirect prefixes in v4 and v6
	lnk    xdplink.Link  // the attachment, once attached
}

// newXDPProgram creates the maps for queues 0..maxQueue. The program
// itself is loaded by attach, with the interface's MAC address, or by
// load.
func newXDPProgram(maxQueue int) (*xdpProgram, error) {
	p := &xdpProgram{asv: &xdp.Program{}, maxLen: rxFrameLen(DefaultFrameSize)}
	if err := p.createMaps(maxQueue + 1); err != nil {
		p.close()
		return nil, err
	}
	p.tries = prefix.NewTries(p.v4, p.v6)
	return p, nil
}

// setReceive sets, before the program is loaded, the longest frame the
// sockets take (one UMEM frame of the default size until then) and
// whether the program takes multi-buffer frames (BPF_F_XDP_HAS_FRAGS):
// longer frames are passed to the kernel and counted (Oversize) instead
// of being redirected into a socket that would drop them.
func (p *xdpProgram) setReceive(maxLen int, frags bool) { p.maxLen, p.frags = maxLen, frags }

// xdpFragsFlag is the program flag of multi-buffer support (a variable
// so that a test can make the kernel refuse it).
var xdpFragsFlag uint32 = unix.BPF_F_XDP_HAS_FRAGS

// createMaps creates the five maps.
func (p *xdpProgram) createMaps(queues int) error {
	specs := []struct {
		dst  **ebpf.Map
		spec ebpf.MapSpec
	}{
		{&p.asv.Queues, ebpf.MapSpec{Name: "gsop_qidconf", Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: uint32(queues)}},
		{&p.asv.Sockets, ebpf.MapSpec{Name: "gsop_xsks", Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: uint32(queues)}},
		{&p.v4, ebpf.MapSpec{Name: "gsop_redir4", Type: ebpf.LPMTrie, KeySize: prefix.KeyLen4, ValueSize: 1,
			MaxEntries: xdpMaxPrefixes, Flags: unix.BPF_F_NO_PREALLOC}},
		{&p.v6, ebpf.MapSpec{Name: "gsop_redir6", Type: ebpf.LPMTrie, KeySize: prefix.KeyLen6, ValueSize: 1,
			MaxEntries: xdpMaxPrefixes, Flags: unix.BPF_F_NO_PREALLOC}},
		{&p.stats, ebpf.MapSpec{Name: "gsop_xdp_stats", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8,
			MaxEntries: uint32(queues * xdpNumCounters)}},
	}
	for _, s := range specs {
		m, err := ebpf.NewMap(&s.spec)
		if err != nil {
			return xdpBPFError("create BPF map "+s.spec.Name, err)
		}
		*s.dst = m
	}
	return nil
}

// xdpBPFError names the missing capability when the kernel refuses.
func xdpBPFError(what string, err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("%s: needs CAP_NET_ADMIN and CAP_BPF (or run as root): %w", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// load loads the program for an interface whose MAC address is mac,
// replacing (and closing) one loaded before, which must not be attached.
func (p *xdpProgram) load(mac net.HardwareAddr) error {
	if len(mac) != 6 {
		return fmt.Errorf("load XDP program: the interface has no Ethernet address (%v)", mac)
	}
	spec := &ebpf.ProgramSpec{
		Name:         "gsop_xsk_redir",
		Type:         ebpf.XDP,
		License:      "GPL",
		Instructions: p.instructions(mac),
	}
	if p.frags {
		spec.Flags = xdpFragsFlag
	}
	prog, err := ebpf.NewProgram(spec)
	switch {
	case err != nil && p.frags && errors.Is(err, unix.EINVAL):
		return fmt.Errorf("load XDP program: %w: %w", ErrNoMultiBuffer, err)
	case err != nil:
		return xdpBPFError("load XDP program", err)
	}
	if p.asv.Program != nil {
		p.asv.Program.Close()
	}
	p.asv.Program, p.mac = prog, slices.Clone(mac)
	info, err := prog.Info()
	if err != nil {
		return fmt.Errorf("XDP program info: %w", err)
	}
	id, ok := info.ID()
	if !ok {
		return errors.New("XDP program info: kernel reports no program ID")
	}
	p.id = id
	return nil
}

// instructions is the program for the MAC address mac. In C:
//
//	int prog(struct xdp_md *ctx) {
//		__u32 q = ctx->rx_queue_index, *on = bpf_map_lookup_elem(&qidconf, &q);
//		if (!on || !*on) return XDP_PASS;              // no socket on this queue
//		__u64 len = FRAGS ? bpf_xdp_get_buff_len(ctx) : ctx->data_end - ctx->data;
//		int why = 0;                                     // 1 + the reason not to take it
//		if (len > MAX_LEN) why = 1 + OVERSIZE;
//		void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
//		if (FRAGS && data + 55 > end && data + len > end) {
//			// The headers reach into the fragments: read a copy
//			// (addresses with bpf_xdp_load_bytes of their own).
//			if (len < 16) return XDP_PASS;
//			bpf_xdp_load_bytes(ctx, 0, copy, min(len, 55));
//			data = copy, end = copy + len;
//		}
//		if (data + 16 > end) return XDP_PASS;           // no IP packet in there
//		if (memcmp(eth->h_dest, MAC, 6))                 // not ours: another host's or a group
//			why = 1 + (eth->h_dest[0] & 1 ? NOT_UNICAST : OTHER_HOST);
//		__u16 proto = eth->h_proto;                      // 802.1Q and all but IP: pass
//		__u8 version = *(__u8 *)(data + 14) >> 4;
//		if (proto == htons(ETH_P_IP) && version == 4) {
//			if (data + 34 > end) return XDP_PASS;
//			struct { __u32 len; __u32 addr; } k = {32, ip->daddr};
//			if (!bpf_map_lookup_elem(&redir4, &k)) return XDP_PASS;
//		} else if (proto == htons(ETH_P_IPV6) && version == 6) {
//			if (data + 54 > end) return XDP_PASS;
//			if (ip6->nexthdr == IPPROTO_ICMPV6) {          // neighbour discovery: pass
//				if (data + 55 > end) return XDP_PASS;
//				if (icmp6->type >= 133 && icmp6->type <= 137) return XDP_PASS;
//			}
//			struct { __u32 len; __u8 addr[16]; } k = {128, ip6->daddr};
//			if (!bpf_map_lookup_elem(&redir6, &k)) return XDP_PASS;
//		} else {
//			if (proto == htons(ETH_P_IP) && data + 34 <= end ||
//			    proto == htons(ETH_P_IPV6) && data + 54 <= end)
//				count(q, VERSION);                       // the IP version is not the EtherType's
//			return XDP_PASS;
//		}
//		if (why) { count(q, why - 1); return XDP_PASS; } // ours, but not to take
//		return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
//	}
//
// where count(q, c) adds one to slot q*4+c of the per-CPU stats array,
// MAX_LEN is maxLen and FRAGS is frags (setReceive). The parsing is
// emitted twice when FRAGS is set: reading the packet directly (the fast
// path: the headers are in the frame's linear part) and reading a copy
// on the stack (xdpAccess). The MAC address is compared as a host-order
// 32-bit and 16-bit word, as the loads see it. R6 keeps ctx, R7 why and
// R8 len across the helper calls.
func (p *xdpProgram) instructions(mac net.HardwareAddr) asm.Instructions {
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		// Only queues with a registered socket.
		asm.LoadMem(asm.R2, asm.R6, xdpMdRxQueue, asm.Word),
		asm.StoreMem(asm.RFP, -4, asm.R2, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, p.asv.Queues.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, xdpLabelPass),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.Word),
		asm.JEq.Imm(asm.R1, 0, xdpLabelPass),
	}
	if p.frags {
		insns = append(insns, p.fragsLength()...)
		insns = append(insns, p.parse(xdpPacketAccess, mac)...)
		insns = append(insns, p.parse(xdpStackAccess, mac)...)
	} else {
		insns = append(insns, p.linearLength()...)
		insns = append(insns, p.parse(xdpPacketAccess, mac)...)
	}
	return append(insns, p.verdict()...)
}

// Labels shared by the parts of the program.
const (
	xdpLabelPass     = "pass"
	xdpLabelRedirect = "redirect"
	xdpLabelCount    = "count"
)

// xdpHdrLen is how much of a frame the program reads: up to the ICMPv6
// type after a fixed IPv6 header.
const xdpHdrLen = xdpIPv6End + 1

// The stack (offsets from the frame pointer): the queue or counter key
// at -4, the LPM keys at -8 (IPv4: prefix length, address) and -20
// (IPv6), and at xdpHdrCopy the copy of the headers of a multi-buffer
// frame whose linear part is shorter than xdpHdrLen (8-byte aligned:
// the verifier wants stack loads aligned).
const xdpHdrCopy = -80

// linearLength sets R7 to 1+Oversize if the frame is longer than maxLen,
// and R2 and R3 to data and data_end (a program without frags sees whole
// frames in their linear part).
func (p *xdpProgram) linearLength() asm.Instructions {
	return asm.Instructions{
		asm.LoadMem(asm.R2, asm.R6, xdpMdData, asm.Word),
		asm.LoadMem(asm.R3, asm.R6, xdpMdDataEnd, asm.Word),
		asm.Mov.Imm(asm.R7, 0),
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, int32(p.maxLen+1)),
		asm.JGT.Reg(asm.R4, asm.R3, xdpPacketAccess.label("start")),
		asm.Mov.Imm(asm.R7, 1+xdpCountOversize),
	}
}

// fragsLength sets R8 to the frame's length, fragments included, and R7
// to 1+Oversize if it is longer than maxLen; then it goes on to the
// direct parsing if the linear part holds the headers (or the whole
// frame), and else to the parsing of a copy of the headers.
func (p *xdpProgram) fragsLength() asm.Instructions {
	const fits, copyHdr, load = "fits", "copy_headers", "load_headers"
	direct := xdpPacketAccess.label("start")
	return asm.Instructions{
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.FnXdpGetBuffLen.Call(),
		asm.Mov.Reg(asm.R8, asm.R0),
		asm.Mov.Imm(asm.R7, 0),
		asm.JLE.Imm(asm.R8, int32(p.maxLen), fits),
		asm.Mov.Imm(asm.R7, 1+xdpCountOversize),
		asm.LoadMem(asm.R2, asm.R6, xdpMdData, asm.Word).WithSymbol(fits),
		asm.LoadMem(asm.R3, asm.R6, xdpMdDataEnd, asm.Word),
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, xdpHdrLen),
		asm.JLE.Reg(asm.R4, asm.R3, direct),
		asm.JGT.Imm(asm.R8, xdpHdrLen, copyHdr),
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Reg(asm.R4, asm.R8),
		asm.JLE.Reg(asm.R4, asm.R3, direct),
		// The headers reach into the fragments: copy them (a frame too
		// short for an IP packet passes, as the direct parsing does).
		asm.JLT.Imm(asm.R8, xdpEthLen+2, xdpLabelPass).WithSymbol(copyHdr),
		asm.Mov.Reg(asm.R4, asm.R8),
		asm.JLE.Imm(asm.R4, xdpHdrLen, load),
		asm.Mov.Imm(asm.R4, xdpHdrLen),
		asm.Mov.Reg(asm.R1, asm.R6).WithSymbol(load),
		asm.Mov.Imm(asm.R2, 0),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, xdpHdrCopy),
		asm.FnXdpLoadBytes.Call(),
		asm.JNE.Imm(asm.R0, 0, xdpLabelPass),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, xdpHdrCopy),
		asm.Ja.Label(xdpStackAccess.label("start")),
	}
}

// xdpAccess is how a parse reads the frame: R2 points at its first
// byte, in the packet (bounds: R3 = data_end) or in the copy on the
// stack (bounds: R8 = the frame's length, fragments included; addresses
// are read with bpf_xdp_load_bytes, as the copy ends at xdpHdrLen and
// the verifier wants stack loads aligned).
type xdpAccess struct {
	prefix string
	stack  bool
}

var (
	xdpPacketAccess = xdpAccess{prefix: "pkt_"}
	xdpStackAccess  = xdpAccess{prefix: "stk_", stack: true}
)

// label names a label of this parse.
func (a xdpAccess) label(name string) string { return a.prefix + name }

// need passes frames shorter than n bytes.
func (a xdpAccess) need(n int32) asm.Instructions {
	if a.stack {
		return asm.Instructions{asm.JLT.Imm(asm.R8, n, xdpLabelPass)}
	}
	return asm.Instructions{
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, n),
		asm.JGT.Reg(asm.R4, asm.R3, xdpLabelPass),
	}
}

// address copies the size (4 or 16) bytes of the frame at off to the
// stack at to (an LPM key's address); need(off+size) came first. It
// clobbers R1 to R5.
func (a xdpAccess) address(off int16, size int32, to int16) asm.Instructions {
	if a.stack {
		return asm.Instructions{
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.Mov.Imm(asm.R2, int32(off)),
			asm.Mov.Reg(asm.R3, asm.RFP),
			asm.Add.Imm(asm.R3, int32(to)),
			asm.Mov.Imm(asm.R4, size),
			asm.FnXdpLoadBytes.Call(),
			asm.JNE.Imm(asm.R0, 0, xdpLabelPass),
		}
	}
	if size == 4 {
		return asm.Instructions{asm.LoadMem(asm.R5, asm.R2, off, asm.Word), asm.StoreMem(asm.RFP, to, asm.R5, asm.Word)}
	}
	return asm.Instructions{
		asm.LoadMem(asm.R5, asm.R2, off, asm.DWord),
		asm.StoreMem(asm.RFP, to, asm.R5, asm.DWord),
		asm.LoadMem(asm.R5, asm.R2, off+8, asm.DWord),
		asm.StoreMem(asm.RFP, to+8, asm.R5, asm.DWord),
	}
}

// withSymbol labels the first instruction of insns.
func withSymbol(insns asm.Instructions, sym string) asm.Instructions {
	insns[0] = insns[0].WithSymbol(sym)
	return insns
}

// parse is the program's rules on a frame read through a, from its
// label "start": it ends at pass, count (reason R7-1) or redirect.
func (p *xdpProgram) parse(a xdpAccess, mac net.HardwareAddr) asm.Instructions {
	other, dispatch := a.label("other_mac"), a.label("dispatch")
	v4, v6, badV4, badV6 := a.label("ipv4"), a.label("ipv6"), a.label("bad_ipv4"), a.label("bad_ipv6")
	macLo := int32(binary.NativeEndian.Uint32(mac[0:4]))
	macHi := int32(binary.NativeEndian.Uint16(mac[4:6]))
	// Ethernet, and the first two bytes after it (a shorter frame
	// carries no IP packet).
	insns := withSymbol(a.need(xdpEthLen+2), a.label("start"))
	insns = append(insns,
		// Sent to our MAC address? Else 1+OtherHost (I/G bit clear) or
		// 1+NotUnicast (set).
		asm.LoadMem(asm.R4, asm.R2, 0, asm.Word),
		asm.JNE.Imm32(asm.R4, macLo, other),
		asm.LoadMem(asm.R4, asm.R2, 4, asm.Half),
		asm.JEq.Imm32(asm.R4, macHi, dispatch),
		asm.LoadMem(asm.R7, asm.R2, 0, asm.Byte).WithSymbol(other),
		asm.And.Imm(asm.R7, 1),
		asm.Add.Imm(asm.R7, 1+xdpCountOtherHost),
		// IPv4 or IPv6, with the IP version of the EtherType: one load
		// of the EtherType and the version nibble after it.
		asm.LoadMem(asm.R5, asm.R2, 12, asm.Word).WithSymbol(dispatch),
		asm.And.Imm(asm.R5, xdpTypeVersionMask),
		asm.JEq.Imm(asm.R5, xdpTypeVersionIPv4, v4),
		asm.JEq.Imm(asm.R5, xdpTypeVersionIPv6, v6),
		// Not IP, or an IP EtherType with another version: count that
		// if the fixed header is there.
		asm.And.Imm(asm.R5, 0xffff),
		asm.JEq.Imm(asm.R5, xdpEthTypeIPv4LE, badV4),
		asm.JEq.Imm(asm.R5, xdpEthTypeIPv6LE, badV6),
		asm.Ja.Label(xdpLabelPass),
	)
	insns = append(insns, p.ipv4(a, v4)...)
	insns = append(insns, p.ipv6(a, v6)...)
	for _, bad := range []struct {
		label string
		end   int32
	}{{badV4, xdpIPv4End}, {badV6, xdpIPv6End}} {
		insns = append(insns, withSymbol(a.need(bad.end), bad.label)...)
		insns = append(insns, asm.Mov.Imm(asm.R7, 1+xdpCountVersion), asm.Ja.Label(xdpLabelCount))
	}
	return insns
}

// ipv4 looks the IPv4 destination up.
func (p *xdpProgram) ipv4(a xdpAccess, label string) asm.Instructions {
	insns := withSymbol(a.need(xdpIPv4End), label)
	insns = append(insns, a.address(xdpIPv4DstOff, 4, -4)...)
	return append(insns,
		asm.StoreImm(asm.RFP, -8, 32, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.LoadMapPtr(asm.R1, p.v4.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, xdpLabelPass),
		asm.Ja.Label(xdpLabelRedirect),
	)
}

// ipv6 passes neighbour discovery and looks the IPv6 destination up.
func (p *xdpProgram) ipv6(a xdpAccess, label string) asm.Instructions {
	lookup := a.label("ipv6_lookup")
	insns := withSymbol(a.need(xdpIPv6End), label)
	insns = append(insns,
		asm.LoadMem(asm.R5, asm.R2, xdpIPv6NextHdrOff, asm.Byte),
		asm.JNE.Imm(asm.R5, xdpICMPv6Proto, lookup),
	)
	insns = append(insns, a.need(xdpIPv6End+1)...)
	insns = append(insns,
		asm.LoadMem(asm.R5, asm.R2, xdpIPv6End, asm.Byte),
		asm.JLT.Imm(asm.R5, xdpNDFirstType, lookup),
		asm.JLE.Imm(asm.R5, xdpNDLastType, xdpLabelPass),
	)
	insns = append(insns, withSymbol(a.address(xdpIPv6DstOff, 16, -16), lookup)...)
	return append(insns,
		asm.StoreImm(asm.RFP, -20, 128, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -20),
		asm.LoadMapPtr(asm.R1, p.v6.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, xdpLabelPass),
		asm.Ja.Label(xdpLabelRedirect),
	)
}

// verdict redirects a frame that is ours to take (R7 = 0), counts reason
// R7-1 of one that is ours but not to take, and passes.
func (p *xdpProgram) verdict() asm.Instructions {
	return asm.Instructions{
		asm.JNE.Imm(asm.R7, 0, xdpLabelCount).WithSymbol(xdpLabelRedirect),
		// Redirect to the queue's socket; XDP_PASS if it has none (flags'
		// low bits are the fallback action, Linux 5.9+).
		asm.LoadMem(asm.R2, asm.R6, xdpMdRxQueue, asm.Word),
		asm.LoadMapPtr(asm.R1, p.asv.Sockets.FD()),
		asm.Mov.Imm(asm.R3, xdpPass),
		asm.FnRedirectMap.Call(),
		asm.Return(),
		// Count reason R7-1 of this queue (slow path), then pass.
		asm.LoadMem(asm.R1, asm.R6, xdpMdRxQueue, asm.Word).WithSymbol(xdpLabelCount),
		asm.LSh.Imm(asm.R1, 2), // xdpNumCounters per queue
		asm.Add.Reg(asm.R1, asm.R7),
		asm.Add.Imm(asm.R1, -1),
		asm.StoreMem(asm.RFP, -4, asm.R1, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, p.stats.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, xdpLabelPass),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, xdpPass).WithSymbol(xdpLabelPass),
		asm.Return(),
	}
}

// xdpProgramCounters are the program's counters of one queue, summed
// over CPUs.
type xdpProgramCounters [xdpNumCounters]uint64

// counters reads the counters of queue.
func (p *xdpProgram) counters(queue int) (xdpProgramCounters, error) {
	var c xdpProgramCounters
	if queue < 0 || uint32((queue+1)*xdpNumCounters) > p.stats.MaxEntries() {
		return c, fmt.Errorf("xsk: XDP counters: no queue %d", queue)
	}
	var perCPU []uint64
	for i := range c {
		if err := p.stats.Lookup(uint32(queue*xdpNumCounters+i), &perCPU); err != nil {
			return c, fmt.Errorf("xsk: XDP counters of queue %d: %w", queue, err)
		}
		for _, v := range perCPU {
			c[i] += v
		}
	}
	return c, nil
}

// ProgramStats returns the XDP program's counters for queue, summed over
// CPUs: the Oversize, OtherHost, NotUnicast and VersionMismatch fields of
// Stats (the others are zero; Socket.Stats has those).
func (p *Port) ProgramStats(queue int) (Stats, error) {
	if !p.base.Lock() {
		return Stats{}, ErrClosed
	}
	defer p.base.Unlock()
	c, err := p.prog.counters(queue)
	if err != nil {
		return Stats{}, err
	}
	return Stats{Oversize: c[xdpCountOversize], OtherHost: c[xdpCountOtherHost],
		NotUnicast: c[xdpCountNotUnicast], VersionMismatch: c[xdpCountVersion]}, nil
}

// Stats returns each socket's counters with its queue's XDP program
// counters, in the order of Sockets; after Close, the sockets' final
// counters alone.
func (p *Port) Stats() []Stats {
	socks := p.Sockets()
	st := make([]Stats, len(socks))
	for i, x := range socks {
		st[i] = x.Stats()
		if ps, err := p.ProgramStats(x.queueID); err == nil {
			st[i].Oversize, st[i].OtherHost = ps.Oversize, ps.OtherHost
			st[i].NotUnicast, st[i].VersionMismatch = ps.NotUnicast, ps.VersionMismatch
		}
	}
	return st
}

// setPrefixes makes the LPM maps hold exactly prefixes (already checked
// and masked).
func (p *xdpProgram) setPrefixes(prefixes []netip.Prefix) error { return p.tries.Set(prefixes) }

// register directs queue's redirected packets to the socket fd (asavie's
// Register: XSKMAP entry, then the queue map's "socket present" flag).
func (p *xdpProgram) register(queue, fd int) error {
	if err := p.asv.Register(queue, fd); err != nil {
		return fmt.Errorf("xsk: register socket of queue %d: %w", queue, err)
	}
	return nil
}

// unregister makes the program pass queue's packets again. It replaces
// asavie's Unregister, which fails on the array map (see the file comment).
func (p *xdpProgram) unregister(queue int) error {
	if err := p.asv.Queues.Put(uint32(queue), uint32(0)); err != nil {
		return fmt.Errorf("xsk: unregister queue %d: %w", queue, err)
	}
	err := p.asv.Sockets.Delete(uint32(queue))
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("xsk: unregister socket of queue %d: %w", queue, err)
	}
	return nil
}

// close releases the program and its maps (asavie's Close for the three
// it knows about, the program included once loaded).
func (p *xdpProgram) close() error {
	err := p.asv.Close()
	for _, m := range []**ebpf.Map{&p.v4, &p.v6, &p.stats} {
		if *m != nil {
			err = errors.Join(err, (*m).Close())
			*m = nil
		}
	}
	return err
}

// xdpModeFlags are the bpf_link attach flags of each mode.
var xdpModeFlags = map[Mode]xdplink.XDPAttachFlags{
	ModeNative:  xdplink.XDPDriverMode,
	ModeGeneric: xdplink.XDPGenericMode,
}

// attachedXDP describes the XDP program attached to the link, if any.
func attachedXDP(link netlink.Link) (attached bool, id uint32) {
	x := link.Attrs().Xdp
	if x == nil || x.AttachMode == xdpAttachedNone {
		return false, 0
	}
	return true, x.ProgId
}

// attach loads the program for the link's MAC address (unless loaded
// for it already: Port.Reattach after a MAC change loads it again) and
// attaches it to the link in mode (Auto: native, then generic when the
// driver refuses native) without replacing an attached program. It
// returns the mode it got.
func (p *xdpProgram) attach(link netlink.Link, mode Mode) (Mode, error) {
	if mac := link.Attrs().HardwareAddr; p.asv.Program == nil || !bytes.Equal(mac, p.mac) {
		if err := p.load(mac); err != nil {
			return mode, fmt.Errorf("xsk: %s: %w", link.Attrs().Name, err)
		}
	}
	if mode != ModeAuto {
		return mode, p.attachMode(link, mode)
	}
	errNative := p.attachMode(link, ModeNative)
	if errNative == nil || errors.Is(errNative, ErrAttached) {
		return ModeNative, errNative
	}
	if err := p.attachMode(link, ModeGeneric); err != nil {
		return ModeGeneric, fmt.Errorf("%w (native mode: %v)", err, errNative)
	}
	return ModeGeneric, nil
}

// attachMode attaches the program in one mode through a BPF link. The
// kernel refuses a link on an interface that already has a program, and
// detaches ours when the link's last file descriptor is closed, even when
// the process dies without cleaning up.
func (p *xdpProgram) attachMode(link netlink.Link, mode Mode) error {
	l, err := xdplink.AttachXDP(xdplink.XDPOptions{Program: p.asv.Program, Interface: link.Attrs().Index, Flags: xdpModeFlags[mode]})
	switch {
	case err == nil:
		p.lnk = l
		return nil
	case errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST):
		return fmt.Errorf("xsk: attach XDP program to %s (%s): %w: %w", link.Attrs().Name, mode, ErrAttached, err)
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("xsk: attach XDP program to %s: needs CAP_NET_ADMIN and CAP_BPF: %w", link.Attrs().Name, err)
	case errors.Is(err, unix.ERANGE) && !p.frags:
		return fmt.Errorf("xsk: attach XDP program to %s (%s): the driver refuses the MTU %d to a program without multi-buffer (Config.MultiBuffer): %w",
			link.Attrs().Name, mode, link.Attrs().MTU, err)
	case errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("xsk: attach XDP program to %s: %w: %w", link.Attrs().Name, ErrUnsupported, err)
	}
	return fmt.Errorf("xsk: attach XDP program to %s (%s): %w", link.Attrs().Name, mode, err)
}

// detach removes our program from the interface by closing its link: only
// our attachment can go, whatever else happened to the interface.
func (p *xdpProgram) detach() error { return port.Detach(&p.lnk, "XDP program") }
