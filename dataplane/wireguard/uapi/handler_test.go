package uapi

import (
	"bytes"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/wireguard"
)

// router is a core device that takes the allowed IPs (or refuses them
// with its refusal), and refuses a listen port of 1.
type router struct {
	*wireguard.Device
	mu      sync.Mutex // a Server's goroutine sets the routes
	routes  map[wireguard.Key][]netip.Prefix
	sets    int
	refusal error
}

func (r *router) SetAllowedIPs(m map[wireguard.Key][]netip.Prefix) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refusal != nil {
		return r.refusal
	}
	r.routes, r.sets = m, r.sets+1
	return nil
}

// table returns the routes last set.
func (r *router) table() map[wireguard.Key][]netip.Prefix {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.routes
}

func (r *router) SetListenPort(port uint16) error {
	if port == 1 {
		return syscall.EADDRINUSE
	}
	return r.Device.SetListenPort(port)
}

func newRouter(t testing.TB) *router {
	d, err := wireguard.NewDevice(wireguard.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return &router{Device: d}
}

// conversation is a client's side of Handle: what it sends, what it
// got.
type conversation struct {
	*strings.Reader
	out bytes.Buffer
}

func (c *conversation) Write(b []byte) (int, error) { return c.out.Write(b) }

func (c *conversation) String() string { return c.out.String() }

// do sends ops to h and returns the answers.
func do(t testing.TB, h *Handler, ops string) string {
	t.Helper()
	c := &conversation{Reader: strings.NewReader(ops)}
	if err := h.Handle(c); err != nil {
		t.Fatalf("handle: %v", err)
	}
	return c.String()
}

func errnoLine(n syscall.Errno) string { return fmt.Sprintf("errno=-%d\n\n", int(n)) }

func pub(b byte) wireguard.Key {
	k := key(b)
	return k.Public()
}

// TestHandler: set operations on a core device, as WireGuard makes
// them: peers added, changed, updated only if there, removed and
// replaced; allowed IPs replaced and moved between peers; the device's
// own key skipped as a peer's; a refused change stops the operation.
func TestHandler(t *testing.T) {
	r := newRouter(t)
	h := NewHandler(r, Limits{})
	p1, p2, p3 := hexKey(pub(2)), hexKey(pub(3)), hexKey(pub(4))
	got := do(t, h, "set=1\nprivate_key="+hexKey(key(1))+"\nlisten_port=51820\nfwmark=7\n"+
		"public_key="+p1+"\nendpoint=192.0.2.2:51820\npersistent_keepalive_interval=25\nallowed_ip=10.0.0.2/32\nallowed_ip=10.1.0.0/16\n"+
		"public_key="+p2+"\npreshared_key="+hexKey(key(9))+"\nallowed_ip=10.0.0.3/32\n"+
		"public_key="+p3+"\nupdate_only=true\nallowed_ip=10.0.0.4/32\n"+
		"public_key="+hexKey(pub(1))+"\nallowed_ip=10.0.0.1/32\n\n"+
		"set=1\npublic_key="+p2+"\nupdate_only=true\nallowed_ip=10.1.0.0/16\npersistent_keepalive_interval=5\n\n")
	if got != "errno=0\n\nerrno=0\n\n" {
		t.Fatalf("answers %q", got)
	}
	if r.PrivateKey() != key(1) || r.ListenPort() != 51820 || r.Fwmark() != 7 || len(r.Peers()) != 2 {
		t.Fatalf("device: key %v, port %d, fwmark %d, %d peers", r.PrivateKey(), r.ListenPort(), r.Fwmark(), len(r.Peers()))
	}
	c1, c2 := r.Peers()[0].Config(), r.Peers()[1].Config()
	if c1.PublicKey != pub(2) || c1.Endpoint != netip.MustParseAddrPort("192.0.2.2:51820") || c1.PersistentKeepalive != 25*time.Second ||
		c2.PublicKey != pub(3) || c2.PresharedKey != key(9) || c2.PersistentKeepalive != 5*time.Second {
		t.Fatalf("peers %+v %+v", c1, c2)
	}
	wantRoutes := map[wireguard.Key][]netip.Prefix{
		pub(2): {netip.MustParsePrefix("10.0.0.2/32")},
		pub(3): {netip.MustParsePrefix("10.0.0.3/32"), netip.MustParsePrefix("10.1.0.0/16")}, // moved
	}
	if !maps.EqualFunc(r.routes, wantRoutes, slices.Equal) || r.sets != 2 {
		t.Fatalf("routes %v after %d sets", r.routes, r.sets)
	}

	// A refused listen port stops the operation: what follows is not
	// changed.
	got = do(t, h, "set=1\nlisten_port=1\nfwmark=8\nreplace_peers=true\n\n")
	if got != errnoLine(syscall.EADDRINUSE) || r.Fwmark() != 7 || len(r.Peers()) != 2 {
		t.Fatalf("refused port: %q, fwmark %d, %d peers", got, r.Fwmark(), len(r.Peers()))
	}
	// A malformed operation changes nothing.
	got = do(t, h, "set=1\nfwmark=9\npublic_key="+p1+"\nremove=true\nallowed_ip=bad\n\n")
	if got != errnoLine(syscall.EINVAL) || r.Fwmark() != 7 || len(r.Peers()) != 2 {
		t.Fatalf("malformed: %q, fwmark %d, %d peers", got, r.Fwmark(), len(r.Peers()))
	}

	// replace_allowed_ips, remove, replace_peers.
	do(t, h, "set=1\npublic_key="+p2+"\nreplace_allowed_ips=true\nallowed_ip=10.0.0.2/32\npublic_key="+p1+"\nremove=true\n\n")
	if len(r.Peers()) != 1 || !maps.EqualFunc(r.routes, map[wireguard.Key][]netip.Prefix{pub(3): {netip.MustParsePrefix("10.0.0.2/32")}}, slices.Equal) {
		t.Fatalf("after replace and remove: %d peers, routes %v", len(r.Peers()), r.routes)
	}
	do(t, h, "set=1\nreplace_peers=true\npublic_key="+p3+"\n\n")
	if ps := r.Peers(); len(ps) != 1 || ps[0].PublicKey() != pub(4) || len(r.routes) != 0 {
		t.Fatalf("after replace_peers: %v, routes %v", ps, r.routes)
	}
	// The new private key is a peer's: that peer goes, with its allowed
	// IPs.
	do(t, h, "set=1\npublic_key="+p3+"\nallowed_ip=10.0.0.4/32\n\nset=1\nprivate_key="+hexKey(key(4))+"\n\n")
	if len(r.Peers()) != 0 || len(r.routes) != 0 || len(h.owner) != 0 {
		t.Fatalf("after taking a peer's key: %v, routes %v", r.Peers(), r.routes)
	}
	if got := do(t, h, "get=1\n\n"); got != "private_key="+hexKey(key(4))+"\nlisten_port=51820\nfwmark=7\nerrno=0\n\n" {
		t.Fatalf("get: %q", got)
	}
	// The router's refusal is the operation's.
	r.refusal = syscall.ENOSPC
	if got := do(t, h, "set=1\npublic_key="+p1+"\nallowed_ip=0.0.0.0/0\n\n"); got != errnoLine(syscall.ENOSPC) {
		t.Fatalf("refused routes: %q", got)
	}
}

// TestHandleRefused: what is not an operation ends the conversation
// with errno=-EPROTO; an unfinished one without an answer.
func TestHandleRefused(t *testing.T) {
	h := NewHandler(newRouter(t), Limits{})
	for in, want := range map[string]string{
		"get=2\n\n":          errnoLine(syscall.EPROTO),
		"get=1\nx\n":         errnoLine(syscall.EPROTO),
		"get=1\n\nhello\n\n": "errno=0\n\n" + errnoLine(syscall.EPROTO),
		"set=1\nfwmark=1\n":  "",
	} {
		c := &conversation{Reader: strings.NewReader(in)}
		if err := h.Handle(c); err == nil || c.String() != want {
			t.Errorf("%q: %q, %v", in, c.String(), err)
		}
	}
}

// FuzzHandle: whatever a client sends, Handle answers or stops, the
// device and the allowed IPs stay consistent, and get shows them.
func FuzzHandle(f *testing.F) {
	p := hexKey(pub(2))
	f.Add([]byte("set=1\nprivate_key=" + hexKey(key(1)) + "\npublic_key=" + p + "\nallowed_ip=10.0.0.1/32\nallowed_ip=::/0\n\nget=1\n\n"))
	f.Add([]byte("set=1\nreplace_peers=true\npublic_key=" + p + "\nreplace_allowed_ips=true\nremove=true\n\n"))
	f.Add([]byte("set=1\npublic_key=" + p + "\nupdate_only=true\nendpoint=[::1]:1\n\nget=1\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := newRouter(t)
		h := NewHandler(r, Limits{Line: 128, Peers: 8, AllowedIPs: 16})
		c := &conversation{Reader: strings.NewReader(string(in))}
		h.Handle(c)
		for _, a := range strings.SplitAfter(c.String(), "\n\n") {
			if a != "" && !strings.Contains(a, "errno=") {
				t.Fatalf("answer without errno: %q", a)
			}
		}
		for k, pfxs := range h.allowed {
			if r.PeerByKey(k) == nil || len(pfxs) == 0 {
				t.Fatalf("allowed IPs %v of %v, no peer", pfxs, k)
			}
			for pfx := range pfxs {
				if h.owner[pfx] != k || pfx != pfx.Masked() {
					t.Fatalf("%v of %v owned by %v", pfx, k, h.owner[pfx])
				}
			}
		}
		got := string(AppendGet(nil, h.State()))
		if n := strings.Count(got, "public_key="); n != len(r.Peers()) {
			t.Fatalf("get shows %d peers of %d", n, len(r.Peers()))
		}
	})
}
