package uapi

import (
	"bufio"
	"encoding/hex"
	"errors"
	"io"
	"net/netip"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/wireguard"
)

func key(b byte) wireguard.Key {
	k := wireguard.Key{1: b, 31: 64} // clamped
	return k
}

func hexKey(k wireguard.Key) string { return hex.EncodeToString(k[:]) }

func ptr[T any](v T) *T { return &v }

// TestParseSet: a set operation as wg setconf writes it, and the lines
// whose order matters.
func TestParseSet(t *testing.T) {
	in := "private_key=" + hexKey(key(1)) + "\nlisten_port=51820\nfwmark=0\nreplace_peers=true\n" +
		"public_key=" + hexKey(key(2)) + "\npreshared_key=" + hexKey(key(3)) +
		"\nendpoint=[fe80::1%eth0]:51820\npersistent_keepalive_interval=25\n" +
		"allowed_ip=10.9.9.9/32\nreplace_allowed_ips=true\nallowed_ip=10.0.0.1/24\nallowed_ip=fd00::1/64\nprotocol_version=1\n" +
		"public_key=" + hexKey(key(4)) + "\nupdate_only=true\nendpoint=192.0.2.1:7\n" +
		"public_key=" + hexKey(key(5)) + "\nremove=true\n\nnext"
	r := bufio.NewReader(strings.NewReader(in))
	s, err := ParseSet(r, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := &Set{
		PrivateKey: ptr(key(1)), ListenPort: ptr[uint16](51820), Fwmark: ptr[uint32](0), ReplacePeers: true,
		Peers: []PeerSet{{
			PublicKey: key(2), PresharedKey: ptr(key(3)),
			Endpoint:            ptr(netip.MustParseAddrPort("[fe80::1%eth0]:51820")),
			PersistentKeepalive: ptr[uint16](25), ReplaceAllowedIPs: true,
			AllowedIPs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("fd00::/64")},
		}, {
			PublicKey: key(4), UpdateOnly: true, Endpoint: ptr(netip.MustParseAddrPort("192.0.2.1:7")),
		}, {
			PublicKey: key(5), Remove: true,
		}},
	}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("got %+v\nwant %+v", s, want)
	}
	if rest, _ := io.ReadAll(r); string(rest) != "next" {
		t.Fatalf("left %q", rest)
	}
}

// TestParseSetRefused: each malformed operation is refused with its
// errno, and read to its end, so that the answer follows it.
func TestParseSetRefused(t *testing.T) {
	long := "endpoint=" + strings.Repeat("1", 600)
	for _, c := range []struct {
		in    string
		errno syscall.Errno
	}{
		{"private_key=00\n", syscall.EINVAL},
		{"private_key=" + strings.Repeat("zz", 32) + "\n", syscall.EINVAL},
		{"listen_port=65536\n", syscall.EINVAL},
		{"listen_port=-1\n", syscall.EINVAL},
		{"fwmark=0x1\n", syscall.EINVAL},
		{"replace_peers=false\n", syscall.EINVAL},
		{"bogus=1\n", syscall.EINVAL},
		{"endpoint=192.0.2.1:1\n", syscall.EINVAL}, // a peer's key before any peer
		{"no equals sign\n", syscall.EPROTO},
		{"public_key=" + hexKey(key(2)) + "\nprivate_key=" + hexKey(key(1)) + "\n", syscall.EINVAL},
		{"public_key=" + hexKey(key(2)) + "\nendpoint=example.com:1\n", syscall.EINVAL},
		{"public_key=" + hexKey(key(2)) + "\nendpoint=192.0.2.1\n", syscall.EINVAL},
		{"public_key=" + hexKey(key(2)) + "\nallowed_ip=10.0.0.1\n", syscall.EINVAL},
		{"public_key=" + hexKey(key(2)) + "\nallowed_ip=10.0.0.1/33\n", syscall.EINVAL},
		{"public_key=" + hexKey(key(2)) + "\nallowed_ip=fe80::1%eth0/64\n", syscall.EINVAL},
		{"public_key=" + hexKey(key(2)) + "\npersistent_keepalive_interval=65536\n", syscall.EINVAL},
		{"public_key=" + hexKey(key(2)) + "\nprotocol_version=2\n", syscall.EINVAL},
		{"public_key=" + hexKey(key(2)) + "\nremove=1\n", syscall.EINVAL},
		{long + "\n", syscall.E2BIG},
		{long + strings.Repeat("1", 5000) + "\n", syscall.E2BIG},
		{"public_key=" + hexKey(key(2)) + "\npublic_key=" + hexKey(key(3)) + "\npublic_key=" + hexKey(key(4)) + "\n", syscall.E2BIG},
		{"public_key=" + hexKey(key(2)) + "\nallowed_ip=10.0.0.1/32\nallowed_ip=10.0.0.2/32\nallowed_ip=10.0.0.3/32\n", syscall.E2BIG},
	} {
		r := bufio.NewReaderSize(strings.NewReader(c.in+"fwmark=1\n\nnext"), 512)
		_, err := ParseSet(r, Limits{Peers: 2, AllowedIPs: 2})
		var e *Error
		if !errors.As(err, &e) || e.Errno != c.errno {
			t.Errorf("%.60q: %v, want %v", c.in, err, c.errno)
			continue
		}
		if rest, _ := io.ReadAll(r); string(rest) != "next" {
			t.Errorf("%.60q: left %q", c.in, rest)
		}
	}
	for _, in := range []string{"", "fwmark=1\n", "fwmark=1", strings.Repeat("x", 2000)} {
		if _, err := ParseSet(bufio.NewReader(strings.NewReader(in)), Limits{}); err != io.ErrUnexpectedEOF && err != io.EOF {
			t.Errorf("%.20q unfinished: %v", in, err)
		}
	}
}

// TestAppendGet: the answer to get, as wg(8) reads it.
func TestAppendGet(t *testing.T) {
	st := &State{
		PrivateKey: key(1), ListenPort: 51820, Fwmark: 0x42,
		Peers: []Peer{{
			PeerConfig: wireguard.PeerConfig{
				PublicKey: key(2), PresharedKey: key(3),
				Endpoint:            netip.MustParseAddrPort("[2001:db8::1]:7"),
				PersistentKeepalive: 25 * time.Second,
			},
			AllowedIPs:    []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("fd00::/64")},
			LastHandshake: 1_800_000_000_123_456_789, RxBytes: 1, TxBytes: 2,
		}, {
			PeerConfig: wireguard.PeerConfig{PublicKey: key(4)},
		}},
	}
	want := "private_key=" + hexKey(key(1)) + "\nlisten_port=51820\nfwmark=66\n" +
		"public_key=" + hexKey(key(2)) + "\npreshared_key=" + hexKey(key(3)) + "\nprotocol_version=1\n" +
		"endpoint=[2001:db8::1]:7\nlast_handshake_time_sec=1800000000\nlast_handshake_time_nsec=123456789\n" +
		"tx_bytes=2\nrx_bytes=1\npersistent_keepalive_interval=25\nallowed_ip=10.0.0.0/24\nallowed_ip=fd00::/64\n" +
		"public_key=" + hexKey(key(4)) + "\nprotocol_version=1\nlast_handshake_time_sec=0\nlast_handshake_time_nsec=0\n" +
		"tx_bytes=0\nrx_bytes=0\npersistent_keepalive_interval=0\nerrno=0\n\n"
	if got := string(AppendGet([]byte("x"), st)); got != "x"+want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if got := string(AppendGet(nil, &State{})); got != "errno=0\n\n" {
		t.Fatalf("empty device: %q", got)
	}
}
