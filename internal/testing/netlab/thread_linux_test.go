package netlab

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
)

// TestRun checks that Run is inside the namespace and that its caller is
// back outside afterwards.
func TestRun(t *testing.T) {
	ns := NewT(t, "run")
	inside := func() error {
		cur, err := netns.Get()
		if err != nil {
			return err
		}
		defer cur.Close()
		if !cur.Equal(ns.Handle()) {
			return fmt.Errorf("not in %s", ns.Name)
		}
		return nil
	}
	if err := ns.Run(inside); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if inside() == nil {
		t.Fatal("the caller stayed in the namespace after Run")
	}
}

// TestSysfs writes and reads attributes of a veth inside a namespace and
// checks that neither the host's view of /sys nor its mounts change.
func TestSysfs(t *testing.T) {
	ns, peer := NewT(t, "sysfs"), NewT(t, "sysfs")
	dev := fmt.Sprintf("gss%da", os.Getpid())
	Must(t, AddVeth(ns, dev, peer, "gss-b", 0))
	mounts := sysfsMounts(t)

	attrs := []struct{ file, value string }{
		{"gro_flush_timeout", "2000000"},
		{"napi_defer_hard_irqs", "1"},
	}
	for _, a := range attrs {
		path := "/sys/class/net/" + dev + "/" + a.file
		if err := ns.WriteSysfs(path, a.value); err != nil {
			t.Fatalf("WriteSysfs: %v", err)
		}
		got, err := ns.ReadSysfs(path)
		if err != nil {
			t.Fatalf("ReadSysfs: %v", err)
		}
		if got != a.value {
			t.Errorf("%s = %q, want %q", path, got, a.value)
		}
	}

	if _, err := os.Stat("/sys/class/net/" + dev); !os.IsNotExist(err) {
		t.Errorf("the host's /sys shows %s of the namespace (stat: %v)", dev, err)
	}
	if got := sysfsMounts(t); got != mounts {
		t.Errorf("the host has %d sysfs mounts after the calls, %d before", got, mounts)
	}
	if _, err := ns.ReadSysfs("/sys/class/net/" + dev + "/no-such-attribute"); err == nil {
		t.Error("ReadSysfs of a missing file did not fail")
	}
}

// sysfsMounts counts the sysfs mounts of the test process.
func sysfsMounts(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		// The filesystem type follows the " - " separator.
		if _, fs, ok := strings.Cut(line, " - "); ok && strings.HasPrefix(fs, "sysfs ") {
			n++
		}
	}
	return n
}
