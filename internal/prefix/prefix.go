// Package prefix handles the destination prefixes a port redirects from
// its NIC (the Redirect of the AF_PACKET and AF_XDP ports' configs):
// Normalize checks and masks them, LPMKey encodes one as the key of the
// BPF LPM tries the ports' programs match destinations against, and
// Tries (Linux) keeps a pair of such tries holding exactly a set of
// them. Normalize and LPMKey are pure Go and build everywhere.
package prefix

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// Key lengths of the LPM tries: a u32 prefix length and the address.
const (
	KeyLen4 = 4 + 4
	KeyLen6 = 4 + 16
)

// Normalize checks prefixes and returns them masked, in a new slice, the
// IPv4-mapped IPv6 ones (::ffff:0:0/96 and longer) as IPv4. It fails on
// an invalid prefix or on more than max prefixes of one family.
func Normalize(prefixes []netip.Prefix, max int) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(prefixes))
	var n4, n6 int
	for _, p := range prefixes {
		if !p.IsValid() {
			return nil, fmt.Errorf("redirect prefix %q is not valid", p)
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		if p.Addr().Is4() {
			n4++
		} else {
			n6++
		}
		out = append(out, p.Masked())
	}
	if n4 > max || n6 > max {
		return nil, fmt.Errorf("more than %d redirect prefixes of one family", max)
	}
	return out, nil
}

// LPMKey encodes p as struct bpf_lpm_trie_key: a host-order u32 prefix
// length, then the address bytes in network order (KeyLen4 or KeyLen6
// bytes in all).
func LPMKey(p netip.Prefix) []byte {
	a := p.Addr().AsSlice()
	k := make([]byte, 4+len(a))
	binary.NativeEndian.PutUint32(k, uint32(p.Bits()))
	copy(k[4:], a)
	return k
}
