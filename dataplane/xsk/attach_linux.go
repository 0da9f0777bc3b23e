package xsk

import (
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/gsoplane/gsoplane/internal/port"
)

// Attached reports whether the port's XDP program is still attached to
// its interface. Detaching a BPF link from outside sends no netlink
// notification, so a caller that cares asks now and then (the gateway
// asks every second).
func (p *Port) Attached() (bool, error) { return p.base.Attached() }

// Reattach attaches the XDP program again, in the mode it had, after it
// was detached from outside; the sockets stay as they are. It may be
// called from any goroutine: it attaches from a thread in the port's
// namespace.
func (p *Port) Reattach() error { return p.base.Reattach() }

// xdpAttachment is the port's XDP program as internal/port drives it.
type xdpAttachment struct{ p *Port }

func (a xdpAttachment) SetPrefixes(prefixes []netip.Prefix) error {
	return a.p.prog.setPrefixes(prefixes)
}

// Attach attaches the program in the mode it had.
func (a xdpAttachment) Attach(lnk netlink.Link) error {
	_, err := a.p.prog.attach(lnk, a.p.mode)
	return err
}

func (a xdpAttachment) Attached(ifindex int) (bool, error) {
	return port.LinkAttached(a.p.prog.lnk, ifindex)
}
func (a xdpAttachment) Detach() error { return a.p.prog.detach() }
func (a xdpAttachment) Close() error  { return a.p.prog.close() }
