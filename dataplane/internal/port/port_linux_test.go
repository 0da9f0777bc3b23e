package port

import (
	"errors"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

var (
	errClosed   = errors.New("closed")
	errDetached = errors.New("detached")
)

// xdpPass is a Program: an XDP program that passes everything, attached
// in generic mode; it records the prefixes and what was done to it.
type xdpPass struct {
	prog     *ebpf.Program
	lnk      link.Link
	prefixes []netip.Prefix
	log      *[]string
}

func (x *xdpPass) SetPrefixes(p []netip.Prefix) error { x.prefixes = p; return nil }
func (x *xdpPass) Attached(ifindex int) (bool, error) { return LinkAttached(x.lnk, ifindex) }

func (x *xdpPass) Attach(lnk netlink.Link) error {
	l, err := link.AttachXDP(link.XDPOptions{Program: x.prog, Interface: lnk.Attrs().Index, Flags: link.XDPGenericMode})
	x.lnk = l
	return err
}

func (x *xdpPass) Detach() error {
	*x.log = append(*x.log, "detach")
	return Detach(&x.lnk, "test program")
}

func (x *xdpPass) Close() error {
	*x.log = append(*x.log, "close program")
	return x.prog.Close()
}

// sock is a socket that records what was done to it.
type sock struct {
	name string
	log  *[]string
}

// lab is a port's lifecycle on pt-a, one end of a veth pair in a
// namespace of its own, with a passing XDP program and two sockets.
type lab struct {
	ns   *netlab.NS
	port *Port[*sock]
	prog *xdpPass
	log  []string
}

func newLab(t *testing.T) *lab {
	t.Helper()
	l := &lab{ns: netlab.NewT(t, "port")}
	netlab.Must(t, netlab.AddVeth(l.ns, "pt-a", l.ns, "pt-b", 0))
	lnk := l.ns.LinkT(t, "pt-a")
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "Apache-2.0",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}}) // XDP_PASS
	netlab.Must(t, err)
	l.prog = &xdpPass{prog: prog, log: &l.log}
	cfg := Config[*sock]{
		Pkg: "test", Ifname: "pt-a", Ifindex: lnk.Attrs().Index, MaxPrefixes: 2,
		ErrClosed: errClosed, ErrDetached: errDetached,
		StopReceive: func(s *sock) { l.log = append(l.log, "stop "+s.name) },
		CloseSocket: func(s *sock) error { l.log = append(l.log, "close "+s.name); return nil },
	}
	l.ns.Do(t, func() {
		if l.port, err = New(cfg); err != nil {
			return
		}
		l.port.SetProgram(l.prog)
		l.port.AddSocket(&sock{"s0", &l.log})
		l.port.AddSocket(&sock{"s1", &l.log})
		err = l.prog.Attach(lnk)
	})
	netlab.Must(t, err)
	t.Cleanup(func() { l.port.Close() })
	return l
}

// TestLifecycle: the prefixes are checked and handed on, receiving
// stops, and Close detaches the program before it closes the sockets
// and then the program, once; afterwards the port is closed.
func TestLifecycle(t *testing.T) {
	l := newLab(t)
	if ok, err := l.port.Attached(); !ok || err != nil {
		t.Fatalf("Attached: %v, %v", ok, err)
	}
	p := []netip.Prefix{netip.MustParsePrefix("198.18.0.7/24")}
	if err := l.port.SetRedirect(p); err != nil || !slices.Equal(l.prog.prefixes, []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")}) {
		t.Errorf("SetRedirect: %v, the program has %v", err, l.prog.prefixes)
	}
	three := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("11.0.0.0/8"), netip.MustParsePrefix("12.0.0.0/8")}
	if err := l.port.SetRedirect(three); !errors.Is(err, frame.ErrInvalidConfig) {
		t.Errorf("SetRedirect of more than MaxPrefixes: %v", err)
	}
	l.port.StopReceive()
	if err := l.port.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.port.Close(); err != nil {
		t.Errorf("Close again: %v", err)
	}
	want := []string{"stop s0", "stop s1", "detach", "close s0", "close s1", "close program"}
	if !slices.Equal(l.log, want) {
		t.Errorf("did %q, want %q", l.log, want)
	}
	if l.prog.lnk != nil {
		t.Error("the link is still there after Close")
	}
	if _, err := l.port.Attached(); err != errClosed {
		t.Errorf("Attached after Close: %v", err)
	}
	for name, err := range map[string]error{"SetRedirect": l.port.SetRedirect(p), "Reattach": l.port.Reattach()} {
		if err != errClosed {
			t.Errorf("%s after Close: %v", name, err)
		}
	}
	if l.port.Lock() {
		t.Error("Lock after Close")
	}
}

// TestReattach: a link detached from outside is noticed by Attached;
// Reattach attaches the program again from any goroutine (this test's
// thread is not in the port's namespace), and says ErrDetached once the
// interface is gone.
func TestReattach(t *testing.T) {
	l := newLab(t)
	info, err := l.prog.lnk.Info()
	netlab.Must(t, err)
	outside, err := link.NewFromID(info.ID)
	netlab.Must(t, err)
	defer outside.Close()
	netlab.Must(t, outside.Detach())
	if ok, err := l.port.Attached(); ok || err != nil {
		t.Fatalf("Attached after an outside detach: %v, %v", ok, err)
	}
	if err := l.port.Reattach(); err != nil {
		t.Fatalf("Reattach: %v", err)
	}
	if ok, err := l.port.Attached(); !ok || err != nil {
		t.Fatalf("Attached after Reattach: %v, %v", ok, err)
	}
	netlab.Must(t, l.ns.Netlink().LinkDel(l.ns.LinkT(t, "pt-a")))
	if err := l.port.Reattach(); !errors.Is(err, errDetached) {
		t.Errorf("Reattach without the interface: %v, want errDetached", err)
	}
}

// TestInterface finds the interface in the calling thread's namespace,
// names a missing one, and counts its RX queues.
func TestInterface(t *testing.T) {
	ns := netlab.NewT(t, "port")
	netlab.Must(t, netlab.AddVeth(ns, "pt-q", ns, "pt-r", 3))
	var lnk netlink.Link
	var err, missing error
	ns.Do(t, func() {
		lnk, err = Interface("test", "pt-q")
		_, missing = Interface("test", "nosuch0")
	})
	netlab.Must(t, err)
	if n := RXQueues(lnk); n != 3 {
		t.Errorf("RXQueues: %d, want 3", n)
	}
	if missing == nil || !strings.Contains(missing.Error(), `test: interface "nosuch0"`) {
		t.Errorf("a missing interface: %v", missing)
	}
}

// TestMain fails the tests if they leave a namespace or a descriptor behind.
func TestMain(m *testing.M) { os.Exit(netlab.Main(m)) }
