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
//     Port.FollowMAC swaps in the program loaded for a new address): for
//     the redirect prefixes, a frame to another host's MAC passes
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
// about 1 ns to every frame (without, to a frame longer than a 1500-byte
// MTU's, which the program cannot measure otherwise).
//
// The program is C, bpf/xdp.c (two programs: without and with frags),
// compiled by bpf2go (go generate, or make generate) into the committed
// xdp_bpfel.o and xdp_bpfeb.o and their Go wrappers. The MAC address and
// the longest frame are constants of the program, set in the collection
// spec's variables before each load; the maps are created once, from the
// spec, and kept across loads.

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/asavie/xdp"
	"github.com/cilium/ebpf"
	xdplink "github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/dataplane/internal/port"
	"github.com/gsoplane/gsoplane/internal/bpfprog"
	"github.com/gsoplane/gsoplane/internal/ethtool"
	"github.com/gsoplane/gsoplane/internal/prefix"
)

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -tags linux -no-global-types -target bpfel,bpfeb xdp bpf/xdp.c -- -I../../internal/bpfprog/include -Wall -Werror

// xdpAttachedNone is netlink's XDP attach mode of an interface without
// a program.
const xdpAttachedNone = 0

// The program's counters, per queue: the frames for the redirect prefixes
// it passed to the kernel instead of redirecting them, by reason, and the
// IP frames whose version did not match their EtherType. Slot
// q*xdpNumCounters+c, in the order of enum outcome in bpf/xdp.c.
const (
	xdpCountOtherHost  = iota // unicast to another MAC address
	xdpCountNotUnicast        // to a broadcast or multicast MAC address
	xdpCountOversize          // longer than a UMEM frame takes
	xdpCountVersion           // IP version does not match the EtherType
	xdpNumCounters
)

// xdpProgram is our XDP program with its maps.
type xdpProgram struct {
	asv    *xdp.Program         // Program, Queues (array) and Sockets (XSKMAP)
	v4, v6 *ebpf.Map            // LPM tries of the redirect prefixes
	stats  *ebpf.Map            // per-CPU counters, xdpNumCounters per queue
	maps   map[string]*ebpf.Map // the five maps above by their names in spec
	spec   *ebpf.CollectionSpec // both programs, the maps sized (createMaps)
	maxLen int                  // the longest frame the sockets take (setReceive)
	frags  bool                 // loaded with BPF_F_XDP_HAS_FRAGS (setReceive)
	mac    net.HardwareAddr     // the MAC address the loaded program takes frames for
	id     ebpf.ProgramID
	tries  *prefix.Tries // the redirect prefixes in v4 and v6
	lnk    xdplink.Link  // the attachment, once attached
}

// newXDPProgram creates the maps for queues 0..maxQueue. The program
// itself is loaded by attach, with the interface's MAC address, or by
// load.
func newXDPProgram(maxQueue int) (*xdpProgram, error) {
	spec, err := loadXdp()
	if err != nil {
		return nil, fmt.Errorf("xsk: %w", err)
	}
	p := &xdpProgram{asv: &xdp.Program{}, spec: spec, maxLen: rxFrameLen(DefaultFrameSize)}
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

// createMaps creates the five maps, sized for queues.
func (p *xdpProgram) createMaps(queues int) error {
	maps, err := bpfprog.NewMaps(p.spec, map[string]uint32{
		xdpMapGsopQidconf:  uint32(queues),
		xdpMapGsopXsks:     uint32(queues),
		xdpMapGsopRedir4:   xdpMaxPrefixes,
		xdpMapGsopRedir6:   xdpMaxPrefixes,
		xdpMapGsopXdpStats: uint32(queues * xdpNumCounters),
	}, xdpCaps)
	if err != nil {
		return err
	}
	p.maps = maps
	p.asv.Queues, p.asv.Sockets = maps[xdpMapGsopQidconf], maps[xdpMapGsopXsks]
	p.v4, p.v6, p.stats = maps[xdpMapGsopRedir4], maps[xdpMapGsopRedir6], maps[xdpMapGsopXdpStats]
	return nil
}

// xdpCaps are the capabilities that creating the maps and loading the
// program need.
const xdpCaps = "CAP_NET_ADMIN and CAP_BPF (or run as root)"

// load loads the program for an interface whose MAC address is mac,
// replacing (and closing) one loaded before, which must not be attached.
func (p *xdpProgram) load(mac net.HardwareAddr) error {
	if len(mac) != 6 {
		return fmt.Errorf("load XDP program: the interface has no Ethernet address (%v)", mac)
	}
	name := xdpProgGsopXskRedir
	if p.frags {
		name = xdpProgGsopXskFrags
		p.spec.Programs[name].Flags = xdpFragsFlag
	}
	err := errors.Join(p.spec.Variables[xdpVarGsopMac].Set([]byte(mac)),
		p.spec.Variables[xdpVarGsopMaxLen].Set(uint32(p.maxLen)))
	if err != nil {
		return fmt.Errorf("load XDP program: %w", err)
	}
	prog, err := bpfprog.LoadProgram(p.spec, name, p.maps)
	switch {
	case err != nil && p.frags && errors.Is(err, unix.EINVAL) && bpfprog.VerifierLog(err) == nil:
		return fmt.Errorf("load XDP program: %w: %w", ErrNoMultiBuffer, err)
	case err != nil:
		return bpfprog.LoadError("the XDP program", xdpCaps, err)
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

// retarget loads the program for mac, unless it is loaded for it, and
// swaps it for the attached one through the BPF link.
func (p *xdpProgram) retarget(mac net.HardwareAddr) error {
	if p.lnk == nil {
		return errors.New("xsk: the XDP program is not attached")
	}
	if !bytes.Equal(mac, p.mac) {
		if err := p.load(mac); err != nil {
			return fmt.Errorf("xsk: %w", err)
		}
	}
	if err := p.lnk.Update(p.asv.Program); err != nil {
		return fmt.Errorf("xsk: replace the attached XDP program: %w", err)
	}
	return nil
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
	case mode == ModeNative && errors.Is(err, unix.EOPNOTSUPP) && nativeRefusal(link.Attrs().Name) != "":
		return fmt.Errorf("xsk: attach XDP program to %s (%s): %s: %w", link.Attrs().Name, mode, nativeRefusal(link.Attrs().Name), err)
	case errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("xsk: attach XDP program to %s: %w: %w", link.Attrs().Name, ErrUnsupported, err)
	}
	return fmt.Errorf("xsk: attach XDP program to %s (%s): %w", link.Attrs().Name, mode, err)
}

// nativeRefusal explains why a driver refused native XDP where the cause
// is known, or returns "". virtio_net refuses it while the host hands the
// guest GRO'd or checksum-offloaded packets and the device cannot turn
// that off: without VIRTIO_NET_F_CTRL_GUEST_OFFLOADS its rx-gro-hw is
// fixed (on with the host's GRO, off without), and rx-gro-hw or
// rx-checksum is on.
func nativeRefusal(ifname string) string {
	if d, err := ethtool.Driver(ifname); err != nil || d != "virtio_net" {
		return ""
	}
	f, err := ethtool.Features(ifname)
	if err != nil || f["rx-gro-hw"].Changeable || !f["rx-gro-hw"].Active && !f["rx-checksum"].Active {
		return ""
	}
	return "virtio_net refuses native XDP while the host offloads GRO or checksums to the guest and the device cannot turn that off " +
		"(no VIRTIO_NET_F_CTRL_GUEST_OFFLOADS: rx-gro-hw is fixed); give the device that feature or turn the host's guest offloads off " +
		"(QEMU: ctrl_guest_offloads=on, or guest_tso4,guest_tso6,guest_ecn,guest_ufo,guest_csum=off), or use generic mode or the AF_PACKET port"
}

// detach removes our program from the interface by closing its link: only
// our attachment can go, whatever else happened to the interface.
func (p *xdpProgram) detach() error { return port.Detach(&p.lnk, "XDP program") }
