package netnsutil

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// TestSysfs writes and reads attributes of a veth inside a namespace and
// checks that neither the host's view of /sys nor its mounts change.
func TestSysfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs CAP_NET_ADMIN: run as root")
	}
	name := fmt.Sprintf("gsoplane-sysfs-%d", os.Getpid())
	ns, err := NewNamed(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ns.Close()
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("delete netns %s: %v", name, err)
		}
	})
	dev := fmt.Sprintf("gss%da", os.Getpid())
	if err := Run(ns, func() error {
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: dev}, PeerName: dev[:len(dev)-1] + "b"})
	}); err != nil {
		t.Fatalf("add veth: %v", err)
	}
	mounts := sysfsMounts(t)

	attrs := []struct{ file, value string }{
		{"gro_flush_timeout", "2000000"},
		{"napi_defer_hard_irqs", "1"},
	}
	for _, a := range attrs {
		path := "/sys/class/net/" + dev + "/" + a.file
		if err := WriteSysfs(ns, path, a.value); err != nil {
			t.Fatalf("WriteSysfs: %v", err)
		}
		got, err := ReadSysfs(ns, path)
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
	if _, err := ReadSysfs(ns, "/sys/class/net/"+dev+"/no-such-attribute"); err == nil {
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
