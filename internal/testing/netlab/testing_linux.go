package netlab

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TB is the part of testing.TB the lab uses.
type TB interface {
	Helper()
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Skip(args ...any)
}

// RequireRoot skips the test unless it runs as root.
func RequireRoot(t TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs CAP_NET_ADMIN: run as root")
	}
}

// Must fails the test if err is not nil.
func Must(t TB, err error) {
	if err != nil {
		t.Helper()
		t.Fatal(err)
	}
}

// NewT creates a namespace for a test (see New), named after the tag,
// and deletes it in t.Cleanup. It skips the test unless root.
func NewT(t TB, tag string) *NS {
	t.Helper()
	RequireRoot(t)
	ns, err := New(tag)
	return closeInCleanup(t, ns, err)
}

// NewTopologyT builds the reference topology for a test and removes it
// in t.Cleanup. It skips the test unless root.
func NewTopologyT(t TB, tag string) *Topology {
	t.Helper()
	RequireRoot(t)
	tp, err := NewTopology(tag)
	return closeInCleanup(t, tp, err)
}

// NewTopologyOnNICsT builds the reference topology on the pair of real
// NICs NICsEnv names, for a test, and gives them back in t.Cleanup. It
// skips the test unless root and unless the pair is named.
func NewTopologyOnNICsT(t TB, tag string) *Topology {
	t.Helper()
	RequireRoot(t)
	a, b, err := EnvNICs()
	if err != nil {
		t.Skip(err)
	}
	tp, err := NewTopologyOnNICs(tag, a, b)
	return closeInCleanup(t, tp, err)
}

// closeInCleanup fails the test if err is not nil, and otherwise closes
// c in t.Cleanup.
func closeInCleanup[C interface{ Close() error }](t TB, c C, err error) C {
	t.Helper()
	Must(t, err)
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("%v", err)
		}
	})
	return c
}

// Do runs fn inside ns (see NS.Run), failing the test if it cannot enter.
func (ns *NS) Do(t TB, fn func()) {
	t.Helper()
	if err := ns.Run(func() error { fn(); return nil }); err != nil {
		t.Fatal(err)
	}
}

// ListenUDP opens a UDP socket in ns bound to addr, closed when the test
// ends.
func (ns *NS) ListenUDP(t TB, addr netip.AddrPort) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	var err error
	ns.Do(t, func() { c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr)) })
	if err != nil {
		t.Fatalf("listen %v: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Main runs a package's tests (m.Run; pass the *testing.M) and then fails
// them if they left a lab namespace of this process or an open file
// descriptor (a socket, a TUN queue, a BPF program, map or link, a
// netlink handle) behind. Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(netlab.Main(m)) }
func Main(m interface{ Run() int }) int {
	// The runtime's poller opens its descriptors on first use: let it.
	if r, w, err := os.Pipe(); err == nil {
		r.Close()
		w.Close()
	}
	before := openFDs()
	code := m.Run()
	var leaks []string
	for fd, what := range openFDs() {
		if _, ok := before[fd]; !ok {
			leaks = append(leaks, fmt.Sprintf("fd %s (%s)", fd, what))
		}
	}
	leaks = append(leaks, ownNamespaces()...)
	if len(leaks) > 0 && code == 0 {
		fmt.Fprintf(os.Stderr, "netlab: the tests left behind: %s\n", strings.Join(leaks, ", "))
		return 1
	}
	return code
}

// openFDs returns this process's open file descriptors and what they are.
func openFDs() map[string]string {
	fds := map[string]string{}
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err == nil { // the directory's own fd is gone by now
			fds[e.Name()] = target
		}
	}
	return fds
}

// ownNamespaces lists the lab namespaces this process created and did not
// delete.
func ownNamespaces() []string {
	var left []string
	for name, pid := range labNamespaces() {
		if pid == os.Getpid() {
			left = append(left, "netns "+name)
		}
	}
	return left
}

// LinkT returns the link called name, failing the test if it is missing.
func (ns *NS) LinkT(t TB, name string) netlink.Link {
	t.Helper()
	l, err := ns.Link(name)
	Must(t, err)
	return l
}

// LinkDrops sums what the links called names in ns dropped so far, both
// ways (their rx_dropped and tx_dropped); with no names, every link's.
func (ns *NS) LinkDrops(t TB, names ...string) uint64 {
	t.Helper()
	var links []netlink.Link
	if len(names) == 0 {
		var err error
		links, err = ns.Netlink().LinkList()
		Must(t, err)
	}
	for _, name := range names {
		links = append(links, ns.LinkT(t, name))
	}
	var n uint64
	for _, l := range links {
		if s := l.Attrs().Statistics; s != nil {
			n += s.RxDropped + s.TxDropped
		}
	}
	return n
}

// SocketT opens a socket inside ns and closes it in t.Cleanup.
func (ns *NS) SocketT(t TB, family, typ int) int {
	t.Helper()
	fd, err := ns.Socket(family, typ)
	Must(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// Output runs cmd in ns to its end and returns what it printed, stdout
// and stderr together; the test fails if it does not succeed.
func (ns *NS) Output(t TB, cmd *exec.Cmd) string {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := ns.Start(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out.String())
	}
	return out.String()
}

// GoBuild builds the main package in dir into out with this test's Go
// tool and CGO_ENABLED=0 (the project's binaries drop their privileges
// on every thread, which a cgo build cannot), and returns out.
func GoBuild(t TB, dir, out string) string {
	t.Helper()
	goTool := "go"
	if root := runtime.GOROOT(); root != "" {
		goTool = filepath.Join(root, "bin", "go")
	}
	cmd := exec.Command(goTool, "build", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", dir, err, b)
	}
	return out
}
