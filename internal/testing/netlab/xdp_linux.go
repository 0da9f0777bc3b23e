// Programs taken off from outside, as another tool would.

package netlab

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// DetachXDP detaches the XDP program on the link called name in ns by
// its BPF link, found by ID from a handle of its own, as bpftool link
// detach does: whoever attached it keeps a link that is defunct.
func (ns *NS) DetachXDP(name string) error {
	l, err := ns.Link(name)
	if err != nil {
		return err
	}
	x := l.Attrs().Xdp
	if x == nil || !x.Attached {
		return fmt.Errorf("no XDP program on %s in %s", name, ns.Name)
	}
	it := new(link.Iterator)
	defer it.Close()
	for it.Next() {
		info, err := it.Link.Info()
		if err == nil && info.Program == ebpf.ProgramID(x.ProgId) && info.XDP() != nil {
			return it.Link.Detach()
		}
	}
	return fmt.Errorf("no BPF link holds XDP program %d (%v)", x.ProgId, it.Err())
}
