package netnsutil

import (
	"fmt"
	"os"
	"testing"

	"github.com/vishvananda/netns"
)

// TestRun creates a namespace and checks that Run and RunNamed are inside
// it and that Run's caller is back outside afterwards.
func TestRun(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs CAP_SYS_ADMIN: run as root")
	}
	name := fmt.Sprintf("gsoplane-nsu-%d", os.Getpid())
	ns, err := NewNamed(name)
	if err != nil {
		t.Fatal(err)
	}
	defer netns.DeleteNamed(name)
	defer ns.Close()
	inside := func() error {
		cur, err := netns.Get()
		if err != nil {
			return err
		}
		defer cur.Close()
		if !cur.Equal(ns) {
			return fmt.Errorf("not in %s", name)
		}
		return nil
	}
	if err := Run(ns, inside); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := RunNamed(name, inside); err != nil {
		t.Fatalf("RunNamed: %v", err)
	}
	if inside() == nil {
		t.Fatal("the caller stayed in the namespace after Run")
	}
}
