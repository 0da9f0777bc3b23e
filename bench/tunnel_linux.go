package main

// Scenario "tunnel": a VPN's data path between two namespaces over a
// veth of MTU 1500 (netlab.Pair), one TCP stream each way at once,
// through:
//
//	tunnel        gsoplane's dataplane/tunnel, plaintext, configured as
//	              docs/embedding.md's recipe is (a name, the local and
//	              the peer's addresses: every default): the product
//	floor         the floor (floortunnel_linux.go): TUN ⇄ UDP socket,
//	              plaintext, no framing, two copies each way
//	kernel        nothing: the streams run between the veth's addresses
//	tunnel-peers  the same with Config.Peers: the peer and a second one
//	              (an address on the veth's subnet that nobody has), on an
//	              unconnected socket, each packet routed by its inner
//	              destination
//	wg-plumbing   wireguard-go's own plumbing, plaintext: its TUN device
//	              (CreateTUN, offloads) and conn.StdNetBind (UDP GSO and
//	              GRO) wired by loops of reads and writes, no crypto
//	vpn           examples/vpn: the tunnel with ChaCha20-Poly1305
//	wg-device     a real wireguard-go device (userspace WireGuard,
//	              configured with IpcSet, no wg binary)

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/gsoplane/gsoplane/dataplane/tunnel"
	"github.com/gsoplane/gsoplane/dataplane/udp"
	"github.com/gsoplane/gsoplane/examples/vpn"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// The tunnel rows' device and inner addresses (in 198.19.0.0/24, behind
// the pair's outer 198.18.100.0/24).
const (
	tnlName = "tnl0"
	tnlPort = 51820
)

var (
	tnlInnerA = netip.MustParseAddr("198.19.0.1")
	tnlInnerB = netip.MustParseAddr("198.19.0.2")
)

// tunnelEnd is one end of a tunnel under test, running.
type tunnelEnd interface {
	// datagrams reports the datagrams sent and received and the calls
	// that moved them (0 where the implementation does not say).
	datagrams() (sent, sends, received, receives uint64)
	stop() error
}

// openTunnelEnd opens one end in ns, from local to peer: its TUN device
// is tnlName, which the caller addresses and brings up.
type openTunnelEnd func(ns *netlab.NS, local, peer netip.Addr) (tunnelEnd, error)

func tunnelRows() []rowSpec {
	return []rowSpec{
		tunnelRow("tunnel", openGsoTunnel).copying(tunnelCopies).asProduct(),
		tunnelRow("floor", openTunnelFloor).copying(2 * floorCopies),
		tunnelRow("kernel", nil).copying(kernelCopies),
		tunnelRow("tunnel-peers", openGsoTunnelPeers).copying(tunnelCopies),
		tunnelRow("wg-plumbing", openWGPlumbing),
		tunnelRow("vpn", openVPN).copying(tunnelCopies),
		tunnelRow("wg-device", openWGDevice),
	}
}

// tunnelRow is a row of a tunnel's trial whose ends open: one TCP
// stream each way between the pair's namespaces (nil: over the veth
// alone).
func tunnelRow(name string, open openTunnelEnd) rowSpec {
	return rowSpec{name: name, units: units{sent: "bytes", received: "—"}, retrans: true, start: func(ctx context.Context) (trial, error) {
		return startTunnelTrial(open)
	}}
}

// tunnelTrial is a pair with a tunnel end in each namespace (none for the
// kernel row) and a TCP stream each way.
type tunnelTrial struct {
	p        *netlab.Pair
	ends     []tunnelEnd
	fwd, rev *tcpStream // A→B, B→A
}

// startTunnelTrial builds the pair, the two ends and the streams.
func startTunnelTrial(open openTunnelEnd) (trial, error) {
	p, err := newPairLab()
	if err != nil {
		return nil, err
	}
	t := &tunnelTrial{p: p}
	if err := t.start(open); err != nil {
		return nil, errors.Join(err, t.close())
	}
	return t, nil
}

func (t *tunnelTrial) start(open openTunnelEnd) (err error) {
	dstA, dstB := t.p.AddrA, t.p.AddrB
	if open != nil {
		dstA, dstB = tnlInnerA, tnlInnerB
		for _, e := range []struct {
			ns          *netlab.NS
			local, peer netip.Addr
			inner       netip.Addr
		}{{t.p.A, t.p.AddrA, t.p.AddrB, tnlInnerA}, {t.p.B, t.p.AddrB, t.p.AddrA, tnlInnerB}} {
			end, err := open(e.ns, e.local, e.peer)
			if err != nil {
				return err
			}
			t.ends = append(t.ends, end)
			if err := errors.Join(e.ns.AddAddr(tnlName, e.inner.String()+"/24"), e.ns.LinkUp(tnlName)); err != nil {
				return err
			}
		}
	}
	if w, ok := t.endA().(handshaker); ok {
		if err := waitHandshake(t.p.A, dstB, w, t.ends[1].(handshaker)); err != nil {
			return err
		}
	}
	if t.fwd, err = startStream(t.p.A, t.p.B, dstB, tcpPort); err != nil {
		return err
	}
	t.rev, err = startStream(t.p.B, t.p.A, dstA, tcpPort+1)
	return err
}

// endA is A's tunnel end, or nil for the kernel alone.
func (t *tunnelTrial) endA() tunnelEnd {
	if len(t.ends) == 0 {
		return nil
	}
	return t.ends[0]
}

func (t *tunnelTrial) snapshot() counters {
	var c, rev counters
	t.fwd.counters(&c)
	t.rev.counters(&rev)
	c.Sent, c.RxBytes, c.Retrans = c.Sent+rev.Sent, c.RxBytes+rev.RxBytes, c.Retrans+rev.Retrans
	c.RxBytesRev = rev.RxBytes
	for _, e := range t.ends {
		s, ss, r, rs := e.datagrams()
		c.TxDgrams, c.TxCalls, c.RxDgrams, c.RxCalls = c.TxDgrams+s, c.TxCalls+ss, c.RxDgrams+r, c.RxCalls+rs
	}
	if len(t.ends) > 0 {
		c.GatewayCPU = gatewayCPU() // both ends: the streams run on traffic threads
	}
	return c
}

func (t *tunnelTrial) finish() (final, error) { return final{}, t.close() }

// close stops the streams and the ends and removes the pair.
func (t *tunnelTrial) close() error {
	var errs []error
	for _, s := range []*tcpStream{t.fwd, t.rev} {
		if s != nil {
			errs = append(errs, s.stop())
		}
	}
	for _, e := range t.ends {
		errs = append(errs, e.stop())
	}
	return errors.Join(append(errs, closeLab(t.p))...)
}

// gsoTunnel is a dataplane/tunnel end, running.
type gsoTunnel struct {
	t      *tunnel.Tunnel
	cancel context.CancelFunc
	done   chan error
}

// openGsoTunnel opens the tunnel of docs/embedding.md's recipe: every default.
func openGsoTunnel(ns *netlab.NS, local, peer netip.Addr) (tunnelEnd, error) {
	return runTunnel(ns, func() (*tunnel.Tunnel, error) {
		return tunnel.Open(tunnel.Config{
			Name:  tnlName,
			Local: netip.AddrPortFrom(local, tnlPort),
			Peer:  netip.AddrPortFrom(peer, tnlPort),
		})
	})
}

// openGsoTunnelPeers opens the same tunnel with Config.Peers: the peer,
// routed the other end's inner address, and a second peer on the veth's
// subnet (nobody's address: nothing is routed to it in the run) with an
// inner address of its own, so that every packet is routed.
func openGsoTunnelPeers(ns *netlab.NS, local, peer netip.Addr) (tunnelEnd, error) {
	inner := tnlInnerB
	if local.Compare(peer) > 0 {
		inner = tnlInnerA
	}
	other := netip.AddrFrom4([4]byte(append(peer.AsSlice()[:3:3], 99)))
	return runTunnel(ns, func() (*tunnel.Tunnel, error) {
		return tunnel.Open(tunnel.Config{
			Name:  tnlName,
			Local: netip.AddrPortFrom(local, tnlPort),
			Peers: []udp.Peer{
				{Endpoint: netip.AddrPortFrom(peer, tnlPort), Allowed: []netip.Prefix{netip.PrefixFrom(inner, 32)}},
				{Endpoint: netip.AddrPortFrom(other, tnlPort), Allowed: []netip.Prefix{netip.MustParsePrefix("198.19.0.99/32")}},
			},
		})
	})
}

// openVPN opens examples/vpn's tunnel with a key file and a state file
// of its own, in a directory removed when it stops.
func openVPN(ns *netlab.NS, local, peer netip.Addr) (tunnelEnd, error) {
	dir, err := os.MkdirTemp("", "gsoplane-bench-vpn-")
	if err != nil {
		return nil, err
	}
	key := filepath.Join(dir, "vpn.key")
	if err := os.WriteFile(key, []byte("gsoplane bench, not a secret key"), 0o600); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	args := []string{"-key", key, "-state", filepath.Join(dir, "vpn.state"), "-tun", tnlName,
		"-local", netip.AddrPortFrom(local, tnlPort).String(), "-peer", netip.AddrPortFrom(peer, tnlPort).String()}
	end, err := runTunnel(ns, func() (*tunnel.Tunnel, error) { return vpn.Open(args, os.Stderr) })
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	return vpnEnd{end, dir}, nil
}

// vpnEnd is examples/vpn's end, running: it writes its state file until
// it stops.
type vpnEnd struct {
	tunnelEnd
	dir string
}

func (v vpnEnd) stop() error { return errors.Join(v.tunnelEnd.stop(), os.RemoveAll(v.dir)) }

// runTunnel opens a tunnel in ns and runs it.
func runTunnel(ns *netlab.NS, open func() (*tunnel.Tunnel, error)) (tunnelEnd, error) {
	var t *tunnel.Tunnel
	if err := ns.Run(func() (err error) { t, err = open(); return err }); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &gsoTunnel{t: t, cancel: cancel, done: make(chan error, 1)}
	go func() { g.done <- t.Run(ctx) }()
	return g, nil
}

func (g *gsoTunnel) datagrams() (sent, sends, received, receives uint64) {
	st := g.t.Stats()
	return st.Send.Datagrams, st.Send.Syscalls, st.Receive.Datagrams, st.Receive.Syscalls
}

func (g *gsoTunnel) stop() error {
	g.cancel()
	return errors.Join(<-g.done, g.t.Close())
}

func tunnelRatios(rows []*rowResult) []ratio {
	specs := []ratioSpec{
		{"tunnel", "floor", "TCP both ways, gsoplane's Tunnel / the floor (TUN ⇄ UDP_SEGMENT and UDP_GRO, plaintext, no framing)"},
		{"tunnel", "wg-plumbing", "TCP both ways, gsoplane's Tunnel / wireguard-go's TUN and StdNetBind, plaintext"},
		{"vpn", "wg-device", "TCP both ways, examples/vpn (ChaCha20-Poly1305) / a wireguard-go device"},
		{"tunnel", "kernel", "TCP both ways, gsoplane's Tunnel / the kernel alone over the veth (upper bound)"},
		{"vpn", "tunnel", "TCP both ways, the cost of the crypto: examples/vpn / the plaintext Tunnel"},
		{"tunnel-peers", "tunnel", "TCP both ways, the cost of several peers: routed on an unconnected socket / connected to the one peer"},
	}
	out := throughputRatios(rows, specs)
	for _, dir := range []struct {
		name string
		rev  bool
	}{{"A→B", false}, {"B→A", true}} {
		for _, c := range specs[1:3] {
			if a, b := findRow(rows, c.a), findRow(rows, c.b); a != nil && b != nil {
				out = append(out, directionRatio(c.a+"/"+c.b+" "+dir.name, "TCP "+dir.name+" alone, the median of each row's runs that way", a, b, dir.rev))
			}
		}
	}
	return append(out, costRatios(rows, []ratioSpec{{"tunnel", "floor", "both ends' cores per Gbit/s, gsoplane's Tunnel / the floor"}})...)
}
