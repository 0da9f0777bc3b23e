package wgkernel

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

// unhex decodes hex with spaces, for messages written out by hand.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func fill(b byte) (k Key) {
	for i := range k {
		k[i] = b
	}
	return k
}

func littleEndian(t *testing.T) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the messages below are written out for a little-endian host")
	}
}

var testConfig = Config{
	Name:         "wg0",
	PrivateKey:   fill(1),
	ListenPort:   51820,
	ReplacePeers: true,
	Peers: []PeerConfig{{
		PublicKey:  fill(2),
		Endpoint:   netip.MustParseAddrPort("192.0.2.1:51821"),
		AllowedIPs: []netip.Prefix{netip.MustParsePrefix("10.9.0.1/32"), netip.MustParsePrefix("fd00::/64")},
	}},
}

// TestSetDeviceEncoding checks WG_CMD_SET_DEVICE byte by byte against the
// message written out from the kernel's include/uapi/linux/wireguard.h.
func TestSetDeviceEncoding(t *testing.T) {
	littleEndian(t)
	key := func(b string) string { return strings.Repeat(b, KeyLen) }
	want := unhex(t, "01 01 0000"+ // WG_CMD_SET_DEVICE, version 1
		"0800 0200 77673000"+ // WGDEVICE_A_IFNAME "wg0\0"
		"0800 0500 01000000"+ // WGDEVICE_A_FLAGS: WGDEVICE_F_REPLACE_PEERS
		"2400 0300"+key("01")+ // WGDEVICE_A_PRIVATE_KEY
		"0600 0600 6cca 0000"+ // WGDEVICE_A_LISTEN_PORT 51820, padded
		"8800 0880"+ // WGDEVICE_A_PEERS, nested
		"8400 0080"+ // peer 0, nested
		"2400 0100"+key("02")+ // WGPEER_A_PUBLIC_KEY
		"1400 0400 0200 ca6d c0000201 0000000000000000"+ // WGPEER_A_ENDPOINT: sockaddr_in
		"4800 0980"+ // WGPEER_A_ALLOWEDIPS, nested
		"1c00 0080 0600 0100 0200 0000 0800 0200 0a090001 0500 0300 20 000000"+ // 10.9.0.1/32
		"2800 0180 0600 0100 0a00 0000 1400 0200 fd000000000000000000000000000000 0500 0300 40 000000") // fd00::/64
	got, err := setDevice(testConfig)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("WG_CMD_SET_DEVICE:\n got %x\nwant %x", got, want)
	}

	if got, want := getFamily(), unhex(t, "03 02 0000 0e00 0200 776972656775617264 00 0000"); !bytes.Equal(got, want) {
		t.Errorf("CTRL_CMD_GETFAMILY:\n got %x\nwant %x", got, want)
	}
	if got, want := getDevice("wg0"), unhex(t, "00 01 0000 0800 0200 77673000"); !bytes.Equal(got, want) {
		t.Errorf("WG_CMD_GET_DEVICE:\n got %x\nwant %x", got, want)
	}
	if got, want := sockaddr(netip.MustParseAddrPort("[2001:db8::1]:443")),
		unhex(t, "0a00 01bb 00000000 20010db8000000000000000000000001 00000000"); !bytes.Equal(got, want) {
		t.Errorf("sockaddr_in6:\n got %x\nwant %x", got, want)
	}
}

func TestSetDeviceRefuses(t *testing.T) {
	for _, c := range []Config{
		{Name: "wg0", ListenPort: 65536},
		{Name: "wg0", Peers: []PeerConfig{{AllowedIPs: []netip.Prefix{{}}}}},
	} {
		if _, err := setDevice(c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

// getReply is a WG_CMD_GET_DEVICE dump as the kernel writes it: the peer
// continued in a second message with the rest of its allowed IPs.
func getReply() [][]byte {
	first := newMessage(cmdGetDevice, familyVersion)
	first.u32(deviceIfindex, 7)
	first.str(deviceIfname, "wg0")
	pub := fill(3)
	first.attr(devicePublicKey, pub[:])
	first.u16(deviceListenPort, 51820)
	first.nest(devicePeers, func() {
		first.nest(0, func() {
			peer := fill(2)
			first.attr(peerPublicKey, peer[:])
			first.attr(peerEndpoint, sockaddr(netip.MustParseAddrPort("192.0.2.1:51821")))
			ts := binary.NativeEndian.AppendUint64(nil, 1700000000)
			first.attr(peerLastHandshake, binary.NativeEndian.AppendUint64(ts, 5))
			first.attr(peerRxBytes, binary.NativeEndian.AppendUint64(nil, 1<<33))
			first.attr(peerTxBytes, binary.NativeEndian.AppendUint64(nil, 12345))
			(&PeerConfig{AllowedIPs: testConfig.Peers[0].AllowedIPs[:1]}).encodeAllowedIPs(first)
		})
	})
	second := newMessage(cmdGetDevice, familyVersion)
	second.str(deviceIfname, "wg0")
	second.nest(devicePeers, func() {
		second.nest(0, func() {
			peer := fill(2)
			second.attr(peerPublicKey, peer[:])
			(&PeerConfig{AllowedIPs: testConfig.Peers[0].AllowedIPs[1:]}).encodeAllowedIPs(second)
		})
	})
	return [][]byte{first.b, second.b}
}

func TestParseDevice(t *testing.T) {
	d, err := parseDevice(getReply())
	if err != nil {
		t.Fatal(err)
	}
	want := &Device{Index: 7, Name: "wg0", PublicKey: fill(3), ListenPort: 51820, Peers: []Peer{{
		PublicKey:     fill(2),
		Endpoint:      netip.MustParseAddrPort("192.0.2.1:51821"),
		LastHandshake: time.Unix(1700000000, 5),
		RxBytes:       1 << 33,
		TxBytes:       12345,
		AllowedIPs:    testConfig.Peers[0].AllowedIPs,
	}}}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("got  %+v\nwant %+v", d, want)
	}
	if d.Peer(fill(2)) == nil || d.Peer(fill(9)) != nil {
		t.Error("Peer finds the wrong peers")
	}

	// A SET message reads back as what it sets.
	set, err := setDevice(testConfig)
	if err != nil {
		t.Fatal(err)
	}
	d, err = parseDevice([][]byte{set})
	if err != nil {
		t.Fatal(err)
	}
	if p := d.Peer(fill(2)); d.Name != "wg0" || d.ListenPort != 51820 || p == nil ||
		p.Endpoint != testConfig.Peers[0].Endpoint || !reflect.DeepEqual(p.AllowedIPs, testConfig.Peers[0].AllowedIPs) {
		t.Errorf("WG_CMD_SET_DEVICE read back as %+v", d)
	}
}

func TestParseMalformed(t *testing.T) {
	// The reply cut anywhere but after a whole attribute of the top level
	// (the last may lack its padding, or part of it) is refused.
	reply := getReply()[0]
	whole := map[int]bool{4: true, 12: true, 20: true, 56: true, 62: true, 63: true, 64: true}
	for cut := 0; cut < len(reply); cut++ {
		if _, err := parseDevice([][]byte{reply[:cut]}); (err == nil) != whole[cut] {
			t.Errorf("cut at %d: error %v", cut, err)
		}
	}
	if _, err := parseFamilyID([]byte{1, 2, 0, 0}); err == nil {
		t.Error("a controller reply without a family ID: no error")
	}
}

func FuzzParseDevice(f *testing.F) {
	for _, m := range getReply() {
		f.Add(m)
	}
	set, _ := setDevice(testConfig)
	f.Add(set)
	f.Fuzz(func(t *testing.T, msg []byte) {
		parseDevice([][]byte{msg})
		parseFamilyID(msg)
	})
}
