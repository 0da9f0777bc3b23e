package prefix

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

// Tries keeps two BPF LPM tries, one of IPv4 and one of IPv6 prefixes
// (keys as LPMKey encodes them, a one-byte value), holding exactly the
// prefixes of the last Set. It does not own the maps. It is not safe for
// concurrent use.
type Tries struct {
	v4, v6 *ebpf.Map
	keys   map[string]*ebpf.Map // the keys in the maps → their map
}

// NewTries returns Tries over v4 and v6, which it takes to be empty.
func NewTries(v4, v6 *ebpf.Map) *Tries {
	return &Tries{v4: v4, v6: v6, keys: map[string]*ebpf.Map{}}
}

// Set makes the tries hold exactly prefixes (normalised: see Normalize):
// it adds the new ones first, then removes the stale ones, so that a
// destination in both the old and the new set never goes unmatched.
func (t *Tries) Set(prefixes []netip.Prefix) error {
	want := make(map[string]*ebpf.Map, len(prefixes))
	for _, pfx := range prefixes {
		m := t.v6
		if pfx.Addr().Is4() {
			m = t.v4
		}
		k := LPMKey(pfx)
		want[string(k)] = m
		if err := m.Put(k, uint8(1)); err != nil {
			return fmt.Errorf("add redirect prefix %s: %w", pfx, err)
		}
		t.keys[string(k)] = m
	}
	for k, m := range t.keys {
		if _, ok := want[k]; ok {
			continue
		}
		if err := m.Delete([]byte(k)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove redirect prefix: %w", err)
		}
		delete(t.keys, k)
	}
	return nil
}
