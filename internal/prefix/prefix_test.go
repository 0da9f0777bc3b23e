package prefix

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestNormalize(t *testing.T) {
	pfx := netip.MustParsePrefix
	for _, c := range []struct {
		name    string
		in      []netip.Prefix
		want    []netip.Prefix
		wantErr string
	}{
		{"none", nil, []netip.Prefix{}, ""},
		{"masked", []netip.Prefix{pfx("198.18.1.7/24"), pfx("2001:2:0:1::9/64")}, []netip.Prefix{pfx("198.18.1.0/24"), pfx("2001:2:0:1::/64")}, ""},
		{"IPv4-mapped", []netip.Prefix{pfx("::ffff:198.18.3.4/112"), pfx("::ffff:198.18.3.4/128")}, []netip.Prefix{pfx("198.18.0.0/16"), pfx("198.18.3.4/32")}, ""},
		{"IPv4-mapped, shorter than the mapping", []netip.Prefix{pfx("::ffff:198.18.3.4/80")}, []netip.Prefix{pfx("::/80")}, ""},
		{"invalid", []netip.Prefix{pfx("198.18.0.0/15"), {}}, nil, "not valid"},
		{"too many IPv4", []netip.Prefix{pfx("198.18.0.0/24"), pfx("198.18.1.0/24"), pfx("::ffff:198.18.2.0/120"), pfx("2001:2::/48")}, nil, "more than 2"},
		{"two of each", []netip.Prefix{pfx("198.18.0.0/24"), pfx("2001:2::/48"), pfx("198.18.1.0/24"), pfx("2001:2:1::/48")},
			[]netip.Prefix{pfx("198.18.0.0/24"), pfx("2001:2::/48"), pfx("198.18.1.0/24"), pfx("2001:2:1::/48")}, ""},
	} {
		in := slices.Clone(c.in)
		got, err := Normalize(c.in, 2)
		switch {
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.wantErr)
		case c.wantErr == "" && (err != nil || !slices.Equal(got, c.want)):
			t.Errorf("%s: %v, %v; want %v", c.name, got, err, c.want)
		}
		if !slices.Equal(in, c.in) {
			t.Errorf("%s: the input changed to %v", c.name, c.in)
		}
	}
}

func TestLPMKey(t *testing.T) {
	for _, c := range []struct {
		p    netip.Prefix
		addr []byte
	}{
		{netip.MustParsePrefix("198.18.1.0/24"), []byte{198, 18, 1, 0}},
		{netip.MustParsePrefix("2001:2::/48"), []byte{0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
	} {
		k := LPMKey(c.p)
		if len(k) != 4+len(c.addr) || binary.NativeEndian.Uint32(k) != uint32(c.p.Bits()) || !bytes.Equal(k[4:], c.addr) {
			t.Errorf("LPMKey(%v) = % x, want the length %d in host order and % x", c.p, k, c.p.Bits(), c.addr)
		}
	}
	if len(LPMKey(netip.MustParsePrefix("198.18.0.0/15"))) != KeyLen4 || len(LPMKey(netip.MustParsePrefix("2001:2::/48"))) != KeyLen6 {
		t.Error("key lengths are not KeyLen4 and KeyLen6")
	}
}
