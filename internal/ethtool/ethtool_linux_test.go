package ethtool

import (
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
)

// fakeDevice builds a device from feature states. Unnamed bits pad the
// names, as the kernel may have them, so that the eighth lands in the
// second block.
func fakeDevice(states map[string]Feature) *device {
	const step = 5
	names := make([]string, len(states)*step)
	for i, name := range slices.Sorted(maps.Keys(states)) {
		names[i*step] = name
	}
	d := newDevice(names)
	d.words = 2
	d.blocks = make([]getBlock, d.words)
	for name, st := range states {
		b, m := &d.blocks[d.bits[name]/32], uint32(1)<<(d.bits[name]%32)
		if st.Active {
			b.active |= m
		}
		if st.Requested {
			b.requested |= m
		}
		if st.Changeable {
			b.available |= m
		}
	}
	return d
}

var (
	on      = Feature{Active: true, Requested: true, Changeable: true}
	off     = Feature{Changeable: true}
	fixedOn = Feature{Active: true}
	fixedNo = Feature{}
)

// vethLike has the checksum features of a veth, of which only the
// generic ones are changeable, GRO off, and one fixed-on feature.
var vethLike = map[string]Feature{
	"tx-checksum-ipv4":       fixedNo,
	"tx-checksum-ip-generic": on,
	"tx-checksum-ipv6":       fixedNo,
	"tx-checksum-fcoe-crc":   fixedNo,
	"tx-checksum-sctp":       on,
	"rx-gro":                 off,
	"rx-udp-gro-forwarding":  off,
	"highdma":                fixedOn,
}

// TestPlan checks alias expansion, the name-to-bit mapping and the
// ETHTOOL_SFEATURES masks without a device.
func TestPlan(t *testing.T) {
	d := fakeDevice(vethLike)
	tests := []struct {
		want   map[string]bool
		change []string // features in the request, with "=on"/"=off"
		err    string   // part of the error, if any
	}{
		{want: map[string]bool{"tx": false, "gro": true},
			change: []string{"rx-gro=on", "tx-checksum-ip-generic=off", "tx-checksum-sctp=off"}},
		{want: map[string]bool{"tx-checksumming": true, "generic-receive-offload": false},
			change: []string{"rx-gro=off", "tx-checksum-ip-generic=on", "tx-checksum-sctp=on"}},
		{want: map[string]bool{"rx-udp-gro-forwarding": true},
			change: []string{"rx-udp-gro-forwarding=on"}},
		{want: map[string]bool{"highdma": true}}, // fixed in the wanted state
		{want: map[string]bool{"highdma": false}, err: "fixed features cannot be switched: highdma (wanted off)"},
		{want: map[string]bool{"no-such": true, "gro": true, "lro": true}, err: "unknown features: lro, no-such"},
		{want: map[string]bool{"tx": false, "tx-checksum-sctp": true}, err: "both on and off: tx-checksum-sctp"},
	}
	for _, tt := range tests {
		targets, err := d.plan(tt.want)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("plan(%v): error %v, want one containing %q", tt.want, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("plan(%v): %v", tt.want, err)
			continue
		}
		blocks, _ := d.request(targets)
		if got := changes(d, blocks); !slices.Equal(got, tt.change) {
			t.Errorf("plan(%v) changes %v, want %v", tt.want, got, tt.change)
		}
	}
}

// changes decodes request blocks into sorted "name=on" strings.
func changes(d *device, blocks []setBlock) []string {
	var out []string
	for bit, name := range d.names {
		b, m := blocks[bit/32], uint32(1)<<(bit%32)
		if b.valid&m != 0 {
			out = append(out, name+"="+onOff(b.requested&m != 0))
		}
	}
	slices.Sort(out)
	return out
}

// TestAliasFixedMembers checks the rules for alias members that are fixed.
func TestAliasFixedMembers(t *testing.T) {
	allFixedOff := fakeDevice(map[string]Feature{"tx-checksum-ipv4": fixedNo, "tx-checksum-ipv6": fixedNo})
	if _, err := allFixedOff.plan(map[string]bool{"tx": true}); err == nil {
		t.Error(`"tx" on with every member fixed off did not fail`)
	}
	if _, err := allFixedOff.plan(map[string]bool{"tx": false}); err != nil {
		t.Errorf(`"tx" off with every member fixed off: %v`, err)
	}
	oneFixedOn := fakeDevice(map[string]Feature{"tx-checksum-ip-generic": fixedOn, "tx-checksum-sctp": on})
	if _, err := oneFixedOn.plan(map[string]bool{"tx": false}); err == nil ||
		!strings.Contains(err.Error(), "tx-checksum-ip-generic (wanted off by tx)") {
		t.Errorf(`"tx" off with a member fixed on: error %v`, err)
	}
	d := fakeDevice(vethLike)
	d.blocks[d.bits["rx-gro"]/32].active |= 1 << (d.bits["rx-gro"] % 32) // as if the kernel kept it on
	if err := d.check([]target{{name: "rx-gro", bit: d.bits["rx-gro"], on: false}}); err == nil {
		t.Error("check accepted a feature in the wrong state")
	}
}

func TestSplitStrings(t *testing.T) {
	data := make([]byte, 3*gstringLen)
	copy(data, "rx-gro")
	copy(data[2*gstringLen:], strings.Repeat("x", gstringLen)) // no NUL
	got := splitStrings(data, 3)
	if want := []string{"rx-gro", "", strings.Repeat("x", gstringLen)}; !slices.Equal(got, want) {
		t.Errorf("splitStrings = %q, want %q", got, want)
	}
}

func TestAliasTable(t *testing.T) {
	for long, short := range longAliases {
		if _, ok := aliases[short]; !ok {
			t.Errorf("long alias %s names %s, which is not an alias", long, short)
		}
	}
}

// TestLoopback reads the features of lo, which needs no privileges.
func TestLoopback(t *testing.T) {
	f, err := Features("lo")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"rx-gro", "tx-checksum-ip-generic", "rx-udp-gro-forwarding", "tx-tcp-segmentation", "rx-gro-list"} {
		if _, ok := f[name]; !ok {
			t.Errorf("lo has no feature %s", name)
		}
	}
	if _, err := Features("gsoplane-none"); err == nil || !strings.Contains(err.Error(), "no such device") {
		t.Errorf("Features of a missing device: error %v", err)
	}
	if _, err := Features("a-name-far-too-long"); err == nil {
		t.Error("Features accepted a name longer than IFNAMSIZ")
	}
}

// TestUnprivileged checks the error for callers without CAP_NET_ADMIN.
func TestUnprivileged(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("checks the error an unprivileged caller gets: run as non-root")
	}
	f, err := Features("lo")
	if err != nil {
		t.Fatal(err)
	}
	// Asks for the current state, so it would change nothing even if allowed.
	err = SetFeatures("lo", map[string]bool{"rx-gro": f["rx-gro"].Active})
	if err == nil || !strings.Contains(err.Error(), "CAP_NET_ADMIN") {
		t.Errorf("SetFeatures without privileges: error %v, want one saying CAP_NET_ADMIN", err)
	}
}
