package afpacket

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// hostFilters are the ways of attaching the ingress program the tests
// run in: tcx, and cls_bpf on a clsact qdisc as on kernels without tcx.
var hostFilters = []HostFilter{HostFilterTCX, HostFilterClsact}

// skipWithoutHostFilter skips a test of mode where the kernel lacks it
// (tcx before Linux 6.6).
func skipWithoutHostFilter(t *testing.T, mode HostFilter) {
	t.Helper()
	if mode == HostFilterTCX {
		netlab.SkipWithout(t, netlab.TCX)
	}
}

// tcxPrograms returns the IDs of the programs on gw-a's tcx ingress:
// none on a kernel without tcx.
func (l *lab) tcxPrograms(t *testing.T) []ebpf.ProgramID {
	t.Helper()
	var ids []ebpf.ProgramID
	if netlab.Lacks(t, netlab.TCX) != nil {
		return nil
	}
	idx := l.A.LinkT(t, netlab.NICA).Attrs().Index
	l.A.Do(t, func() {
		r, err := link.QueryPrograms(link.QueryOptions{Target: idx, Attach: ebpf.AttachTCXIngress})
		netlab.Must(t, err)
		for _, p := range r.Programs {
			ids = append(ids, p.ID)
		}
	})
	return ids
}

// ingressPrograms returns the IDs of the programs on gw-a's ingress: on
// its tcx ingress, then those of the cls_bpf filters on its ingress
// hook.
func (l *lab) ingressPrograms(t *testing.T) []ebpf.ProgramID {
	t.Helper()
	ids := l.tcxPrograms(t)
	for _, f := range l.filters(t, netlink.HANDLE_MIN_INGRESS) {
		if b, ok := f.(*netlink.BpfFilter); ok {
			ids = append(ids, ebpf.ProgramID(b.Id))
		}
	}
	return ids
}

// filters returns the filters on gw-a's hook (netlink.HANDLE_MIN_INGRESS
// or netlink.HANDLE_MIN_EGRESS).
func (l *lab) filters(t *testing.T, hook uint32) []netlink.Filter {
	t.Helper()
	fs, err := l.A.Netlink().FilterList(l.A.LinkT(t, netlab.NICA), hook)
	netlab.Must(t, err)
	return fs
}

// ingressQdisc returns gw-a's clsact or ingress qdisc, or nil.
func (l *lab) ingressQdisc(t *testing.T) netlink.Qdisc {
	t.Helper()
	qs, err := l.A.Netlink().QdiscList(l.A.LinkT(t, netlab.NICA))
	netlab.Must(t, err)
	for _, q := range qs {
		if q.Attrs().Parent == netlink.HANDLE_INGRESS {
			return q
		}
	}
	return nil
}

// progID returns the ID of the port's ingress program.
func progID(t *testing.T, p *Port) ebpf.ProgramID {
	t.Helper()
	info, err := p.filter.drop.Info()
	netlab.Must(t, err)
	id, _ := info.ID()
	return id
}

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	netlab.Must(t, err)
	return len(ents)
}

// TestCloseReopen: in either mode, Close leaves no ingress program, no
// qdisc it added, no BPF object and no socket behind, and the interface
// takes a new port at once.
func TestCloseReopen(t *testing.T) {
	for _, mode := range hostFilters {
		t.Run(mode.String(), func(t *testing.T) {
			skipWithoutHostFilter(t, mode)
			l := newLab(t, false)
			fds := openFDs(t)
			for round := range 2 {
				var p *Port
				var err error
				l.A.Do(t, func() { p, err = Open(Config{Ifname: netlab.NICA, Redirect: netlab.AppRoutes, HostFilter: mode}) })
				if err != nil {
					t.Fatalf("round %d: Open: %v", round, err)
				}
				if got, why := p.HostFilter(); got != mode || why != "asked for" {
					t.Errorf("round %d: HostFilter = %v, %q", round, got, why)
				}
				if ids, id := l.ingressPrograms(t), progID(t, p); len(ids) != 1 || ids[0] != id {
					t.Errorf("round %d: ingress programs %v, want ours (%d)", round, ids, id)
				}
				if q := l.ingressQdisc(t); (q != nil) != (mode == HostFilterClsact) {
					t.Errorf("round %d: ingress qdisc %v", round, q)
				}
				if len(p.Sockets()) != 2 { // the veth has two RX queues
					t.Errorf("round %d: %d sockets", round, len(p.Sockets()))
				}
				netlab.Must(t, p.Close())
				netlab.Must(t, p.Close()) // idempotent
				if ids := l.ingressPrograms(t); len(ids) != 0 {
					t.Errorf("round %d: ingress programs left: %v", round, ids)
				}
				if q := l.ingressQdisc(t); q != nil {
					t.Errorf("round %d: qdisc left: %v", round, q)
				}
				if n := openFDs(t); n != fds {
					t.Errorf("round %d: %d file descriptors open after Close, %d before Open", round, n, fds)
				}
			}
		})
	}
}

// TestHostFilterAuto: by default the port uses tcx where the kernel has
// it, and says so.
func TestHostFilterAuto(t *testing.T) {
	l := newLab(t, false)
	p := l.open(t, Config{Queues: 1})
	if netlab.Lacks(t, netlab.TCX) != nil {
		if mode, why := p.HostFilter(); mode != HostFilterClsact || why != "the kernel has no tcx (Linux 6.6)" {
			t.Errorf("HostFilter = %v, %q, want clsact because the kernel has no tcx", mode, why)
		}
		return
	}
	if mode, why := p.HostFilter(); mode != HostFilterTCX || why != "the kernel has tcx" {
		t.Errorf("HostFilter = %v, %q, want tcx because the kernel has it", mode, why)
	}
	if ids := l.tcxPrograms(t); len(ids) != 1 || ids[0] != progID(t, p) {
		t.Errorf("tcx programs %v", ids)
	}
	var err error
	l.A.Do(t, func() { _, err = Open(Config{Ifname: netlab.NICA, HostFilter: HostFilterClsact + 1}) })
	if !errors.Is(err, frame.ErrInvalidConfig) {
		t.Errorf("Open with host filter %d: %v, want ErrInvalidConfig", HostFilterClsact+1, err)
	}
}

// TestDetachOnKill: a process killed with SIGKILL leaves no tcx program
// behind: it hangs on a BPF link, which dies with the process's file
// descriptors. A cls_bpf filter is no file descriptor: it stays, with
// the clsact qdisc, as HostFilterClsact says, until the next port opens:
// that one deletes it, says so (Leftovers), puts its own filter first
// and, at Close, takes the qdisc away too.
func TestDetachOnKill(t *testing.T) {
	if mode := os.Getenv(holdEnv); mode != "" {
		hold(mode) // the child: never returns
	}
	for _, mode := range hostFilters {
		t.Run(mode.String(), func(t *testing.T) {
			skipWithoutHostFilter(t, mode)
			l := newLab(t, false)
			cmd, _, line := l.startHolder(t, "TestDetachOnKill", mode.String())
			if want := "attached " + mode.String() + ": asked for\n"; line != want {
				t.Fatalf("child: %q, want %q", line, want)
			}
			if ids := l.ingressPrograms(t); len(ids) != 1 {
				t.Fatalf("the child's program is not attached: %v", ids)
			}
			cmd.Process.Kill()
			cmd.Wait()
			if mode == HostFilterClsact {
				time.Sleep(100 * time.Millisecond)
				fs := l.filters(t, netlink.HANDLE_MIN_INGRESS)
				if len(fs) != 1 || fs[0].(*netlink.BpfFilter).Name != clsactName || l.ingressQdisc(t) == nil {
					t.Fatalf("after the kill: filters %v, qdisc %v; want the child's filter left on its clsact qdisc", fs, l.ingressQdisc(t))
				}
				clsactAfterKill(t, l)
				return
			}
			for deadline := time.Now().Add(labWait); ; time.Sleep(10 * time.Millisecond) {
				if ids := l.tcxPrograms(t); len(ids) == 0 {
					return
				} else if time.Now().After(deadline) {
					t.Fatalf("programs %v still attached after the process was killed", ids)
				}
			}
		})
	}
}

// clsactAfterKill opens a port over the cls_bpf filter a killed one
// left on gw-a and checks that the leftover is gone, the new filter
// alone on the ingress hook, and that Close takes the filter and the
// leftover's clsact qdisc away.
func clsactAfterKill(t *testing.T, l *lab) {
	p := l.open(t, Config{Queues: 1, HostFilter: HostFilterClsact})
	if ids := l.ingressPrograms(t); p.Leftovers() != 1 || len(ids) != 1 || ids[0] != progID(t, p) {
		t.Fatalf("a port opened after the kill: leftovers %d, programs %v; want the killed one's filter deleted and the new one alone", p.Leftovers(), ids)
	}
	netlab.Must(t, p.Close())
	if fs, q := l.filters(t, netlink.HANDLE_MIN_INGRESS), l.ingressQdisc(t); len(fs) != 0 || q != nil {
		t.Errorf("after Close: filters %v, qdisc %v; want neither", fs, q)
	}
}

// TestHostFilterFallback: on a kernel that refuses tcx (a child whose
// BPF_LINK_CREATE fails with EINVAL, as before Linux 6.6, through a
// seccomp filter), HostFilterAuto attaches the program as a cls_bpf
// filter on a clsact qdisc, says why, and Close leaves nothing behind.
func TestHostFilterFallback(t *testing.T) {
	if mode := os.Getenv(holdEnv); mode != "" {
		hold(mode)
	}
	if auditArch[runtime.GOARCH] == 0 {
		t.Skipf("no seccomp filter for %s here", runtime.GOARCH)
	}
	l := newLab(t, false)
	cmd, stdin, line := l.startHolder(t, "TestHostFilterFallback", "no-tcx")
	if want := "attached clsact: the kernel has no tcx (Linux 6.6)\n"; line != want {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child: %q, want %q", line, want)
	}
	if ids, q := l.ingressPrograms(t), l.ingressQdisc(t); len(ids) != 1 || len(l.tcxPrograms(t)) != 0 || q == nil || q.Type() != "clsact" {
		t.Errorf("the child's program: %v (tcx %v), qdisc %v; want one cls_bpf filter on a clsact qdisc", ids, l.tcxPrograms(t), q)
	}
	fmt.Fprintln(stdin) // close the port
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	if ids, q := l.ingressPrograms(t), l.ingressQdisc(t); len(ids) != 0 || q != nil {
		t.Errorf("after Close: programs %v, qdisc %v", ids, q)
	}
}

const holdEnv = "GSOPLANE_TEST_AFPACKET_HOLD"

// startHolder starts this test binary in A running test, which holds a
// port on gw-a attached as mode says (see hold), and returns it, its
// standard input and the line it wrote once the port was open. The
// process is killed at the end of the test if still running.
func (l *lab) startHolder(t *testing.T, test, mode string) (*exec.Cmd, io.Writer, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$")
	cmd.Env = append(os.Environ(), holdEnv+"="+mode)
	out, err := cmd.StdoutPipe()
	netlab.Must(t, err)
	stdin, err := cmd.StdinPipe()
	netlab.Must(t, err)
	netlab.Must(t, l.A.Start(cmd)) // the child lives in A
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("child: %q, %v", line, err)
	}
	return cmd, stdin, line
}

// hold is the child of startHolder: it opens a port on gw-a in its
// namespace, attached as mode says ("tcx", "clsact", or "no-tcx": auto
// on a kernel that refuses tcx), writes "attached MODE: WHY", and closes
// the port and exits when a line comes on its standard input; killed
// before, it leaves what a killed process leaves.
func hold(mode string) {
	cfg := Config{Ifname: netlab.NICA, Redirect: netlab.AppRoutes}
	switch mode {
	case "tcx":
		cfg.HostFilter = HostFilterTCX
	case "clsact":
		cfg.HostFilter = HostFilterClsact
	case "no-tcx":
		if err := refuseTCX(); err != nil {
			fmt.Println("seccomp:", err)
			os.Exit(1)
		}
	}
	p, err := Open(cfg)
	if err != nil {
		fmt.Println("Open:", err)
		os.Exit(1)
	}
	got, why := p.HostFilter()
	fmt.Printf("attached %v: %s\n", got, why)
	bufio.NewReader(os.Stdin).ReadString('\n')
	if err := p.Close(); err != nil {
		fmt.Println("Close:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// TestOpenErrors: a missing or non-Ethernet interface is refused, and
// nothing is left behind.
func TestOpenErrors(t *testing.T) {
	l := newLab(t, false)
	fds := openFDs(t)
	var err error
	l.A.Do(t, func() { _, err = Open(Config{Ifname: "nonexistent0"}) })
	if err == nil || !strings.Contains(err.Error(), "nonexistent0") {
		t.Errorf("missing interface: %v", err)
	}
	l.A.Do(t, func() { _, err = Open(Config{Ifname: "lo"}) })
	if !errors.Is(err, frame.ErrInvalidConfig) {
		t.Errorf("loopback: %v, want ErrInvalidConfig", err)
	}
	if n := openFDs(t); n != fds {
		t.Errorf("%d file descriptors open, %d before", n, fds)
	}
	if ids := l.ingressPrograms(t); len(ids) != 0 || l.ingressQdisc(t) != nil {
		t.Errorf("ingress programs left: %v, qdisc %v", ids, l.ingressQdisc(t))
	}
}

// TestUnprivileged: without the capabilities, Open says which are missing
// before it creates anything.
func TestUnprivileged(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("runs as a user without capabilities")
	}
	_, err := Open(Config{Ifname: "lo"})
	if !errors.Is(err, os.ErrPermission) || !strings.Contains(err.Error(), "CAP_NET_RAW") || !strings.Contains(err.Error(), "CAP_BPF") {
		t.Errorf("Open as %d: %v, want a permission error naming CAP_NET_RAW and CAP_BPF", os.Geteuid(), err)
	}
}

// TestStopAndClose: StopReceive makes an idle Receive return at once;
// after Close every method says so (ErrClosed, which wraps
// net.ErrClosed), and Stats still answers.
func TestStopAndClose(t *testing.T) {
	l := newLab(t, false)
	p := l.open(t, Config{Queues: 1})
	s := p.Sockets()[0]
	sink, err := l.newSink(t, s, netip.Addr{}, GSOModeAuto)
	netlab.Must(t, err)
	r := s.Receiver()
	frames := make([][]byte, rxBatch)
	start := time.Now()
	if n, err := r.Receive(frames); n != 0 || err != nil {
		t.Fatalf("idle Receive: %d, %v", n, err)
	}
	if d := time.Since(start); d < rxWait/2 {
		t.Errorf("idle Receive returned after %v, want about %v", d, rxWait)
	}
	p.StopReceive()
	start = time.Now()
	for range 10 {
		if n, err := r.Receive(frames); n != 0 || err != nil {
			t.Fatalf("Receive after StopReceive: %d, %v", n, err)
		}
	}
	if d := time.Since(start); d > rxWait {
		t.Errorf("10 Receives after StopReceive took %v", d)
	}

	got := make([]frame.Frame, 1)
	if sink.Alloc(got) != 1 {
		t.Fatal("Alloc")
	}
	netlab.Must(t, p.Close())
	if _, err := r.Receive(frames); !errors.Is(err, ErrClosed) || !errors.Is(err, net.ErrClosed) {
		t.Errorf("Receive after Close: %v", err)
	}
	got[0].Len = 100
	if _, err := sink.Transmit(got); !errors.Is(err, ErrClosed) {
		t.Errorf("Transmit after Close: %v", err)
	}
	if err := sink.Wait(time.Millisecond); err != nil {
		t.Errorf("Wait after Close: %v", err)
	}
	if err := p.SetRedirect(netlab.AppRoutes); !errors.Is(err, ErrClosed) {
		t.Errorf("SetRedirect after Close: %v", err)
	}
	_ = s.Stats()
	if _, err := NewSink(s, p.Ifindex(), netip.Addr{}, GSOModeAuto); !errors.Is(err, ErrClosed) {
		t.Errorf("NewSink after Close: %v", err)
	}
}

// TestReattach: in either mode, an ingress program detached from outside
// (a tcx link detached as bpftool link detach does, a cls_bpf filter
// deleted as tc filter del does, or its clsact qdisc deleted) shows in
// Attached, and Reattach, from any thread, puts the program back (and
// the qdisc); Close leaves nothing.
func TestReattach(t *testing.T) {
	for _, mode := range hostFilters {
		t.Run(mode.String(), func(t *testing.T) {
			skipWithoutHostFilter(t, mode)
			l := newLab(t, false)
			p := l.open(t, Config{Queues: 1, HostFilter: mode})
			if ok, err := p.Attached(); !ok || err != nil {
				t.Fatalf("Attached: %v, %v", ok, err)
			}
			l.detachFromOutside(t, p)
			if ok, err := p.Attached(); ok || err != nil {
				t.Fatalf("Attached after an outside detach: %v, %v", ok, err)
			}
			if ids := l.ingressPrograms(t); len(ids) != 0 {
				t.Fatalf("programs after the detach: %v", ids)
			}
			netlab.Must(t, p.Reattach()) // from this goroutine, outside A
			if ok, err := p.Attached(); !ok || err != nil {
				t.Fatalf("Attached after Reattach: %v, %v", ok, err)
			}
			if ids := l.ingressPrograms(t); len(ids) != 1 || ids[0] != progID(t, p) {
				t.Fatalf("programs after Reattach: %v", ids)
			}
			if mode == HostFilterClsact { // the qdisc deleted, its filters with it
				netlab.Must(t, l.A.Netlink().QdiscDel(l.ingressQdisc(t)))
				if ok, err := p.Attached(); ok || err != nil {
					t.Fatalf("Attached after the qdisc was deleted: %v, %v", ok, err)
				}
				netlab.Must(t, p.Reattach())
				if ok, err := p.Attached(); !ok || err != nil || l.ingressQdisc(t) == nil {
					t.Fatalf("Attached after Reattach: %v, %v; qdisc %v", ok, err, l.ingressQdisc(t))
				}
			}
			netlab.Must(t, p.Close())
			if ids, q := l.ingressPrograms(t), l.ingressQdisc(t); len(ids) != 0 || q != nil {
				t.Errorf("after Close: programs %v, qdisc %v", ids, q)
			}
			if _, err := p.Attached(); !errors.Is(err, ErrClosed) {
				t.Errorf("Attached after Close: %v", err)
			}
			if err := p.Reattach(); !errors.Is(err, ErrClosed) {
				t.Errorf("Reattach after Close: %v", err)
			}
		})
	}
}

// detachFromOutside takes the port's ingress program off gw-a as another
// process would: detaching its tcx link through a handle of its own, or
// deleting its cls_bpf filter.
func (l *lab) detachFromOutside(t *testing.T, p *Port) {
	t.Helper()
	mode, _ := p.HostFilter()
	if mode == HostFilterTCX {
		info, err := p.filter.tcx.Info()
		netlab.Must(t, err)
		other, err := link.NewFromID(info.ID) // someone else's handle on our link
		netlab.Must(t, err)
		netlab.Must(t, other.Detach())
		other.Close()
		return
	}
	for _, f := range l.filters(t, netlink.HANDLE_MIN_INGRESS) {
		if b, ok := f.(*netlink.BpfFilter); ok && ebpf.ProgramID(b.Id) == progID(t, p) {
			netlab.Must(t, l.A.Netlink().FilterDel(f))
			return
		}
	}
	t.Fatal("no filter of the port's program on the ingress hook")
}

// TestClsactLeavesOthers: a clsact (or ingress) qdisc that was there
// before, with another program's filters on both hooks, survives the
// port untouched: the port's filter goes ahead of the others and only it
// leaves. A filter someone adds to the clsact qdisc the port added keeps
// that qdisc after Close.
func TestClsactLeavesOthers(t *testing.T) {
	for _, kind := range []string{"clsact", "ingress"} {
		t.Run(kind, func(t *testing.T) {
			l := newLab(t, false)
			lnk := l.A.LinkT(t, netlab.NICA)
			nl := l.A.Netlink()
			netlab.Must(t, nl.QdiscAdd(&netlink.GenericQdisc{QdiscType: kind, QdiscAttrs: netlink.QdiscAttrs{
				LinkIndex: lnk.Attrs().Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_INGRESS,
			}}))
			hooks := []uint32{netlink.HANDLE_MIN_INGRESS}
			if kind == "clsact" {
				hooks = append(hooks, netlink.HANDLE_MIN_EGRESS)
			}
			for _, hook := range hooks {
				netlab.Must(t, nl.FilterAdd(otherFilter(t, lnk.Attrs().Index, hook)))
			}
			before := l.hooks(t, hooks)

			p := l.open(t, Config{Queues: 1, HostFilter: HostFilterClsact})
			var ours *netlink.BpfFilter
			for _, f := range l.filters(t, netlink.HANDLE_MIN_INGRESS) {
				if b, ok := f.(*netlink.BpfFilter); ok && ebpf.ProgramID(b.Id) == progID(t, p) {
					ours = b
				}
			}
			if ours == nil || ours.Priority != 9 || ours.Name != clsactName || !ours.DirectAction {
				t.Fatalf("the port's filter: %+v, want direct-action %q at priority 9, ahead of the other", ours, clsactName)
			}
			netlab.Must(t, p.Close())
			if after := l.hooks(t, hooks); after != before {
				t.Errorf("after Close:\n%s\nbefore Open:\n%s", after, before)
			}
		})
	}
	t.Run("added", func(t *testing.T) {
		l := newLab(t, false)
		p := l.open(t, Config{Queues: 1, HostFilter: HostFilterClsact})
		netlab.Must(t, l.A.Netlink().FilterAdd(otherFilter(t, l.A.LinkT(t, netlab.NICA).Attrs().Index, netlink.HANDLE_MIN_EGRESS)))
		netlab.Must(t, p.Close())
		if q, fs := l.ingressQdisc(t), l.filters(t, netlink.HANDLE_MIN_EGRESS); q == nil || q.Type() != "clsact" || len(fs) != 1 {
			t.Errorf("after Close: qdisc %v, egress filters %v; want the clsact qdisc with the other filter", q, fs)
		}
		if ids := l.ingressPrograms(t); len(ids) != 0 {
			t.Errorf("programs after Close: %v", ids)
		}
	})
}

// otherFilter is another program's cls_bpf filter for the hook of
// ifindex, at priority 10: a program that passes everything on.
func otherFilter(t *testing.T, ifindex int, hook uint32) *netlink.BpfFilter {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "Apache-2.0",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, -1), asm.Return()}}) // TC_ACT_UNSPEC
	netlab.Must(t, err)
	t.Cleanup(func() { prog.Close() }) // the filter holds the program
	return &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{LinkIndex: ifindex, Parent: hook, Priority: 10, Protocol: unix.ETH_P_ALL},
		Fd:          prog.FD(), Name: "other", DirectAction: true,
	}
}

// hooks describes gw-a's ingress qdisc and the filters on hooks.
func (l *lab) hooks(t *testing.T, hooks []uint32) string {
	t.Helper()
	q := l.ingressQdisc(t)
	if q == nil {
		return "no qdisc"
	}
	s := fmt.Sprintf("qdisc %s %+v", q.Type(), *q.Attrs())
	for _, hook := range hooks {
		for _, f := range l.filters(t, hook) {
			s += fmt.Sprintf("\n%x: %s %+v", hook, f.Type(), *f.Attrs())
		}
	}
	return s
}

// TestInterfaceGone: in either mode, once the interface is deleted the
// program is no longer attached, Reattach says ErrDetached, and Close
// still succeeds.
func TestInterfaceGone(t *testing.T) {
	for _, mode := range hostFilters {
		t.Run(mode.String(), func(t *testing.T) {
			skipWithoutHostFilter(t, mode)
			l := newLab(t, false)
			p := l.open(t, Config{Queues: 1, HostFilter: mode})
			netlab.Must(t, l.A.Netlink().LinkDel(l.A.LinkT(t, netlab.NICA)))
			if ok, err := p.Attached(); ok || err != nil {
				t.Errorf("Attached without the interface: %v, %v", ok, err)
			}
			if err := p.Reattach(); !errors.Is(err, ErrDetached) {
				t.Errorf("Reattach without the interface: %v, want ErrDetached", err)
			}
			if err := p.Close(); err != nil {
				t.Errorf("Close without the interface: %v", err)
			}
		})
	}
}
