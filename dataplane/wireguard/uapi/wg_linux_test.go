package uapi

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/wireguard"
)

// wgTool returns the path of wg(8). Without it the test fails as root,
// for whom scripts/test-deps installs it, and skips otherwise; so it
// does without root, who alone may make sockets in SocketDir, where
// wg(8) looks for them (no variable moves it).
func wgTool(t *testing.T) string {
	path, err := exec.LookPath("wg")
	switch {
	case err == nil && os.Geteuid() == 0:
		return path
	case os.Geteuid() == 0:
		t.Fatal("wg is not installed: run scripts/test-deps (make test does)")
	case err != nil:
		t.Skip("wg is not installed (scripts/test-deps installs wireguard-tools, as root): the interface is not checked against wg(8)")
	}
	t.Skip("not root: wg(8) finds userspace sockets only in " + SocketDir)
	return ""
}

// wgDevice is a core device served on an interface name of its own for
// wg(8) to drive.
type wgDevice struct {
	*router
	t    *testing.T
	tool string
	name string
}

func newWgDevice(t *testing.T) *wgDevice {
	d := &wgDevice{router: newRouter(t), t: t, tool: wgTool(t), name: fmt.Sprintf("gsowg%x", os.Getpid()&0xffffff)}
	path, err := SocketPath(d.name)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, path, NewHandler(d, Limits{}))
	return d
}

// wg runs wg(8) with args (the interface's name for "%s") and returns
// its output.
func (d *wgDevice) wg(args ...string) string {
	d.t.Helper()
	for i := range args {
		args[i] = strings.ReplaceAll(args[i], "%s", d.name)
	}
	out, err := exec.Command(d.tool, args...).CombinedOutput()
	if err != nil {
		d.t.Fatalf("wg %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// file writes s to a file and returns its path.
func file(t *testing.T, s string) string {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func newKey(t *testing.T) wireguard.Key {
	k, err := wireguard.NewPrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newPublic(t *testing.T) wireguard.Key {
	k := newKey(t)
	return k.Public()
}

// TestWg drives a core device with wg(8): wg set, show, showconf,
// setconf, addconf and syncconf, checking what the device holds and what wg
// prints, a handshake's time and bytes included.
func TestWg(t *testing.T) {
	d := newWgDevice(t)
	priv, psk := newKey(t), newKey(t)
	remote, err := wireguard.NewDevice(wireguard.Config{PrivateKey: newKey(t)})
	if err != nil {
		t.Fatal(err)
	}
	pub1, pub2 := remote.PublicKey(), newPublic(t)
	d.wg("set", "%s", "private-key", file(t, priv.String()), "listen-port", "51820", "fwmark", "0x42",
		"peer", pub1.String(), "preshared-key", file(t, psk.String()), "endpoint", "192.0.2.2:51820",
		"allowed-ips", "10.0.0.2/32,fd00::2/128", "persistent-keepalive", "25",
		"peer", pub2.String(), "endpoint", "[2001:db8::3]:7", "allowed-ips", "10.0.1.1/24")

	peers := d.Peers()
	if d.PrivateKey() != priv || d.ListenPort() != 51820 || d.Fwmark() != 0x42 || len(peers) != 2 {
		t.Fatalf("device: port %d, fwmark %#x, %d peers", d.ListenPort(), d.Fwmark(), len(peers))
	}
	c1, c2 := peers[0].Config(), peers[1].Config()
	if c1 != (wireguard.PeerConfig{PublicKey: pub1, PresharedKey: psk, Endpoint: netip.MustParseAddrPort("192.0.2.2:51820"), PersistentKeepalive: 25 * time.Second}) ||
		c2 != (wireguard.PeerConfig{PublicKey: pub2, Endpoint: netip.MustParseAddrPort("[2001:db8::3]:7")}) {
		t.Fatalf("peers %+v\n%+v", c1, c2)
	}
	if !slices.Equal(d.table()[pub2], []netip.Prefix{netip.MustParsePrefix("10.0.1.0/24")}) {
		t.Fatalf("routes %v", d.table())
	}

	// A handshake with the first peer, in process.
	init, err := d.AppendInitiation(nil, peers[0])
	if err != nil {
		t.Fatal(err)
	}
	rp, err := remote.AddPeer(wireguard.PeerConfig{PublicKey: priv.Public(), PresharedKey: psk})
	if err != nil {
		t.Fatal(err)
	}
	resp, _, err := remote.Handle(nil, init, netip.MustParseAddrPort("192.0.2.1:51820"), false)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Handle(nil, resp, netip.MustParseAddrPort("192.0.2.2:51820"), false); err != nil {
		t.Fatal(err)
	}
	handshake := rp.LastHandshake().Unix()

	if got, want := d.wg("show", "%s", "dump"), fmt.Sprintf(
		"%s\t%s\t51820\t0x42\n"+
			"%s\t%s\t192.0.2.2:51820\t10.0.0.2/32,fd00::2/128\t%d\t%d\t%d\t25\n"+
			"%s\t(none)\t[2001:db8::3]:7\t10.0.1.0/24\t0\t0\t0\toff\n",
		priv, priv.Public(), pub1, psk, handshake, wireguard.ResponseSize, wireguard.InitiationSize, pub2); got != want {
		t.Errorf("wg show dump:\n%s\nwant\n%s", got, want)
	}
	show := d.wg("show", "%s")
	for _, want := range []string{
		"interface: " + d.name, "public key: " + priv.Public().String(), "private key: (hidden)",
		"listening port: 51820", "fwmark: 0x42", "peer: " + pub1.String(), "preshared key: (hidden)",
		"endpoint: 192.0.2.2:51820", "allowed ips: 10.0.0.2/32, fd00::2/128", "latest handshake: ",
		"transfer: 92 B received, 148 B sent", "persistent keepalive: every 25 seconds",
		"peer: " + pub2.String(), "endpoint: [2001:db8::3]:7", "allowed ips: 10.0.1.0/24",
	} {
		if !strings.Contains(show, want) {
			t.Errorf("wg show: no %q in\n%s", want, show)
		}
	}
	if got := d.wg("show", "interfaces"); !slices.Contains(strings.Fields(got), d.name) {
		t.Errorf("wg show interfaces: %q", got)
	}
	conf := d.wg("showconf", "%s")
	if want := fmt.Sprintf("[Interface]\nListenPort = 51820\nFwMark = 0x42\nPrivateKey = %s\n\n"+
		"[Peer]\nPublicKey = %s\nPresharedKey = %s\nAllowedIPs = 10.0.0.2/32, fd00::2/128\nEndpoint = 192.0.2.2:51820\nPersistentKeepalive = 25\n\n"+
		"[Peer]\nPublicKey = %s\nAllowedIPs = 10.0.1.0/24\nEndpoint = [2001:db8::3]:7\n", priv, pub1, psk, pub2); conf != want {
		t.Errorf("wg showconf:\n%s\nwant\n%s", conf, want)
	}

	// setconf replaces the peers; addconf adds to them; set changes one
	// and removes another.
	pub3 := newPublic(t)
	d.wg("setconf", "%s", file(t, fmt.Sprintf("[Interface]\nPrivateKey = %s\nListenPort = 51821\n\n[Peer]\nPublicKey = %s\nAllowedIPs = 10.0.0.2/32\n", priv, pub3)))
	if ps := d.Peers(); len(ps) != 1 || ps[0].PublicKey() != pub3 || d.ListenPort() != 51821 {
		t.Fatalf("after setconf: %v, port %d", ps, d.ListenPort())
	}
	d.wg("addconf", "%s", file(t, conf))
	d.wg("set", "%s", "fwmark", "off", "peer", pub3.String(), "allowed-ips", "10.9.0.0/16", "persistent-keepalive", "off", "peer", pub2.String(), "remove")
	if got, want := d.wg("show", "%s", "dump"), fmt.Sprintf(
		"%s\t%s\t51820\toff\n"+
			"%s\t(none)\t(none)\t10.9.0.0/16\t0\t0\t0\toff\n"+
			"%s\t%s\t192.0.2.2:51820\t10.0.0.2/32,fd00::2/128\t0\t0\t0\t25\n",
		priv, priv.Public(), pub3, pub1, psk); got != want {
		t.Errorf("after setconf, addconf and set, wg show dump:\n%s\nwant\n%s", got, want)
	}
	if !slices.Equal(d.table()[pub1], []netip.Prefix{netip.MustParsePrefix("10.0.0.2/32"), netip.MustParsePrefix("fd00::2/128")}) || len(d.table()) != 2 {
		t.Errorf("routes %v", d.table())
	}

	// A change the device refuses: wg reads the errno.
	if out, err := exec.Command(d.tool, "set", d.name, "listen-port", "1").CombinedOutput(); err == nil || !strings.Contains(string(out), "Address already in use") {
		t.Errorf("wg set listen-port 1: %v, %s", err, out)
	}

	// syncconf removes what the file does not have.
	d.wg("syncconf", "%s", file(t, fmt.Sprintf("[Interface]\nPrivateKey = %s\n\n[Peer]\nPublicKey = %s\nAllowedIPs = 10.0.0.2/32\n", priv, pub1)))
	if ps := d.Peers(); len(ps) != 1 || ps[0].PublicKey() != pub1 ||
		!slices.Equal(d.table()[pub1], []netip.Prefix{netip.MustParsePrefix("10.0.0.2/32")}) || len(d.table()) != 1 {
		t.Errorf("after syncconf: %v, routes %v", ps, d.table())
	}
}
