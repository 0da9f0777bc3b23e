package prefix

import (
	"encoding/binary"
	"net/netip"
	"os"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// lpmTrie creates an LPM trie map with keys of keyLen bytes, closed when
// the test ends.
func lpmTrie(t *testing.T, keyLen uint32) *ebpf.Map {
	t.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "gsop_test_lpm", Type: ebpf.LPMTrie, KeySize: keyLen, ValueSize: 1,
		MaxEntries: 16, Flags: unix.BPF_F_NO_PREALLOC})
	if err != nil {
		t.Fatalf("create an LPM trie: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// contents returns the prefixes in m, decoded from their keys.
func contents(t *testing.T, m *ebpf.Map) []netip.Prefix {
	t.Helper()
	var got []netip.Prefix
	var k []byte
	var v uint8
	it := m.Iterate()
	for it.Next(&k, &v) {
		a, _ := netip.AddrFromSlice(k[4:])
		got = append(got, netip.PrefixFrom(a, int(binary.NativeEndian.Uint32(k))))
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, netip.Prefix.Compare)
	return got
}

// TestTries: Set leaves exactly the prefixes asked for in the tries, each
// in its family's.
func TestTries(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs CAP_BPF: run as root")
	}
	v4, v6 := lpmTrie(t, KeyLen4), lpmTrie(t, KeyLen6)
	tr := NewTries(v4, v6)
	pfx := netip.MustParsePrefix
	for _, step := range []struct{ set, want4, want6 []netip.Prefix }{
		{[]netip.Prefix{pfx("198.18.0.0/24"), pfx("198.19.0.0/16"), pfx("2001:2::/48")},
			[]netip.Prefix{pfx("198.18.0.0/24"), pfx("198.19.0.0/16")}, []netip.Prefix{pfx("2001:2::/48")}},
		{[]netip.Prefix{pfx("198.19.0.0/16"), pfx("2001:2:1::/48")},
			[]netip.Prefix{pfx("198.19.0.0/16")}, []netip.Prefix{pfx("2001:2:1::/48")}},
		{nil, nil, nil},
	} {
		if err := tr.Set(step.set); err != nil {
			t.Fatalf("Set(%v): %v", step.set, err)
		}
		if got4, got6 := contents(t, v4), contents(t, v6); !slices.Equal(got4, step.want4) || !slices.Equal(got6, step.want6) {
			t.Errorf("after Set(%v): IPv4 trie %v, IPv6 trie %v", step.set, got4, got6)
		}
	}
}
