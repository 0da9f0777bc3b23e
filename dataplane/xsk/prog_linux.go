package xsk

// The XDP program of the AF_XDP port and its attachment.
//
// We keep asavie/xdp's xdp.Program struct for the queue and XSKMAP maps and
// its Register and Close, but replace the rest of that package's program
// handling:
//   - xdp.NewProgram loads a program that redirects *every* packet of a
//     queue with a socket, so ARP, ND and traffic for the host itself would
//     vanish into the sockets. We load our own (below) that redirects only
//     IPv4/IPv6 packets whose destination is in the redirect prefixes.
//   - xdp.Program.Attach first removes whatever XDP program is on the
//     interface, even someone else's. We attach through a BPF link, which
//     the kernel refuses when a program is already there (a clear error;
//     that program stays), which detaches exactly our program when closed,
//     and which the kernel closes itself if the process dies, so a killed
//     gateway leaves no program behind.
//   - xdp.Program.Unregister deletes from the queue map, an array map, and
//     array elements cannot be deleted (EINVAL), so it always fails before
//     it reaches the XSKMAP. We clear the entry instead.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

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
	xdpMdData         = 0  // struct xdp_md: data
	xdpMdDataEnd      = 4  // data_end
	xdpMdRxQueue      = 16 // rx_queue_index
	xdpEthLen         = 14
	xdpEthTypeIPv4LE  = 0x0008 // htons(0x0800) as a little-endian load sees it
	xdpEthTypeIPv6LE  = 0xDD86 // htons(0x86DD)
	xdpIPv4DstOff     = xdpEthLen + 16
	xdpIPv4End        = xdpEthLen + 20
	xdpIPv6NextHdrOff = xdpEthLen + 6
	xdpIPv6DstOff     = xdpEthLen + 24
	xdpIPv6End        = xdpEthLen + 40
	xdpICMPv6Proto    = 58
	xdpNDFirstType    = 133 // router solicitation
	xdpNDLastType     = 137 // redirect
	xdpLPMKeyLen4     = 4 + 4
	xdpLPMKeyLen6     = 4 + 16
	xdpAttachedNone   = 0
)

// xdpProgram is our XDP program with its maps.
type xdpProgram struct {
	asv    *xdp.Program // Program, Queues (array) and Sockets (XSKMAP)
	v4, v6 *ebpf.Map    // LPM tries of the redirect prefixes
	id     ebpf.ProgramID
	keys   map[string]*ebpf.Map // installed LPM keys → their map
	lnk    xdplink.Link         // the attachment, once attached
}

// newXDPProgram creates the maps and loads the program for queues 0..maxQueue.
func newXDPProgram(maxQueue int) (*xdpProgram, error) {
	p := &xdpProgram{asv: &xdp.Program{}, keys: map[string]*ebpf.Map{}}
	err := p.createMaps(maxQueue + 1)
	if err == nil {
		err = p.load()
	}
	if err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// createMaps creates the four maps.
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

// load loads the program.
func (p *xdpProgram) load() error {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "gsop_xsk_redir",
		Type:         ebpf.XDP,
		License:      "GPL",
		Instructions: p.instructions(),
	})
	if err != nil {
		return xdpBPFError("load XDP program", err)
	}
	p.asv.Program = prog
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

// instructions is the program. In C:
//
//	int prog(struct xdp_md *ctx) {
//		__u32 q = ctx->rx_queue_index, *on = bpf_map_lookup_elem(&qidconf, &q);
//		if (!on || !*on) return XDP_PASS;             // no socket on this queue
//		void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
//		if (data + 14 > end) return XDP_PASS;
//		__u16 proto = ((struct ethhdr *)data)->h_proto; // 802.1Q and all but IP: pass
//		if (proto == htons(ETH_P_IP)) {
//			if (data + 34 > end) return XDP_PASS;
//			struct { __u32 len; __u32 addr; } k = {32, ip->daddr};
//			if (!bpf_map_lookup_elem(&redir4, &k)) return XDP_PASS;
//		} else if (proto == htons(ETH_P_IPV6)) {
//			if (data + 54 > end) return XDP_PASS;
//			if (ip6->nexthdr == IPPROTO_ICMPV6) {         // neighbour discovery: pass
//				if (data + 55 > end) return XDP_PASS;
//				if (icmp6->type >= 133 && icmp6->type <= 137) return XDP_PASS;
//			}
//			struct { __u32 len; __u8 addr[16]; } k = {128, ip6->daddr};
//			if (!bpf_map_lookup_elem(&redir6, &k)) return XDP_PASS;
//		} else return XDP_PASS;
//		return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
//	}
func (p *xdpProgram) instructions() asm.Instructions {
	const pass, redirect, v4, v6, v6Lookup = "pass", "redirect", "ipv4", "ipv6", "v6lookup"
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
		// Ethernet.
		asm.LoadMem(asm.R2, asm.R6, xdpMdData, asm.Word),
		asm.LoadMem(asm.R3, asm.R6, xdpMdDataEnd, asm.Word),
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, xdpEthLen),
		asm.JGT.Reg(asm.R4, asm.R3, pass),
		asm.LoadMem(asm.R5, asm.R2, 12, asm.Half),
		asm.JEq.Imm(asm.R5, xdpEthTypeIPv4LE, v4),
		asm.JEq.Imm(asm.R5, xdpEthTypeIPv6LE, v6),
		asm.Ja.Label(pass),
	}
	insns = append(insns, p.ipv4Instructions(v4, pass, redirect)...)
	insns = append(insns, p.ipv6Instructions(v6, v6Lookup, pass)...)
	return append(insns,
		// Redirect to the queue's socket; XDP_PASS if it has none (flags'
		// low bits are the fallback action, Linux 5.9+).
		asm.LoadMem(asm.R2, asm.R6, xdpMdRxQueue, asm.Word).WithSymbol(redirect),
		asm.LoadMapPtr(asm.R1, p.asv.Sockets.FD()),
		asm.Mov.Imm(asm.R3, xdpPass),
		asm.FnRedirectMap.Call(),
		asm.Return(),
		asm.Mov.Imm(asm.R0, xdpPass).WithSymbol(pass),
		asm.Return(),
	)
}

// ipv4Instructions looks the IPv4 destination up; R2 = data, R3 = data_end.
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
// it knows about).
func (p *xdpProgram) close() error {
	err := p.asv.Close()
	for _, m := range []**ebpf.Map{&p.v4, &p.v6} {
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

// attach attaches the program to the link in mode (Auto: native, then
// generic when the driver refuses native) without replacing an attached
// program. It returns the mode it got.
func (p *xdpProgram) attach(link netlink.Link, mode Mode) (Mode, error) {
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
