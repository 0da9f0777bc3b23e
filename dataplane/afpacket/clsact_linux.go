package afpacket

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/dataplane/internal/port"
)

// clsactName names the port's cls_bpf filter (TCA_BPF_NAME), as tc
// filter show lists it.
const clsactName = "gsoplane-afpacket"

// clsact is the drop program attached the way that predates tcx: a
// direct-action cls_bpf filter on the ingress hook of the interface's
// clsact qdisc (or of an ingress qdisc already there, whose filters run
// at the same point). In __netif_receive_skb_core the taps are delivered
// before sch_handle_ingress classifies, as for tcx, and the program's
// return codes mean the same to cls_bpf: TC_ACT_SHOT (TCX_DROP) drops,
// TC_ACT_UNSPEC (TCX_NEXT) hands the packet to the next filter. A filter
// holds no file descriptor: the kernel keeps it until it is deleted, so
// Close deletes it, and the qdisc if the port added it and nobody else
// has a filter on it.
type clsact struct {
	nl       *netlink.Handle // NETLINK_ROUTE in the port's network namespace
	lnk      netlink.Link    // the interface, by index
	prog     *ebpf.Program
	progID   int                // the program's ID, as a filter dump gives it
	filter   *netlink.BpfFilter // ours, while attached: its priority and handle
	ownQdisc bool               // the port added the clsact qdisc, or took over one a killed port left
	// leftovers counts the filters of a port killed before (our name,
	// another program) that attach deleted.
	leftovers int
}

// newClsact opens a netlink handle in the calling thread's network
// namespace, the interface's, for prog's filters on ifindex.
func newClsact(prog *ebpf.Program, ifindex int) (*clsact, error) {
	info, err := prog.Info()
	if err != nil {
		return nil, fmt.Errorf("program info: %w", err)
	}
	id, ok := info.ID()
	if !ok {
		return nil, errors.New("the kernel gives no program ID")
	}
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	return &clsact{nl: h, lnk: &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: ifindex}}, prog: prog, progID: int(id)}, nil
}

// attach adds the clsact qdisc if the interface has no qdisc on its
// ingress hook, deletes the filters a port killed before left there (see
// removeLeftovers), then adds the filter, ahead of the filters there.
func (c *clsact) attach() error {
	qdiscs, err := c.nl.QdiscList(c.lnk)
	if err != nil {
		return fmt.Errorf("list the qdiscs: %w", err)
	}
	if err := c.removeLeftovers(qdiscs); err != nil {
		return err
	}
	if !slices.ContainsFunc(qdiscs, onIngressHook) {
		q := &netlink.GenericQdisc{QdiscType: "clsact", QdiscAttrs: netlink.QdiscAttrs{
			LinkIndex: c.lnk.Attrs().Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT,
		}}
		switch err := c.nl.QdiscAdd(q); {
		case err == nil:
			c.ownQdisc = true
		case errors.Is(err, unix.EEXIST): // another one's, added meanwhile
		default:
			return fmt.Errorf("add a clsact qdisc: %w", err)
		}
	}
	filters, err := c.nl.FilterList(c.lnk, netlink.HANDLE_MIN_INGRESS)
	if err != nil {
		return fmt.Errorf("list the ingress filters: %w", err)
	}
	f := &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: c.lnk.Attrs().Index, Parent: netlink.HANDLE_MIN_INGRESS,
			Priority: aheadOf(filters), Protocol: unix.ETH_P_ALL,
		},
		Fd: c.prog.FD(), Name: clsactName, DirectAction: true,
	}
	if err := c.nl.FilterAdd(f); err != nil {
		return errors.Join(fmt.Errorf("add the cls_bpf filter: %w", err), c.release())
	}
	// The kernel chose the handle (and the priority, if 0): read them
	// back.
	if c.filter, err = c.find(nil); err == nil && c.filter == nil {
		err = errors.New("the filter is not there")
	}
	if err != nil {
		return fmt.Errorf("find the cls_bpf filter just added: %w", err)
	}
	return nil
}

// removeLeftovers deletes the filters on the ingress hook that bear our
// name but hold another program: a port killed before left them (a
// filter is no file descriptor), still dropping its prefixes' packets,
// and ahead of the filter attach adds unless they go. The clsact qdisc
// they are on is then taken as the port's own, that close deletes
// unless another filter is on it. Two ports on one interface are not
// supported: another's filter would be taken for a leftover.
func (c *clsact) removeLeftovers(qdiscs []netlink.Qdisc) error {
	filters, err := c.nl.FilterList(c.lnk, netlink.HANDLE_MIN_INGRESS)
	if err != nil {
		return fmt.Errorf("list the ingress filters: %w", err)
	}
	for _, f := range filters {
		if b, ok := f.(*netlink.BpfFilter); ok && b.Name == clsactName && b.Id != c.progID {
			if err := c.nl.FilterDel(b); err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("delete the cls_bpf filter left by a port killed before (program %d): %w", b.Id, err)
			}
			c.leftovers++
		}
	}
	if c.leftovers > 0 {
		c.ownQdisc = c.ownQdisc || slices.ContainsFunc(qdiscs, func(q netlink.Qdisc) bool { return onIngressHook(q) && q.Type() == "clsact" })
	}
	return nil
}

// onIngressHook reports whether q is a clsact or ingress qdisc: the one
// whose filters run at tc ingress.
func onIngressHook(q netlink.Qdisc) bool { return q.Attrs().Parent == netlink.HANDLE_INGRESS }

// aheadOf returns a priority that puts a new filter ahead of filters:
// one below the lowest in use, 1 when there is none, and 0 (the kernel
// chooses) when 1 is taken.
func aheadOf(filters []netlink.Filter) uint16 {
	if len(filters) == 0 {
		return 1
	}
	lowest := filters[0].Attrs().Priority
	for _, f := range filters[1:] {
		lowest = min(lowest, f.Attrs().Priority)
	}
	return lowest - 1
}

// find returns our program's filter on the ingress hook (with the
// priority and handle of want, if not nil), or nil.
func (c *clsact) find(want *netlink.BpfFilter) (*netlink.BpfFilter, error) {
	filters, err := c.nl.FilterList(c.lnk, netlink.HANDLE_MIN_INGRESS)
	if err != nil {
		return nil, fmt.Errorf("list the ingress filters: %w", err)
	}
	for _, f := range filters {
		b, ok := f.(*netlink.BpfFilter)
		if !ok || b.Id != c.progID || b.Name != clsactName {
			continue
		}
		if want == nil || b.Priority == want.Priority && b.Handle == want.Handle {
			return b, nil
		}
	}
	return nil, nil
}

// attached reports whether our filter is still on the ingress hook; it
// returns port.ErrNotAttached when the port took it off.
func (c *clsact) attached() (bool, error) {
	if c.filter == nil {
		return false, port.ErrNotAttached
	}
	f, err := c.find(c.filter)
	return f != nil, err
}

// detach deletes our filter, if it is still there, and nothing else;
// after an error it still knows the filter, for another try.
func (c *clsact) detach() error {
	if c.filter == nil {
		return nil
	}
	f, err := c.find(c.filter)
	if err != nil {
		return err
	}
	if f != nil {
		if err := c.nl.FilterDel(f); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("delete the cls_bpf filter: %w", err)
		}
	}
	c.filter = nil
	return nil
}

// release deletes the clsact qdisc the port added, unless a filter is on
// either of its hooks (someone else's: ours is gone by then).
func (c *clsact) release() error {
	if !c.ownQdisc {
		return nil
	}
	c.ownQdisc = false
	for _, hook := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		filters, err := c.nl.FilterList(c.lnk, hook)
		if err != nil {
			return fmt.Errorf("list the filters of the clsact qdisc: %w", err)
		}
		if len(filters) > 0 {
			return nil
		}
	}
	qdiscs, err := c.nl.QdiscList(c.lnk)
	if err != nil {
		return fmt.Errorf("list the qdiscs: %w", err)
	}
	i := slices.IndexFunc(qdiscs, func(q netlink.Qdisc) bool { return onIngressHook(q) && q.Type() == "clsact" })
	if i < 0 {
		return nil // gone already
	}
	// ENOENT, or EINVAL for a handle no longer there: deleted meanwhile.
	if err := c.nl.QdiscDel(qdiscs[i]); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("delete the clsact qdisc: %w", err)
	}
	return nil
}

// close deletes our filter and the qdisc the port added (see release)
// and closes the netlink handle.
func (c *clsact) close() error {
	err := errors.Join(c.detach(), c.release())
	c.nl.Close()
	return err
}
