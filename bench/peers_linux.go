package main

// Scenario "peers": the TCP stream of "gso", with the TUN reader and
// segmenter swapped for the state of the art in Go, feeding the same TX
// path (the gateway's: AF_XDP on gw-a, xsk.Sink, budget, queue), given
// to the gateway as a dataplane.Host:
//
//	gsoplane          our TUN queue; the forwarder segments super-packets
//	                  straight into AF_XDP frames
//	wireguard-go      golang.zx2c4.com/wireguard/tun: CreateTUN with
//	                  offloads, Device.Read hands over the super-packet
//	                  already split (into our buffers); the forwarder copies
//	                  each packet into a frame
//	tailscale-split   our TUN queue read as is, each super-packet split with
//	                  Tailscale's tun.GSOSplit into our buffers, then copied
//	                  into frames
//
// All three TUN devices get the noqueue qdisc and the kernel's ring length,
// as the gateway sets up its own.

import (
	"context"
	"errors"
	"fmt"

	wgtun "golang.zx2c4.com/wireguard/tun"

	"github.com/gsoplane/gsoplane/dataplane"
	"github.com/gsoplane/gsoplane/segment"
)

const wgTUNName = "wgtun0"

// peerSource is what a row puts inside the gateway, and the counters it
// adds to the row's JSON.
type peerSource func(l *lab) (*dataplane.Host, func() map[string]float64, error)

func peersRows() []rowSpec {
	tcpUnits := units{sent: "bytes", received: "packets at gw-b"}
	// row runs a TCP stream through a gateway fed by open's host (nil:
	// the gateway's own TUN device).
	row := func(name string, open peerSource) rowSpec {
		return rowSpec{name: name, units: tcpUnits, retrans: true, start: func(ctx context.Context) (trial, error) {
			return withLab(func(l *lab) (*labTrial, error) {
				host, extra, err := open(l)
				if err != nil {
					return nil, err
				}
				g, err := startGateway(l, dataplane.GatewayConfig{Host: host, Port: dataplane.PortXDP, DisableGRO: true})
				if err != nil {
					if host != nil {
						err = errors.Join(err, host.Close())
					}
					return nil, err
				}
				s, err := startTCPStreams(l, 1, false, tcpPort)
				if err != nil {
					return nil, errors.Join(err, g.stop())
				}
				return &labTrial{dp: gwDataplane{gateway: g}, tr: tcpTraffic{s}, rxAtB: true, onStop: func(f *final) {
					for k, v := range extra() {
						f.Extra[k] = v
					}
				}}, nil
			})
		}}
	}
	none := func() map[string]float64 { return nil }
	return []rowSpec{
		row("gsoplane", func(l *lab) (*dataplane.Host, func() map[string]float64, error) { return nil, none, nil }).copying(forwardCopies),
		row("wireguard-go", wireguardHost).copying(forwardCopies + peerCopies),
		row("tailscale-split", tailscaleHost).copying(forwardCopies + peerCopies),
	}
}

// wireguardHost is wireguard-go's TUN device with offloads: Device.Read
// hands over each super-packet already split, Device.Write coalesces.
func wireguardHost(l *lab) (*dataplane.Host, func() map[string]float64, error) {
	var dev wgtun.Device
	err := l.A.Run(func() (err error) {
		dev, err = wgtun.CreateTUN(wgTUNName, 1500)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("wireguard-go CreateTUN: %w", err)
	}
	go func() {
		for range dev.Events() { // nobody else listens
		}
	}()
	if err := errors.Join(l.setNoQueue(wgTUNName), l.TUNUp(wgTUNName)); err != nil {
		return nil, nil, errors.Join(err, dev.Close())
	}
	src := &wgSource{dev: dev}
	host := &dataplane.Host{Source: src, Writer: wgWriter{dev}, HeaderSize: segment.HeaderSize, Batch: peerBatch, Close: dev.Close}
	return host, func() map[string]float64 { return map[string]float64{"source_errors": float64(src.errors.Load())} }, nil
}

// tailscaleHost is our TUN device read as is, each super-packet split
// with Tailscale's tun.GSOSplit.
func tailscaleHost(l *lab) (*dataplane.Host, func() map[string]float64, error) {
	var host *dataplane.Host
	err := l.A.Run(func() (err error) {
		host, err = dataplane.OpenTUNHost(dataplane.TUNOptions{Name: tunName})
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	if err := l.TUNUp(tunName); err != nil {
		return nil, nil, errors.Join(err, host.Close())
	}
	src := newTSSource(host.Source, host.HeaderSize)
	host.Source, host.Batch = src, peerBatch
	return host, func() map[string]float64 { return map[string]float64{"source_errors": float64(src.errors.Load())} }, nil
}

func peersRatios(rows []*rowResult) []ratio {
	g := findRow(rows, "gsoplane")
	var out []ratio
	for _, name := range []string{"wireguard-go", "tailscale-split"} {
		if p := findRow(rows, name); g != nil && p != nil {
			out = append(out, ratioOf("gsoplane/"+name, "TCP throughput, same TX path, gsoplane source / "+name+" source", g, p, false))
		}
	}
	return out
}
