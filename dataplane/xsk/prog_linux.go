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
//     version matches their EtherType, and that fit a UMEM frame.
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
//   - only frames that fit a UMEM frame (FrameSize less the 256 bytes of
//     XDP_PACKET_HEADROOM the kernel reserves in it: IP packets of up to
//     3826 bytes with 4096-byte frames): a longer one would be dropped
//     by the socket (XDP_STATISTICS rx_dropped) and is passed instead,
//     and counted (Oversize). The kernel then routes it: with forwarding
//     on, into the TUN device (or it answers "fragmentation needed" /
//     "packet too big" if it exceeds the TUN device's MTU); with
//     forwarding off it drops it, counted in its IP statistics.
// The program never changes a packet: TTL and hop limit are left to the
// kernel after the TUN device (see TestXDPReturnPathTTL).
//
// The counters live in a per-CPU array, one slot per queue and reason,
// and are bumped only on those slow paths. The fast path (a frame that
// is redirected) costs about 1 ns more than a plain prefix lookup
// (BenchmarkXDPProgram). The EtherType constants assume a little-endian
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
	xdpLPMKeyLen4      = 4 + 4
	xdpLPMKeyLen6      = 4 + 16
	xdpAttachedNone    = 0
	xdpPacketHeadroom  = 256 // XDP_PACKET_HEADROOM: the kernel's room before a received packet
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
	asv       *xdp.Program     // Program, Queues (array) and Sockets (XSKMAP)
	v4, v6    *ebpf.Map        // LPM tries of the redirect prefixes
	stats     *ebpf.Map        // per-CPU counters, xdpNumCounters per queue
	frameSize int              // UMEM frame size of the sockets (setFrameSize)
	mac       net.HardwareAddr // the MAC address the loaded program takes frames for
	id        ebpf.ProgramID
	keys      map[string]*ebpf.Map // installed LPM keys → their map
	lnk       xdplink.Link         // the attachment, once attached
}

// newXDPProgram creates the maps for queues 0..maxQueue. The program
// itself is loaded by attach, with the interface's MAC address, or by
// load.
func newXDPProgram(maxQueue int) (*xdpProgram, error) {
	p := &xdpProgram{asv: &xdp.Program{}, keys: map[string]*ebpf.Map{}, frameSize: DefaultFrameSize}
	if err := p.createMaps(maxQueue + 1); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// setFrameSize sets the sockets' UMEM frame size (DefaultFrameSize until
// then), before the program is loaded: longer frames are passed to the
// kernel and counted instead of being redirected into a socket that
// would drop them.
func (p *xdpProgram) setFrameSize(n int) { p.frameSize = n }

// createMaps creates the five maps.
func (p *xdpProgram) createMaps(queues int) error {
	specs := []struct {
		dst  **ebpf.Map
		spec ebpf.MapSpec
	}{
		{&p.asv.Queues, ebpf.MapSpec{Name: "gsop_qidconf", Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: uint32(queues)}},
		{&p.asv.Sockets, ebpf.MapSpec{Name: "gsop_xsks", Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: uint32(queues)}},
		{&p.v4, ebpf.MapSpec{Name: "gsop_redir4", Type: ebpf.LPMTrie, KeySize: xdpLPMKeyLen4, ValueSize: 1,
			MaxEntries: xdpMaxPrefixes, Flags: unix.BPF_F_NO_PREALLOC}},
		{&p.v6, ebpf.MapSpec{Name: "gsop_redir6", Type: ebpf.LPMTrie, KeySize: xdpLPMKeyLen6, ValueSize: 1,
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
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "gsop_xsk_redir",
		Type:         ebpf.XDP,
		License:      "GPL",
		Instructions: p.instructions(mac),
	})
	if err != nil {
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
//		void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
//		if (data + 16 > end) return XDP_PASS;           // no IP packet in there
//		int why = 0;                                     // 1 + the reason not to take it
//		if (data + FRAME_SIZE - 256 + 1 <= end) why = 1 + OVERSIZE;
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
// where count(q, c) adds one to slot q*4+c of the per-CPU stats array.
// The MAC address is compared as a host-order 32-bit and 16-bit word, as
// the loads see it. R6 keeps ctx, R7 why, across the map lookups.
func (p *xdpProgram) instructions(mac net.HardwareAddr) asm.Instructions {
	const (
		pass, redirect, count, v4, v6, v6Lookup = "pass", "redirect", "count", "ipv4", "ipv6", "v6lookup"
		badVersion, other, fits, dispatch       = "bad_version", "other_mac", "fits", "dispatch"
	)
	macLo := int32(binary.NativeEndian.Uint32(mac[0:4]))
	macHi := int32(binary.NativeEndian.Uint16(mac[4:6]))
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		// Only queues with a registered socket.
		asm.LoadMem(asm.R2, asm.R6, xdpMdRxQueue, asm.Word),
		asm.StoreMem(asm.RFP, -4, asm.R2, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, p.asv.Queues.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, pass),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.Word),
		asm.JEq.Imm(asm.R1, 0, pass),
		// Ethernet, and the first two bytes after it (a shorter frame
		// carries no IP packet).
		asm.LoadMem(asm.R2, asm.R6, xdpMdData, asm.Word),
		asm.LoadMem(asm.R3, asm.R6, xdpMdDataEnd, asm.Word),
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, xdpEthLen+2),
		asm.JGT.Reg(asm.R4, asm.R3, pass),
		// R7: why not to take it if it is ours (0: take it). Longer than
		// a UMEM frame takes?
		asm.Mov.Imm(asm.R7, 0),
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, int32(p.frameSize-xdpPacketHeadroom+1)),
		asm.JGT.Reg(asm.R4, asm.R3, fits),
		asm.Mov.Imm(asm.R7, 1+xdpCountOversize),
		// Sent to our MAC address? Else 1+OtherHost (I/G bit clear) or
		// 1+NotUnicast (set).
		asm.LoadMem(asm.R4, asm.R2, 0, asm.Word).WithSymbol(fits),
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
		asm.Mov.Imm(asm.R1, xdpIPv4End),
		asm.JEq.Imm(asm.R5, xdpEthTypeIPv4LE, badVersion),
		asm.Mov.Imm(asm.R1, xdpIPv6End),
		asm.JEq.Imm(asm.R5, xdpEthTypeIPv6LE, badVersion),
		asm.Ja.Label(pass),
	}
	insns = append(insns, p.ipv4Instructions(v4, pass, redirect)...)
	insns = append(insns, p.ipv6Instructions(v6, v6Lookup, pass)...)
	return append(insns,
		// Ours: take it unless R7 says why not.
		asm.JNE.Imm(asm.R7, 0, count).WithSymbol(redirect),
		// Redirect to the queue's socket; XDP_PASS if it has none (flags'
		// low bits are the fallback action, Linux 5.9+).
		asm.LoadMem(asm.R2, asm.R6, xdpMdRxQueue, asm.Word),
		asm.LoadMapPtr(asm.R1, p.asv.Sockets.FD()),
		asm.Mov.Imm(asm.R3, xdpPass),
		asm.FnRedirectMap.Call(),
		asm.Return(),
		// A version mismatch with the fixed IP header (R1 bytes) there.
		asm.Add.Reg(asm.R1, asm.R2).WithSymbol(badVersion),
		asm.JGT.Reg(asm.R1, asm.R3, pass),
		asm.Mov.Imm(asm.R7, 1+xdpCountVersion),
		// Count reason R7-1 of this queue (slow path), then pass.
		asm.LoadMem(asm.R1, asm.R6, xdpMdRxQueue, asm.Word).WithSymbol(count),
		asm.LSh.Imm(asm.R1, 2), // xdpNumCounters per queue
		asm.Add.Reg(asm.R1, asm.R7),
		asm.Add.Imm(asm.R1, -1),
		asm.StoreMem(asm.RFP, -4, asm.R1, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, p.stats.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, pass),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, xdpPass).WithSymbol(pass),
		asm.Return(),
	)
}

// ipv4Instructions looks the IPv4 destination up; R2 = data, R3 =
// data_end.
func (p *xdpProgram) ipv4Instructions(label, pass, redirect string) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R4, asm.R2).WithSymbol(label),
		asm.Add.Imm(asm.R4, xdpIPv4End),
		asm.JGT.Reg(asm.R4, asm.R3, pass),
		asm.LoadMem(asm.R5, asm.R2, xdpIPv4DstOff, asm.Word),
		asm.StoreMem(asm.RFP, -4, asm.R5, asm.Word),
		asm.StoreImm(asm.RFP, -8, 32, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.LoadMapPtr(asm.R1, p.v4.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, pass),
		asm.Ja.Label(redirect),
	}
}

// ipv6Instructions passes neighbour discovery and looks the IPv6
// destination up; it falls through to the redirect.
func (p *xdpProgram) ipv6Instructions(label, lookup, pass string) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R4, asm.R2).WithSymbol(label),
		asm.Add.Imm(asm.R4, xdpIPv6End),
		asm.JGT.Reg(asm.R4, asm.R3, pass),
		asm.LoadMem(asm.R5, asm.R2, xdpIPv6NextHdrOff, asm.Byte),
		asm.JNE.Imm(asm.R5, xdpICMPv6Proto, lookup),
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, xdpIPv6End+1),
		asm.JGT.Reg(asm.R4, asm.R3, pass),
		asm.LoadMem(asm.R5, asm.R2, xdpIPv6End, asm.Byte),
		asm.JLT.Imm(asm.R5, xdpNDFirstType, lookup),
		asm.JLE.Imm(asm.R5, xdpNDLastType, pass),
		asm.LoadMem(asm.R5, asm.R2, xdpIPv6DstOff, asm.DWord).WithSymbol(lookup),
		asm.StoreMem(asm.RFP, -16, asm.R5, asm.DWord),
		asm.LoadMem(asm.R5, asm.R2, xdpIPv6DstOff+8, asm.DWord),
		asm.StoreMem(asm.RFP, -8, asm.R5, asm.DWord),
		asm.StoreImm(asm.RFP, -20, 128, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -20),
		asm.LoadMapPtr(asm.R1, p.v6.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, pass),
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
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.prog == nil {
		return Stats{}, ErrClosed
	}
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
	st := make([]Stats, len(p.socks))
	for i, x := range p.socks {
		st[i] = x.Stats()
		if ps, err := p.ProgramStats(x.queueID); err == nil {
			st[i].Oversize, st[i].OtherHost = ps.Oversize, ps.OtherHost
			st[i].NotUnicast, st[i].VersionMismatch = ps.NotUnicast, ps.VersionMismatch
		}
	}
	return st
}

// xdpLPMKey encodes a prefix as struct bpf_lpm_trie_key: a host-order u32
// prefix length, then the address bytes in network order.
func xdpLPMKey(pfx netip.Prefix) []byte {
	a := pfx.Addr().AsSlice()
	k := make([]byte, 4+len(a))
	binary.NativeEndian.PutUint32(k, uint32(pfx.Bits()))
	copy(k[4:], a)
	return k
}

// setPrefixes makes the LPM maps hold exactly prefixes (already checked
// and masked): it adds the new ones first, then removes the stale ones.
func (p *xdpProgram) setPrefixes(prefixes []netip.Prefix) error {
	want := make(map[string]*ebpf.Map, len(prefixes))
	for _, pfx := range prefixes {
		m := p.v6
		if pfx.Addr().Is4() {
			m = p.v4
		}
		k := xdpLPMKey(pfx)
		want[string(k)] = m
		if err := m.Put(k, uint8(1)); err != nil {
			return fmt.Errorf("add redirect prefix %s: %w", pfx, err)
		}
		p.keys[string(k)] = m
	}
	for k, m := range p.keys {
		if _, ok := want[k]; ok {
			continue
		}
		if err := m.Delete([]byte(k)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove redirect prefix: %w", err)
		}
		delete(p.keys, k)
	}
	return nil
}

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
	case errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("xsk: attach XDP program to %s: %w: %w", link.Attrs().Name, ErrUnsupported, err)
	}
	return fmt.Errorf("xsk: attach XDP program to %s (%s): %w", link.Attrs().Name, mode, err)
}

// detach removes our program from the interface by closing its link: only
// our attachment can go, whatever else happened to the interface.
func (p *xdpProgram) detach() error {
	if p.lnk == nil {
		return nil
	}
	err := p.lnk.Close()
	p.lnk = nil
	if err != nil {
		return fmt.Errorf("xsk: detach XDP program: %w", err)
	}
	return nil
}
