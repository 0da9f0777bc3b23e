package xsk

import (
	"errors"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/gsoplane/gsoplane/dataplane/internal/port"
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

// FollowMAC makes the XDP program take the frames sent to mac, the
// interface's MAC address after it changed: it loads the program for
// mac and puts it in place of the attached one in one step
// (BPF_LINK_UPDATE), so that every frame meets one program or the other,
// never none. A program that is no longer attached (detached from
// outside) is attached again, as Reattach does. It may be called from
// any goroutine.
func (p *Port) FollowMAC(mac net.HardwareAddr) error {
	if !p.base.Lock() {
		return ErrClosed
	}
	err := p.prog.retarget(mac)
	p.base.Unlock()
	if err == nil {
		return nil
	}
	if errReattach := p.base.Reattach(); errReattach != nil {
		return errors.Join(err, errReattach)
	}
	return nil
}

// xdpAttachment is the port's XDP program as dataplane/internal/port drives it.
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
