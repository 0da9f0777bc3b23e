package tunnel_test

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/internal/testing/docrecipe"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
	"github.com/gsoplane/gsoplane/internal/testing/syncbuf"
)

// TestTunnelRecipe checks that the README's tunnel quick start is an
// excerpt of docs/embedding.md's tunnel program, builds that program as
// written, runs one in each namespace of a pair, gives the TUN devices
// their addresses as the doc says, moves TCP both ways through them
// (SHA-256 compared), stops them with SIGTERM and checks that they
// stopped promptly, said what they did and warned about nothing. With
// two queues, four streams at once arrive in order (no segment out of
// order at a receiver while the TUN devices dropped nothing).
func TestTunnelRecipe(t *testing.T) {
	src, err := docrecipe.Block("../../docs/embedding.md", "## A VPN tunnel", "go")
	netlab.Must(t, err)
	excerpt, err := docrecipe.Block("../../README.md", "#### A plain tunnel", "go")
	netlab.Must(t, err)
	if err := docrecipe.Excerpt(excerpt, src); err != nil {
		t.Errorf("the README's tunnel quick start is no excerpt of docs/embedding.md's program: %v", err)
	}
	bin := buildRecipe(t, src)
	for _, queues := range []int{1, 2} {
		t.Run(fmt.Sprint("queues=", queues), func(t *testing.T) { runRecipe(t, bin, queues) })
	}
}

func runRecipe(t *testing.T, bin string, queues int) {
	p := netlab.NewPairT(t, "readme")
	ends := []struct {
		ns          *netlab.NS
		local, peer netip.Addr
		inner       netip.Addr
	}{{p.A, p.AddrA, p.AddrB, innerA}, {p.B, p.AddrB, p.AddrA, innerB}}
	var cmds []*exec.Cmd
	var outs []*syncbuf.Buffer
	for _, e := range ends {
		out := new(syncbuf.Buffer)
		cmd := exec.Command(bin, "-local", e.local.String()+":51820", "-peer", e.peer.String()+":51820", "-queues", fmt.Sprint(queues))
		cmd.Stdout, cmd.Stderr = out, out
		netlab.Must(t, e.ns.Start(cmd))
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	for i, e := range ends {
		waitLink(t, e.ns, "vpn0", outs[i])
		netlab.Must(t, e.ns.AddAddr("vpn0", e.inner.String()+"/24"))
		netlab.Must(t, e.ns.LinkUp("vpn0"))
	}
	netlab.TCPTransfer(t, p.A, p.B, netip.AddrPortFrom(innerB, 5001), 32<<20, false)
	netlab.TCPTransfer(t, p.A, p.B, netip.AddrPortFrom(innerB, 5002), 32<<20, true)
	if queues > 1 {
		before := p.A.LinkDrops(t, "vpn0") + p.B.LinkDrops(t, "vpn0")
		st := tcpStreams(t, p, 4, 16<<20)
		drops := p.A.LinkDrops(t, "vpn0") + p.B.LinkDrops(t, "vpn0") - before
		t.Logf("%d retransmissions, %d segments out of order, %d dropped by the TUN devices", st.retrans, st.outOfOrder, drops)
		if st.outOfOrder != 0 && drops == 0 {
			t.Errorf("%d segments out of order at the receivers, nothing dropped", st.outOfOrder)
		}
	}
	for i, cmd := range cmds {
		start := time.Now()
		netlab.Must(t, cmd.Process.Signal(syscall.SIGTERM))
		err := cmd.Wait()
		log := outs[i].String()
		t.Logf("stopped in %v: %s", time.Since(start).Round(time.Millisecond), log)
		if err != nil || !strings.Contains(log, "inner MTU 1456") || !strings.Contains(log, "0 fall-backs") || strings.Contains(log, "WARN") {
			t.Errorf("the program exited with %v and said %q", err, log)
		}
	}
}

// buildRecipe compiles the program src, a recipe as written, inside
// this module, and returns the binary.
func buildRecipe(t *testing.T, src string) string {
	t.Helper()
	dir, err := os.MkdirTemp(".", "recipe-")
	netlab.Must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	netlab.Must(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644))
	bin := filepath.Join(t.TempDir(), "recipe")
	if out, err := exec.Command("go", "build", "-o", bin, "./"+dir).CombinedOutput(); err != nil {
		t.Fatalf("the recipe does not build: %v\n%s\n%s", err, out, src)
	}
	return bin
}

// waitLink waits until the link name exists in ns.
func waitLink(t *testing.T, ns *netlab.NS, name string, out *syncbuf.Buffer) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := ns.Link(name); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 10 s: %s", name, out)
		}
	}
}
