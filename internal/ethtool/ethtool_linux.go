package ethtool

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

const (
	ssFeatures = 4  // ETH_SS_FEATURES, the string set naming feature bits
	gstringLen = 32 // ETH_GSTRING_LEN, the padded length of one string
)

// aliases maps the short and long names of `ethtool -K` to the kernel
// features they cover, as the package documentation lists them.
var aliases = map[string][]string{
	"rx":  {"rx-checksum"},
	"tx":  {"tx-checksum-ipv4", "tx-checksum-ip-generic", "tx-checksum-ipv6", "tx-checksum-fcoe-crc", "tx-checksum-sctp"},
	"sg":  {"tx-scatter-gather", "tx-scatter-gather-fraglist"},
	"tso": {"tx-tcp-segmentation", "tx-tcp-ecn-segmentation", "tx-tcp-mangleid-segmentation", "tx-tcp6-segmentation", "tx-tcp-accecn-segmentation"},
	"gso": {"tx-generic-segmentation"},
	"gro": {"rx-gro"},
	"lro": {"rx-lro"},

	"rxvlan": {"rx-vlan-hw-parse"},
	"txvlan": {"tx-vlan-hw-insert"},
	"ntuple": {"rx-ntuple-filter"},
	"rxhash": {"rx-hashing"},
}

// longAliases are the names `ethtool -k` prints for the short aliases.
var longAliases = map[string]string{
	"rx-checksumming":              "rx",
	"tx-checksumming":              "tx",
	"scatter-gather":               "sg",
	"tcp-segmentation-offload":     "tso",
	"generic-segmentation-offload": "gso",
	"generic-receive-offload":      "gro",
	"large-receive-offload":        "lro",
	"rx-vlan-offload":              "rxvlan",
	"tx-vlan-offload":              "txvlan",
	"ntuple-filters":               "ntuple",
	"receive-hashing":              "rxhash",
}

// Features returns every feature the kernel names, keyed by its kernel
// name (the names `ethtool -k` prints, except that it shows a few under
// the long alias names listed in the package documentation, such as
// generic-receive-offload for rx-gro).
func Features(ifname string) (map[string]Feature, error) {
	s, err := open(ifname)
	if err != nil {
		return nil, err
	}
	defer s.close()
	d, err := s.device()
	if err != nil {
		return nil, err
	}
	return d.features(), nil
}

// Driver returns the name of the device's driver ("virtio_net", "veth").
func Driver(ifname string) (string, error) {
	s, err := open(ifname)
	if err != nil {
		return "", err
	}
	defer s.close()
	info, err := unix.IoctlGetEthtoolDrvinfo(s.fd, ifname)
	if err != nil {
		return "", s.fail("ETHTOOL_GDRVINFO", err)
	}
	return unix.ByteSliceToString(info.Driver[:]), nil
}

// SetFeatures switches the features named in want on (true) or off
// (false) with one ETHTOOL_SFEATURES request, leaving all others alone,
// and then reads them back. Keys are kernel feature names or the aliases
// listed in the package documentation. It fails, naming them, for unknown
// names, for fixed features in the wrong state, and for features the
// kernel left in the wrong state (it may refuse a change or undo it
// because of a feature that depends on another).
func SetFeatures(ifname string, want map[string]bool) error {
	s, err := open(ifname)
	if err != nil {
		return err
	}
	defer s.close()
	d, err := s.device()
	if err != nil {
		return err
	}
	targets, err := d.plan(want)
	if err != nil {
		return fmt.Errorf("ethtool %s: %w", ifname, err)
	}
	if blocks, changed := d.request(targets); changed {
		// The flags the kernel returns (ETHTOOL_F_WISH and the like) say
		// no more than the read-back below, which names the features.
		if err := s.setFeatures(blocks); err != nil {
			return s.fail("set features", err)
		}
		if err := s.refresh(d); err != nil {
			return err
		}
	}
	if err := d.check(targets); err != nil {
		return fmt.Errorf("ethtool %s: %w", ifname, err)
	}
	return nil
}

// Channels returns the device's current RX, TX and combined channel
// (queue) counts.
func Channels(ifname string) (rx, tx, combined int, err error) {
	s, err := open(ifname)
	if err != nil {
		return 0, 0, 0, err
	}
	defer s.close()
	ch, err := s.channels()
	if err != nil {
		return 0, 0, 0, s.fail("get channels", err)
	}
	return int(ch.rxCount), int(ch.txCount), int(ch.combinedCount), nil
}

// socket is a throw-away AF_INET datagram socket, the handle for
// SIOCETHTOOL requests about one device in the network namespace of the
// thread that opened it.
type socket struct {
	fd     int
	ifname string
}

func open(ifname string) (*socket, error) {
	if ifname == "" || len(ifname) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("ethtool %q: invalid interface name", ifname)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("ethtool %s: %w", ifname, os.NewSyscallError("socket", err))
	}
	return &socket{fd: fd, ifname: ifname}, nil
}

func (s *socket) close() { unix.Close(s.fd) }

// fail wraps the errno of a failed request, explaining the common ones.
func (s *socket) fail(what string, errno error) error {
	switch {
	case errors.Is(errno, unix.EPERM):
		what += " (needs CAP_NET_ADMIN)"
	case errors.Is(errno, unix.EOPNOTSUPP):
		what += " (the driver does not support it)"
	}
	return fmt.Errorf("ethtool %s: %s: %w", s.ifname, what, os.NewSyscallError("ioctl SIOCETHTOOL", errno))
}

// device is a snapshot of a device's features.
type device struct {
	names  []string       // feature names by bit; "" for unnamed bits
	bits   map[string]int // bit by feature name
	blocks []getBlock     // feature states, 32 bits a block
	words  int            // blocks the kernel has, as SFEATURES wants them
}

// device reads the feature names and states of the socket's device.
func (s *socket) device() (*device, error) {
	n, err := s.stringSetLen(ssFeatures)
	if err != nil {
		return nil, s.fail("count features", err)
	}
	names, err := s.stringSet(ssFeatures, n)
	if err != nil {
		return nil, s.fail("get feature names", err)
	}
	d := newDevice(names)
	return d, s.refresh(d)
}

// refresh reads the device's feature states into d.
func (s *socket) refresh(d *device) error {
	blocks, words, err := s.getFeatures((len(d.names) + 31) / 32)
	if err != nil {
		return s.fail("get features", err)
	}
	if words < len(blocks) {
		return fmt.Errorf("ethtool %s: the kernel has %d feature words for %d features", s.ifname, words, len(d.names))
	}
	d.blocks, d.words = blocks, words
	return nil
}

func newDevice(names []string) *device {
	d := &device{names: names, bits: make(map[string]int, len(names))}
	for bit, name := range names {
		if name != "" {
			d.bits[name] = bit
		}
	}
	return d
}

// splitStrings cuts n NUL-padded strings of gstringLen bytes out of data.
func splitStrings(data []byte, n int) []string {
	out := make([]string, n)
	for i := range out {
		s := data[i*gstringLen : (i+1)*gstringLen]
		if end := bytes.IndexByte(s, 0); end >= 0 {
			s = s[:end]
		}
		out[i] = string(s)
	}
	return out
}

// state returns the state of feature bit.
func (d *device) state(bit int) Feature {
	b, m := d.blocks[bit/32], uint32(1)<<(bit%32)
	return Feature{
		Active:     b.active&m != 0,
		Requested:  b.requested&m != 0,
		Changeable: b.available&m != 0 && b.neverChanged&m == 0,
	}
}

func (d *device) features() map[string]Feature {
	m := make(map[string]Feature, len(d.bits))
	for name, bit := range d.bits {
		m[name] = d.state(bit)
	}
	return m
}

// target is one feature SetFeatures sets.
type target struct {
	name  string // kernel name
	bit   int
	on    bool
	alias string // the alias that asked for it, or ""
}

// plan expands want into the features to set, and checks that each is
// known and either changeable or fixed in the wanted state.
func (d *device) plan(want map[string]bool) ([]target, error) {
	var targets []target
	var unknown []string
	for _, key := range slices.Sorted(maps.Keys(want)) {
		t, ok := d.expand(key, want[key])
		if !ok {
			unknown = append(unknown, key)
		}
		targets = append(targets, t...)
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("unknown features: %s", strings.Join(unknown, ", "))
	}
	if err := conflicts(targets); err != nil {
		return nil, err
	}
	targets = d.skipFixedOff(targets)
	if err := d.fixed(targets); err != nil {
		return nil, err
	}
	return targets, nil
}

// expand returns the features key stands for on this device; false if it
// is neither a feature nor an alias with a member the device knows.
func (d *device) expand(key string, on bool) ([]target, bool) {
	if bit, ok := d.bits[key]; ok {
		return []target{{name: key, bit: bit, on: on}}, true
	}
	alias := key
	if short, ok := longAliases[key]; ok {
		alias = short
	}
	var out []target
	for _, name := range aliases[alias] {
		if bit, ok := d.bits[name]; ok {
			out = append(out, target{name: name, bit: bit, on: on, alias: key})
		}
	}
	return out, len(out) > 0
}

// conflicts reports features asked to be both on and off.
func conflicts(targets []target) error {
	seen := make(map[int]bool, len(targets))
	var bad []string
	for _, t := range targets {
		if on, ok := seen[t.bit]; ok && on != t.on {
			bad = append(bad, t.name)
		}
		seen[t.bit] = t.on
	}
	if len(bad) > 0 {
		return fmt.Errorf("features asked to be both on and off: %s", strings.Join(bad, ", "))
	}
	return nil
}

// skipFixedOff drops the members of aliases switched on that are fixed
// off, when the alias has another member that is or can be on: "tx" on
// asks for whatever checksum offload the device has. An alias whose
// members are all fixed off keeps them, for fixed to report.
func (d *device) skipFixedOff(targets []target) []target {
	canOn := make(map[string]bool)
	for _, t := range targets {
		if t.alias != "" && t.on && !d.fixedOff(t.bit) {
			canOn[t.alias] = true
		}
	}
	return slices.DeleteFunc(targets, func(t target) bool {
		return t.alias != "" && t.on && canOn[t.alias] && d.fixedOff(t.bit)
	})
}

func (d *device) fixedOff(bit int) bool {
	st := d.state(bit)
	return !st.Changeable && !st.Active
}

// fixed reports fixed features asked for a state they are not in.
func (d *device) fixed(targets []target) error {
	var bad []string
	for _, t := range targets {
		if st := d.state(t.bit); !st.Changeable && st.Active != t.on {
			bad = append(bad, describe(t))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("fixed features cannot be switched: %s", strings.Join(bad, ", "))
	}
	return nil
}

// request builds the ETHTOOL_SFEATURES blocks for the changeable targets;
// false if there are none.
func (d *device) request(targets []target) ([]setBlock, bool) {
	blocks := make([]setBlock, d.words)
	changed := false
	for _, t := range targets {
		if !d.state(t.bit).Changeable {
			continue // fixed in the wanted state; never-changeable bits in valid fail with EINVAL
		}
		m := uint32(1) << (t.bit % 32)
		blocks[t.bit/32].valid |= m
		if t.on {
			blocks[t.bit/32].requested |= m
		}
		changed = true
	}
	return blocks, changed
}

// check reports targets whose active state is not the wanted one.
func (d *device) check(targets []target) error {
	var bad []string
	for _, t := range targets {
		if d.state(t.bit).Active != t.on {
			bad = append(bad, describe(t))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("features not switched: %s", strings.Join(bad, ", "))
	}
	return nil
}

// describe names a target and the state it was wanted in.
func describe(t target) string {
	if t.alias != "" {
		return t.name + " (wanted " + onOff(t.on) + " by " + t.alias + ")"
	}
	return t.name + " (wanted " + onOff(t.on) + ")"
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}
