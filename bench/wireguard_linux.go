package main

// Scenario "wireguard": the tunnel scenario's trial (two namespaces over
// a veth of MTU 1500, one TCP stream each way at once) through real
// WireGuard at both ends:
//
//	wireguard  gsoplane's WireGuard: dataplane/wireguard/wgtunnel, the
//	           interface cmd/wggso serves, configured as wg(8) does (a
//	           set operation of wg's configuration protocol): the product
//	wg-device  a wireguard-go device (the tunnel scenario's row)
//	tunnel     the plaintext Tunnel (the tunnel scenario's product row)

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"

	"github.com/gsoplane/gsoplane/dataplane/wireguard/uapi"
	"github.com/gsoplane/gsoplane/dataplane/wireguard/wgtunnel"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

var wireguardScenario = scenarioDef{
	name: "wireguard",
	title: func(o options) string {
		return "wireguard: a VPN between two namespaces over a veth of MTU 1500, one TCP stream each way at once — gsoplane's WireGuard (wgtunnel, the product) vs a wireguard-go device, and the plaintext Tunnel"
	},
	rows: func(o options) []rowSpec {
		return []rowSpec{
			tunnelRow("wireguard", openWGGso).copying(tunnelCopies).asProduct(),
			tunnelRow("wg-device", openWGDevice),
			tunnelRow("tunnel", openGsoTunnel).copying(tunnelCopies),
		}
	},
	ratios: func(rows []*rowResult, o options) []ratio { return wireguardRatios(rows) },
	notes: []string{
		"Mbit/s, A→B, B→A, retrans, dgrams/send, dgrams/recv, cores/Gbit: as in the tunnel scenario (both ends' figures).",
		"wireguard = dataplane/wireguard/wgtunnel, the interface cmd/wggso serves, configured with a set operation of wg's",
		"  protocol (its key, port, the peer's key, endpoint and allowed IPs) through uapi.Handler: WireGuard's messages on",
		"  the Tunnel, batch Seal and Open in place (ChaCha20-Poly1305: internal/chachapoly, AVX-512 where the CPU has",
		"  it, x/crypto's elsewhere; wggso logs which). Inner MTU 1420 (wg-quick's), as wg-device's.",
		"wg-device = golang.zx2c4.com/wireguard/device configured with the same set operation (IpcSet).",
		"tunnel = the plaintext Tunnel (inner MTU 1456): what the crypto and WireGuard's protocol cost.",
		"Where the time goes (perf -a, wireguard row, AVX-512 AEAD, of the busy time): 49% the kernel (the Tunnel's system",
		"  calls: their copies, the veth and the stack), 26% the AEAD (ChaCha20 14%, Poly1305 11%), 7% segment's split and",
		"  checksums, 6% the Go runtime, wireguard's and wgtunnel's own code 2%. With x/crypto's AEAD (AVX2 ChaCha20,",
		"  scalar Poly1305) it was 43% of the time; internal/chachapoly's BenchmarkSealOpen compares the two per packet.",
	},
}

func wireguardRatios(rows []*rowResult) []ratio {
	specs := []ratioSpec{
		{"wireguard", "wg-device", "TCP both ways, gsoplane's WireGuard / a wireguard-go device"},
		{"wireguard", "tunnel", "TCP both ways, the cost of WireGuard: gsoplane's WireGuard / the plaintext Tunnel"},
	}
	out := throughputRatios(rows, specs)
	if a, b := findRow(rows, "wireguard"), findRow(rows, "wg-device"); a != nil && b != nil {
		for _, dir := range []struct {
			name string
			rev  bool
		}{{"A→B", false}, {"B→A", true}} {
			out = append(out, directionRatio("wireguard/wg-device "+dir.name, "TCP "+dir.name+" alone, the median of each row's runs that way", a, b, dir.rev))
		}
	}
	return append(out, costRatios(rows, []ratioSpec{
		{"wireguard", "wg-device", "both ends' cores per Gbit/s, gsoplane's WireGuard / a wireguard-go device"},
	})...)
}

// wgGso is gsoplane's WireGuard end: a wgtunnel.Device, running.
type wgGso struct {
	dev    *wgtunnel.Device
	log    *wgLog
	cancel context.CancelFunc
	done   chan error
}

// openWGGso creates a wgtunnel.Device in ns (its TUN device tnlName, MTU
// 1420), configures it as wg(8) would (wgConfig's set operation through
// uapi.Handler) and runs it, as cmd/wggso does.
func openWGGso(ns *netlab.NS, local, peer netip.Addr) (tunnelEnd, error) {
	cfg, err := wgConfig(local, peer)
	if err != nil {
		return nil, err
	}
	log := &wgLog{}
	var d *wgtunnel.Device
	err = ns.Run(func() (err error) {
		d, err = wgtunnel.New(wgtunnel.Config{Name: tnlName, Logger: slog.New(slog.NewTextHandler(log, nil))})
		return err
	})
	if err != nil {
		return nil, err
	}
	set, err := uapi.ParseSet(bufio.NewReader(strings.NewReader(cfg+"\n")), uapi.Limits{})
	if err == nil {
		err = uapi.NewHandler(d, uapi.Limits{}).Apply(set)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("wgtunnel: configuring: %w", err), d.Close())
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &wgGso{dev: d, log: log, cancel: cancel, done: make(chan error, 1)}
	go func() { w.done <- d.Run(ctx) }()
	return w, nil
}

func (w *wgGso) datagrams() (sent, sends, received, receives uint64) {
	st := w.dev.Stats().Tunnel
	return st.Send.Datagrams, st.Send.Syscalls, st.Receive.Datagrams, st.Receive.Syscalls
}

func (w *wgGso) handshaked() (bool, error) {
	for _, p := range w.dev.Peers() {
		if !p.LastHandshake().IsZero() {
			return true, nil
		}
	}
	return false, nil
}

func (w *wgGso) logTail() string { return w.log.String() }

func (w *wgGso) stop() error {
	w.cancel()
	return errors.Join(<-w.done, w.dev.Close())
}
