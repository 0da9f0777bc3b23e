package afpacket

// The port's two eBPF programs and their maps. Both test the same thing,
// "is this a packet the port takes": a frame for this host (PACKET_HOST),
// without a VLAN tag in the metadata, IPv4 or IPv6, not IPv6 neighbour
// discovery, whose destination is in one of the redirect prefixes (two
// LPM tries, shared). The socket filter (SO_ATTACH_BPF on every socket)
// keeps what the test accepts and nothing else, so ARP, ND and the host's
// own traffic never reach the return path; the ingress program (tcx, or
// cls_bpf on a clsact qdisc) drops exactly what the test accepts, so the
// host's stack does not handle those packets a second time. Both run on
// a __sk_buff whose data starts at the Ethernet header: packet_rcv pushes
// it back for a SOCK_RAW socket before it runs the filter, and tcx and
// cls_bpf at ingress push it for their programs.
//
// The programs are C, bpf/filter.c, compiled by bpf2go (go generate, or
// make generate) into the committed filter_bpfel.o and filter_bpfeb.o
// and their Go wrappers.

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/dataplane/internal/port"
	"github.com/gsoplane/gsoplane/internal/bpfprog"
	"github.com/gsoplane/gsoplane/internal/prefix"
)

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -tags linux -no-global-types -target bpfel,bpfeb filter bpf/filter.c -- -I../../internal/bpfprog/include -Wall -Werror

// filter is the port's programs and maps, and the drop program's
// attachment.
type filter struct {
	v4, v6 *ebpf.Map     // LPM tries of the redirect prefixes
	sock   *ebpf.Program // socket filter: keep what the port takes
	drop   *ebpf.Program // at ingress: drop what the port takes
	tries  *prefix.Tries // v4 and v6 as the redirect prefixes
	// mode is how drop is attached: as configured, and HostFilterTCX or
	// HostFilterClsact from the first attach on; why says why.
	mode HostFilter
	why  string
	tcx  link.Link // the tcx attachment, while attached (HostFilterTCX)
	cls  *clsact   // the cls_bpf attachment (HostFilterClsact)
}

// newFilter creates the maps and loads both programs, to be attached as
// mode says.
func newFilter(mode HostFilter) (*filter, error) {
	f := &filter{mode: mode, why: "asked for"}
	if err := f.load(); err != nil {
		return nil, errors.Join(err, f.close())
	}
	f.tries = prefix.NewTries(f.v4, f.v6)
	return f, nil
}

// The capabilities the maps and the socket filter need, and what the
// ingress program needs.
const (
	filterCaps  = "CAP_BPF (or CAP_SYS_ADMIN)"
	ingressCaps = "CAP_NET_ADMIN and CAP_BPF"
)

func (f *filter) load() error {
	spec, err := loadFilter()
	if err != nil {
		return fmt.Errorf("afpacket: %w", err)
	}
	maps, err := bpfprog.NewMaps(spec, map[string]uint32{filterMapGsopRedir4: maxPrefixes, filterMapGsopRedir6: maxPrefixes}, filterCaps)
	if err != nil {
		return fmt.Errorf("afpacket: %w", err)
	}
	f.v4, f.v6 = maps[filterMapGsopRedir4], maps[filterMapGsopRedir6]
	if f.sock, err = bpfprog.LoadProgram(spec, filterProgGsopPktKeep, maps); err != nil {
		return fmt.Errorf("afpacket: %w", bpfprog.LoadError("the socket filter", filterCaps, err))
	}
	if f.drop, err = bpfprog.LoadProgram(spec, filterProgGsopPktDrop, maps); err != nil {
		return fmt.Errorf("afpacket: %w", bpfprog.LoadError("the ingress program", ingressCaps, err))
	}
	return nil
}

// bpfError names the missing capability when the kernel refuses.
func bpfError(what string, err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("afpacket: %s: needs %s: %w", what, filterCaps, err)
	}
	return fmt.Errorf("afpacket: %s: %w", what, err)
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

// attach attaches the drop program to the interface's ingress as f.mode
// says; HostFilterAuto tries tcx and, where the kernel has none, uses
// cls_bpf, and becomes the one that attached. Call it on a thread in the
// interface's network namespace.
func (f *filter) attach(ifname string, ifindex int) error {
	switch f.mode {
	case HostFilterTCX:
		return f.attachTCX(ifname, ifindex)
	case HostFilterClsact:
		return f.attachClsact(ifname, ifindex)
	}
	err := f.attachTCX(ifname, ifindex)
	if errors.Is(err, ebpf.ErrNotSupported) {
		f.mode, f.why = HostFilterClsact, "the kernel has no tcx (Linux 6.6)"
		return f.attachClsact(ifname, ifindex)
	}
	if err == nil {
		f.mode, f.why = HostFilterTCX, "the kernel has tcx"
	}
	return err
}

// attachTCX attaches the drop program to the interface's tcx ingress,
// ahead of every other tcx program there (link.Head), through a BPF link:
// the kernel detaches it when the link's last file descriptor closes,
// also when the process dies.
func (f *filter) attachTCX(ifname string, ifindex int) error {
	l, err := link.AttachTCX(link.TCXOptions{
		Interface: ifindex, Program: f.drop, Attach: ebpf.AttachTCXIngress, Anchor: link.Head(),
	})
	switch {
	case err == nil:
		f.tcx = l
		return nil
	case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES):
		return fmt.Errorf("afpacket: attach the tcx ingress program to %s: needs %s: %w", ifname, ingressCaps, err)
	case errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("afpacket: attach the tcx ingress program to %s: tcx needs Linux 6.6 or later (clsact works before): %w", ifname, err)
	}
	return fmt.Errorf("afpacket: attach the tcx ingress program to %s: %w", ifname, err)
}

// attachClsact attaches the drop program as a cls_bpf filter on the
// interface's clsact qdisc (see clsact).
func (f *filter) attachClsact(ifname string, ifindex int) error {
	if f.cls == nil {
		c, err := newClsact(f.drop, ifindex)
		if err != nil {
			return fmt.Errorf("afpacket: attach the cls_bpf ingress filter to %s: %w", ifname, err)
		}
		f.cls = c
	}
	err := f.cls.attach()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES):
		return fmt.Errorf("afpacket: attach the cls_bpf ingress filter to %s: needs %s: %w", ifname, ingressCaps, err)
	}
	return fmt.Errorf("afpacket: attach the cls_bpf ingress filter to %s: %w", ifname, err)
}

// attached reports whether the drop program is still attached to the
// interface ifindex (port.Program's Attached).
func (f *filter) attached(ifindex int) (bool, error) {
	if f.mode == HostFilterClsact {
		if f.cls == nil {
			return false, port.ErrNotAttached
		}
		return f.cls.attached()
	}
	return port.LinkAttached(f.tcx, ifindex)
}

// detach takes the drop program, and only it, off the interface: it
// closes the tcx link, or deletes the cls_bpf filter (the clsact qdisc
// the port added stays until close).
func (f *filter) detach() error {
	if f.cls != nil {
		if err := f.cls.detach(); err != nil {
			return fmt.Errorf("detach the cls_bpf ingress filter: %w", err)
		}
	}
	return port.Detach(&f.tcx, "tcx ingress program")
}

// close detaches, removes the clsact qdisc the port added (unless another
// filter is on it) and releases the programs and the maps; idempotent.
func (f *filter) close() error {
	err := f.detach()
	if f.cls != nil {
		err = errors.Join(err, f.cls.close())
		f.cls = nil
	}
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
