package kernels

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// entry is one member of a newc archive, read back.
type entry struct {
	name string
	mode uint32
	data string
}

// readNewc parses a newc archive as the kernel's unpacker does, checking
// the magic and the four-byte alignment of names and data.
func readNewc(t *testing.T, b []byte) []entry {
	t.Helper()
	var out []entry
	off := 0
	for {
		if off%4 != 0 {
			t.Fatalf("header at %d, not 4-aligned", off)
		}
		h := string(b[off : off+110])
		if h[:6] != "070701" {
			t.Fatalf("bad magic %q at %d", h[:6], off)
		}
		field := func(i int) uint32 {
			v, err := strconv.ParseUint(h[6+8*i:14+8*i], 16, 32)
			if err != nil {
				t.Fatal(err)
			}
			return uint32(v)
		}
		mode, size, namesize := field(1), field(6), field(11)
		name := string(b[off+110 : off+110+int(namesize)-1])
		if b[off+110+int(namesize)-1] != 0 {
			t.Fatalf("%s: name not NUL-terminated", name)
		}
		off += 110 + int(namesize)
		off += pad4(off)
		if name == "TRAILER!!!" {
			if off != len(b) {
				t.Fatalf("%d bytes after the trailer", len(b)-off)
			}
			return out
		}
		out = append(out, entry{name, mode, string(b[off : off+int(size)])})
		off += int(size)
		off += pad4(off)
	}
}

func TestArchive(t *testing.T) {
	src := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(src, []byte("\x7fELF..."), 0o755); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	a := NewArchive(&buf)
	a.File("etc/kernels/plan.json", 0o644, []byte("{}"))
	a.Symlink("sbin/modprobe", "/init")
	a.CopyFile("/init", src)
	a.Dir("tmp", 0o777|os.ModeSticky)
	a.Dir("etc", 0o755) // already written as a parent: not again
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	got := readNewc(t, buf.Bytes())
	want := []entry{
		{"etc", modeDir | 0o755, ""},
		{"etc/kernels", modeDir | 0o755, ""},
		{"etc/kernels/plan.json", modeRegular | 0o644, "{}"},
		{"sbin", modeDir | 0o755, ""},
		{"sbin/modprobe", modeSymlink | 0o777, "/init"},
		{"init", modeRegular | 0o755, "\x7fELF..."},
		{"tmp", modeDir | modeSticky | 0o777, ""},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("archive:\n got %v\nwant %v", got, want)
	}
}

const testOutput = `=== RUN   TestPass
--- PASS: TestPass (0.00s)
=== RUN   TestSkip
    lab_test.go:27: iperf3 not installed (apt-get install iperf3)
--- SKIP: TestSkip (0.00s)
=== RUN   TestFail
    prog_test.go:40: load: invalid indirect read from stack
    prog_test.go:41: more
--- FAIL: TestFail (0.12s)
=== RUN   TestParent
=== RUN   TestParent/a
=== PAUSE TestParent/a
=== RUN   TestParent/b
=== CONT  TestParent/a
    x_test.go:9: tcx needs Linux 6.6 or later
=== NAME  TestParent/b
    x_test.go:12: b failed
--- FAIL: TestParent (0.30s)
    --- SKIP: TestParent/a (0.10s)
    --- FAIL: TestParent/b (0.20s)
=== RUN   TestSlow
panic: test timed out after 6m0s
	running tests:
		TestSlow (6m0s)

goroutine 1 [running]:
`

func TestParseTestOutput(t *testing.T) {
	var r Result
	if err := ParseTestOutput(strings.NewReader(testOutput), &r); err != nil {
		t.Fatal(err)
	}
	if r.Passed != 1 {
		t.Errorf("passed %d, want 1", r.Passed)
	}
	wantFailed := []Case{
		{Name: "TestFail", Output: []string{"prog_test.go:40: load: invalid indirect read from stack", "prog_test.go:41: more"}},
		{Name: "TestParent"},
		{Name: "TestParent/b", Output: []string{"x_test.go:12: b failed"}},
	}
	if !reflect.DeepEqual(r.Failed, wantFailed) {
		t.Errorf("failed:\n got %q\nwant %q", r.Failed, wantFailed)
	}
	wantSkipped := []Case{
		{Name: "TestSkip", Reason: "iperf3 not installed (apt-get install iperf3)"},
		{Name: "TestParent/a", Reason: "tcx needs Linux 6.6 or later"},
	}
	wantPanic := []string{"panic: test timed out after 6m0s", "running tests:", "TestSlow (6m0s)"}
	if !reflect.DeepEqual(r.Panic, wantPanic) || !r.TimedOut() {
		t.Errorf("panic: got %q (timed out: %v), want %q", r.Panic, r.TimedOut(), wantPanic)
	}
	if !reflect.DeepEqual(r.Skipped, wantSkipped) {
		t.Errorf("skipped:\n got %q\nwant %q", r.Skipped, wantSkipped)
	}
	for reason, class := range map[string]string{
		wantSkipped[0].Reason:                            SkipTool,
		wantSkipped[1].Reason:                            SkipKernel,
		"needs CAP_NET_ADMIN: run as root":               SkipOther,
		`exec: "ping": executable file not found`:        SkipTool,
		"XDP_MAX_TX_SKB_BUDGET: operation not supported": SkipKernel,
		"kernel feature missing: WireGuard (wireguard.ko, Linux 5.6): add a link of kind wireguard: operation not supported": SkipKernel,
	} {
		if got := SkipClass(reason); got != class {
			t.Errorf("SkipClass(%q) = %s, want %s", reason, got, class)
		}
	}
}

func TestResultLine(t *testing.T) {
	r := Result{Kernel: "debian12", Name: "dataplane/xsk", Status: StatusFail, Exit: 1, Failed: []Case{{Name: "TestX"}}}
	got, ok := ParseResultLine("[   12.3] veth0: link up" + r.Line())
	if !ok || !reflect.DeepEqual(got, r) {
		t.Fatalf("ParseResultLine = %+v, %v; want %+v", got, ok, r)
	}
	if _, ok := ParseResultLine("PASS"); ok {
		t.Fatal("a line without the prefix parsed")
	}
}

func TestModules(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("modules.dep", "kernel/net/sched/cls_bpf.ko:\n"+
		"kernel/drivers/net/virtio_net.ko: kernel/net/core/failover.ko kernel/drivers/net/net_failover.ko\n"+
		"kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko\n"+
		"kernel/net/core/failover.ko:\n"+
		"kernel/drivers/net/tun.ko:\n")
	write("modules.alias", "alias virtio:d00000001v* virtio_net\nalias devname:net/tun tun\nalias char-major-10-200 tun\n")
	write("modules.builtin", "kernel/net/packet/af_packet.ko\n")
	m, err := ReadModules(dir)
	if err != nil {
		t.Fatal(err)
	}
	checkVirtioNet(t, m, "virtio-net")
	if got := m.Lookup("char-major-10-200"); !reflect.DeepEqual(got, []string{"tun"}) {
		t.Errorf("Lookup(char-major-10-200) = %v", got)
	}
	if !m.Builtin("af_packet") || m.Builtin("tun") {
		t.Error("Builtin is wrong")
	}
	got := m.Closure([]string{"kernel/drivers/net"})
	want := []string{"kernel/net/core/failover.ko", "kernel/drivers/net/net_failover.ko", "kernel/drivers/net/tun.ko", "kernel/drivers/net/virtio_net.ko"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Closure = %v, want %v", got, want)
	}
	var dep, alias bytes.Buffer
	if err := m.WriteIndex(&dep, &alias, got[:2]); err != nil {
		t.Fatal(err)
	}
	if want := "kernel/net/core/failover.ko: \nkernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko\n"; dep.String() != want {
		t.Errorf("modules.dep:\n%s\nwant\n%s", dep.String(), want)
	}
	if alias.Len() != 0 {
		t.Errorf("modules.alias of modules left out: %q", alias.String())
	}
}

// checkVirtioNet checks the index of the test modules: virtio_net after
// what it depends on, and found by its virtio alias. It returns the order.
func checkVirtioNet(t *testing.T, m *Modules, name string) []string {
	t.Helper()
	order, err := m.Order(name)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"kernel/net/core/failover.ko", "kernel/drivers/net/net_failover.ko", "kernel/drivers/net/virtio_net.ko"}
	if !reflect.DeepEqual(order, want) {
		t.Errorf("Order = %v, want %v", order, want)
	}
	if got := m.Lookup("virtio:d00000001v00001AF4"); !reflect.DeepEqual(got, []string{"virtio_net"}) {
		t.Errorf("Lookup(virtio alias) = %v", got)
	}
	return order
}

// TestFeatureExpected: a feature is expected from its release on, by
// major and minor number.
func TestFeatureExpected(t *testing.T) {
	f := Feature{Name: "tcx", Since: "6.6"}
	for release, want := range map[string]bool{
		"6.1.0-57-cloud-amd64": false, "6.6.0": true, "6.12.118+deb13-cloud-amd64": true,
		"7.3.4+deb13-cloud-amd64": true, "5.15.0": false, "6.18.44-fc-v1045": true,
	} {
		if got := f.Expected(release); got != want {
			t.Errorf("Expected(%q) = %v, want %v", release, got, want)
		}
	}
	rep := &Report{Kernels: []Kernel{{Release: "6.1.0", Smoke: &Smoke{Features: []Feature{f, {Name: "uso", Since: "6.2", Present: true}}}}}}
	if n := rep.Disagreements(); n != 1 {
		t.Errorf("Disagreements = %d, want 1 (USO present on 6.1)", n)
	}
}
