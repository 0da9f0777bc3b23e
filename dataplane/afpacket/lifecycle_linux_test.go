package afpacket

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/internal/netlab"
)

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

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	netlab.Must(t, err)
	return len(ents)
}

// TestCloseReopen: Close leaves no tcx program, BPF object or socket
// behind, and the interface takes a new port at once.
func TestCloseReopen(t *testing.T) {
	l := newLab(t, false)
	fds := openFDs(t)
	for round := range 2 {
		var p *Port
		var err error
		l.A.Do(t, func() { p, err = Open(Config{Ifname: netlab.NICA, Redirect: netlab.AppRoutes}) })
		if err != nil {
			t.Fatalf("round %d: Open: %v", round, err)
		}
		ids := l.tcxPrograms(t)
		info, err := p.filter.drop.Info()
		netlab.Must(t, err)
		id, _ := info.ID()
		if len(ids) != 1 || ids[0] != id {
			t.Errorf("round %d: tcx ingress programs %v, want ours (%d)", round, ids, id)
		}
		if len(p.Sockets()) != 2 { // the veth has two RX queues
			t.Errorf("round %d: %d sockets", round, len(p.Sockets()))
		}
		netlab.Must(t, p.Close())
		netlab.Must(t, p.Close()) // idempotent
		if ids := l.tcxPrograms(t); len(ids) != 0 {
			t.Errorf("round %d: tcx ingress programs left: %v", round, ids)
		}
		if n := openFDs(t); n != fds {
			t.Errorf("round %d: %d file descriptors open after Close, %d before Open", round, n, fds)
		}
	}
}

// TestDetachOnKill: a process killed with SIGKILL leaves no tcx program
// behind: it hangs on a BPF link, which dies with the process's file
// descriptors.
func TestDetachOnKill(t *testing.T) {
	if os.Getenv(holdEnv) == "1" {
		hold() // the child: never returns
	}
	l := newLab(t, false)
	cmd := exec.Command(os.Args[0], "-test.run=^TestDetachOnKill$")
	cmd.Env = append(os.Environ(), holdEnv+"=1")
	out, err := cmd.StdoutPipe()
	netlab.Must(t, err)
	netlab.Must(t, l.A.Start(cmd)) // the child lives in A
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "attached\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child: %q, %v", line, err)
	}
	if ids := l.tcxPrograms(t); len(ids) != 1 {
		t.Fatalf("the child's program is not attached: %v", ids)
	}
	cmd.Process.Kill()
	cmd.Wait()
	for deadline := time.Now().Add(labWait); ; time.Sleep(10 * time.Millisecond) {
		if ids := l.tcxPrograms(t); len(ids) == 0 {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("programs %v still attached after the process was killed", ids)
		}
	}
}

const holdEnv = "GSOPLANE_TEST_AFPACKET_HOLD"

// hold opens a port on gw-a in its namespace, says so and waits to be
// killed.
func hold() {
	if _, err := Open(Config{Ifname: netlab.NICA, Redirect: netlab.AppRoutes}); err != nil {
		fmt.Println("Open:", err)
		os.Exit(1)
	}
	fmt.Println("attached")
	select {}
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
	if !errors.Is(err, pipeline.ErrInvalidConfig) {
		t.Errorf("loopback: %v, want ErrInvalidConfig", err)
	}
	if n := openFDs(t); n != fds {
		t.Errorf("%d file descriptors open, %d before", n, fds)
	}
	if ids := l.tcxPrograms(t); len(ids) != 0 {
		t.Errorf("tcx programs left: %v", ids)
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

	got := make([]pipeline.Frame, 1)
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

// TestReattach: a tcx link detached from outside (as bpftool link detach
// does) shows in Attached, and Reattach, from any thread, puts the
// program back.
func TestReattach(t *testing.T) {
	l := newLab(t, false)
	p := l.open(t, Config{Queues: 1})
	if ok, err := p.Attached(); !ok || err != nil {
		t.Fatalf("Attached: %v, %v", ok, err)
	}
	info, err := p.filter.tcx.Info()
	netlab.Must(t, err)
	other, err := link.NewFromID(info.ID) // someone else's handle on our link
	netlab.Must(t, err)
	netlab.Must(t, other.Detach())
	other.Close()
	if ok, err := p.Attached(); ok || err != nil {
		t.Fatalf("Attached after an outside detach: %v, %v", ok, err)
	}
	if ids := l.tcxPrograms(t); len(ids) != 0 {
		t.Fatalf("programs after the detach: %v", ids)
	}
	netlab.Must(t, p.Reattach()) // from this goroutine, outside A
	if ok, err := p.Attached(); !ok || err != nil {
		t.Fatalf("Attached after Reattach: %v, %v", ok, err)
	}
	if ids := l.tcxPrograms(t); len(ids) != 1 {
		t.Fatalf("programs after Reattach: %v", ids)
	}
	netlab.Must(t, p.Close())
	if _, err := p.Attached(); !errors.Is(err, ErrClosed) {
		t.Errorf("Attached after Close: %v", err)
	}
	if err := p.Reattach(); !errors.Is(err, ErrClosed) {
		t.Errorf("Reattach after Close: %v", err)
	}
}
