package port

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/internal/nsrun"
	"github.com/gsoplane/gsoplane/internal/prefix"
)

// Program is a port's BPF program as the lifecycle drives it.
type Program interface {
	// SetPrefixes makes the program take exactly prefixes (normalised).
	SetPrefixes(prefixes []netip.Prefix) error
	// Attach attaches the program to the interface lnk, on a thread in
	// the port's network namespace.
	Attach(lnk netlink.Link) error
	// Attached reports whether the program is still attached to the
	// interface ifindex, false when it was detached from outside; it
	// returns ErrNotAttached when the port holds no attachment at all
	// (it took the program off, or attaching it again failed).
	Attached(ifindex int) (bool, error)
	// Detach takes the program off the interface (see Detach).
	Detach() error
	// Close releases the program and its maps; the sockets are closed
	// by then.
	Close() error
}

// ErrNotAttached is what a Program's Attached returns when the port
// holds no attachment of it.
var ErrNotAttached = errors.New("not attached")

// Config describes a port to its lifecycle.
type Config[S any] struct {
	Pkg         string // the port's package, the prefix of its errors
	Ifname      string
	Ifindex     int
	MaxPrefixes int   // the most redirect prefixes of one family
	ErrClosed   error // returned once the port is closed
	ErrDetached error // wrapped when the interface is gone on Reattach
	// StopReceive makes a socket's receiver return at once, now and
	// later; CloseSocket closes a socket (idempotent).
	StopReceive func(S)
	CloseSocket func(S) error
}

// Port is the lifecycle of a port with sockets of type S. Its methods may
// be called from any goroutine.
type Port[S any] struct {
	cfg    Config[S]
	mu     sync.Mutex
	ns     netns.NsHandle // the namespace it was opened in, for Reattach
	prog   Program
	socks  []S
	closed bool
}

// New returns the lifecycle of a port opened in the calling thread's
// network namespace, still without a program or sockets.
func New[S any](cfg Config[S]) (*Port[S], error) {
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("%s: port on %s: current netns: %w", cfg.Pkg, cfg.Ifname, err)
	}
	return &Port[S]{cfg: cfg, ns: ns}, nil
}

// SetProgram hands the port's program to the lifecycle, while the port
// is being opened.
func (p *Port[S]) SetProgram(prog Program) { p.prog = prog }

// AddSocket adds a socket, while the port is being opened.
func (p *Port[S]) AddSocket(s S) { p.socks = append(p.socks, s) }

// Ifindex returns the interface's index.
func (p *Port[S]) Ifindex() int { return p.cfg.Ifindex }

// Sockets returns the sockets in the order they were added (a new
// slice).
func (p *Port[S]) Sockets() []S { return slices.Clone(p.socks) }

// Lock locks the port for a use of its program; false, and not locked,
// once it is closed.
func (p *Port[S]) Lock() bool {
	p.mu.Lock()
	if p.closed || p.prog == nil {
		p.mu.Unlock()
		return false
	}
	return true
}

// Unlock unlocks the port after Lock.
func (p *Port[S]) Unlock() { p.mu.Unlock() }

// SetRedirect checks prefixes and makes the program take exactly them.
func (p *Port[S]) SetRedirect(prefixes []netip.Prefix) error {
	checked, err := prefix.Normalize(prefixes, p.cfg.MaxPrefixes)
	if err != nil {
		return fmt.Errorf("%s: %w: %v", p.cfg.Pkg, frame.ErrInvalidConfig, err)
	}
	if !p.Lock() {
		return p.cfg.ErrClosed
	}
	defer p.Unlock()
	return p.prog.SetPrefixes(checked)
}

// StopReceive stops every socket's receiver.
func (p *Port[S]) StopReceive() {
	for _, s := range p.Sockets() {
		p.cfg.StopReceive(s)
	}
}

// Close detaches the program, closes the sockets, releases the program
// and lets go of the namespace; only the first call does anything.
func (p *Port[S]) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	var err error
	if p.prog != nil {
		err = p.prog.Detach()
	}
	for _, s := range p.socks {
		err = errors.Join(err, p.cfg.CloseSocket(s))
	}
	if p.prog != nil {
		err = errors.Join(err, p.prog.Close())
	}
	err = errors.Join(err, p.ns.Close())
	if err != nil {
		return fmt.Errorf("%s: close port on %s: %w", p.cfg.Pkg, p.cfg.Ifname, err)
	}
	return nil
}

// Attached reports whether the program is still attached to the port's
// interface. A BPF link detached from outside (bpftool link detach) sends
// no notification: the kernel says so only when asked.
func (p *Port[S]) Attached() (bool, error) {
	if !p.Lock() {
		return false, p.cfg.ErrClosed
	}
	defer p.Unlock()
	ok, err := p.prog.Attached(p.cfg.Ifindex)
	if errors.Is(err, ErrNotAttached) {
		return false, p.cfg.ErrClosed
	}
	if err != nil {
		return false, fmt.Errorf("%s: %w", p.cfg.Pkg, err)
	}
	return ok, nil
}

// LinkAttached reports whether the BPF link l attaches its program to
// the interface ifindex: a Program's Attached for a program on a link.
// It returns ErrNotAttached for a nil link.
func LinkAttached(l link.Link, ifindex int) (bool, error) {
	if l == nil {
		return false, ErrNotAttached
	}
	info, err := l.Info()
	if err != nil {
		return false, fmt.Errorf("link info: %w", err)
	}
	i, ok := linkIfindex(info)
	return ok && i == ifindex, nil
}

// linkIfindex returns the interface an XDP or tcx link attaches to.
func linkIfindex(info *link.Info) (int, bool) {
	if x := info.XDP(); x != nil {
		return int(x.Ifindex), true
	}
	if t := info.TCX(); t != nil {
		return int(t.Ifindex), true
	}
	return 0, false
}

// Reattach takes the program's old attachment off (a defunct link) and
// attaches the program again, from a thread in the port's namespace; the
// sockets stay as they are.
func (p *Port[S]) Reattach() error {
	if !p.Lock() {
		return p.cfg.ErrClosed
	}
	defer p.Unlock()
	if err := p.prog.Detach(); err != nil { // the old, defunct attachment
		return err
	}
	return nsrun.Run(p.ns, func() error {
		lnk, err := netlink.LinkByIndex(p.cfg.Ifindex)
		if err != nil {
			return fmt.Errorf("%s: reattach to %s: %w: %w", p.cfg.Pkg, p.cfg.Ifname, p.cfg.ErrDetached, err)
		}
		return p.prog.Attach(lnk)
	})
}

// Detach closes *l, a program's BPF link to its interface, and clears
// it: that program, and only it, leaves the interface. what names the
// program in the error. Nothing happens when *l is nil.
func Detach(l *link.Link, what string) error {
	if *l == nil {
		return nil
	}
	err := (*l).Close()
	*l = nil
	if err != nil {
		return fmt.Errorf("detach the %s: %w", what, err)
	}
	return nil
}
