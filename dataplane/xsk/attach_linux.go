package xsk

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"

	"github.com/gsoplane/gsoplane/internal/nsrun"
)

// ErrDetached: the XDP program is no longer attached to the interface:
// someone detached its BPF link from outside (bpftool link detach), or
// the interface went away.
var ErrDetached = errors.New("XDP program detached from the interface")

// Attached reports whether the port's XDP program is still attached to
// its interface. Detaching a BPF link from outside sends no netlink
// notification, so a caller that cares asks now and then (the gateway
// asks every second).
func (p *Port) Attached() (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.prog == nil || p.prog.lnk == nil {
		return false, ErrClosed
	}
	info, err := p.prog.lnk.Info()
	if err != nil {
		return false, fmt.Errorf("xsk: XDP link info: %w", err)
	}
	xdp := info.XDP()
	return xdp != nil && int(xdp.Ifindex) == p.ifindex, nil
}

// Reattach attaches the XDP program again, in the mode it had, after it
// was detached from outside; the sockets stay as they are. It may be
// called from any goroutine: it attaches from a thread in the port's
// namespace.
func (p *Port) Reattach() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.prog == nil {
		return ErrClosed
	}
	if err := p.prog.detach(); err != nil { // the old, defunct link
		return err
	}
	return nsrun.Run(p.ns, func() error {
		link, err := netlink.LinkByIndex(p.ifindex)
		if err != nil {
			return fmt.Errorf("xsk: reattach to %s: %w: %w", p.ifname, ErrDetached, err)
		}
		if _, err := p.prog.attach(link, p.mode); err != nil {
			return fmt.Errorf("xsk: reattach: %w", err)
		}
		return nil
	})
}
