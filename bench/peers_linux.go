package main

// Scenario "peers": the TCP stream of "gso", with the TUN reader and
// segmenter swapped for the state of the art in Go, feeding the same TX
// path (pipeline_linux.go: AF_XDP on gw-a, XSKSink, budget, queue):
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
// as OpenGateway sets them up.

import (
	"context"
	"errors"
	"fmt"
	"github.com/gsoplane/gsoplane/internal/netnsutil"

	"github.com/gsoplane/gsoplane/dataplane"
	"github.com/gsoplane/gsoplane/segment"
	wgtun "golang.zx2c4.com/wireguard/tun"
)

const wgTUNName = "wgtun0"

func peersRows() []rowSpec {
	tcpUnits := units{sent: "bytes", received: "packets at gw-b"}
	// row runs a TCP stream through a pipeline fed by open's source.
	row := func(name string, open func(l *lab) (pipelineConfig, func() map[string]float64, error)) rowSpec {
		return rowSpec{name: name, units: tcpUnits, retrans: true, start: func(ctx context.Context) (trial, error) {
			return withLab(func(l *lab) (*labTrial, error) {
				cfg, extra, err := open(l)
				if err != nil {
					return nil, err
				}
				p, err := startPipeline(l, cfg)
				if err != nil {
					return nil, errors.Join(err, cfg.closeSrc())
				}
				s, err := startTCPStream(l, srv4, tcpPort)
				if err != nil {
					return nil, errors.Join(err, p.stop())
				}
				return &labTrial{dp: p, tr: tcpTraffic{s}, rxAtB: true, onStop: func(f *final) {
					for k, v := range extra() {
						f.Extra[k] = v
					}
				}}, nil
			})
		}}
	}
	return []rowSpec{
		row("gsoplane", func(l *lab) (pipelineConfig, func() map[string]float64, error) {
			tun, q, err := openOurTUN(l)
			if err != nil {
				return pipelineConfig{}, nil, err
			}
			return pipelineConfig{
				source: q, headerSize: tun.HeaderSize(), closeSrc: tun.Close,
				ret: func(x *dataplane.XSK) func(context.Context) error {
					return dataplane.NewReturnPath(x, q, tun.HeaderSize()).Run
				},
			}, func() map[string]float64 { return nil }, nil
		}),
		row("wireguard-go", func(l *lab) (pipelineConfig, func() map[string]float64, error) {
			var dev wgtun.Device
			err := netnsutil.Run(l.a, func() error {
				var err error
				dev, err = wgtun.CreateTUN(wgTUNName, 1500)
				return err
			})
			if err != nil {
				return pipelineConfig{}, nil, fmt.Errorf("wireguard-go CreateTUN: %w", err)
			}
			go func() {
				for range dev.Events() { // nobody else listens
				}
			}()
			if err := errors.Join(l.noqueue(wgTUNName, 0), l.tunUp(wgTUNName)); err != nil {
				return pipelineConfig{}, nil, errors.Join(err, dev.Close())
			}
			src := &wgSource{dev: dev}
			return pipelineConfig{
					source: src, headerSize: segment.HeaderSize, batch: peerBatch, closeSrc: dev.Close,
					ret: func(x *dataplane.XSK) func(context.Context) error {
						return dataplane.NewReturnPath(x, wgWriter{dev}, wgVnetHdrLen).Run
					},
				}, func() map[string]float64 {
					return map[string]float64{"source_errors": float64(src.errors.Load())}
				}, nil
		}),
		row("tailscale-split", func(l *lab) (pipelineConfig, func() map[string]float64, error) {
			tun, q, err := openOurTUN(l)
			if err != nil {
				return pipelineConfig{}, nil, err
			}
			src := newTSSource(q, tun.HeaderSize())
			return pipelineConfig{
					source: src, headerSize: segment.HeaderSize, batch: peerBatch, closeSrc: tun.Close,
					ret: func(x *dataplane.XSK) func(context.Context) error {
						return dataplane.NewReturnPath(x, q, tun.HeaderSize()).Run
					},
				}, func() map[string]float64 {
					return map[string]float64{"source_errors": float64(src.errors.Load())}
				}, nil
		}),
	}
}

// openOurTUN opens gsoplane's TUN device with offloads in A, set up like
// OpenGateway's.
func openOurTUN(l *lab) (*dataplane.TUN, *dataplane.TUNQueue, error) {
	var tun *dataplane.TUN
	err := netnsutil.Run(l.a, func() error {
		var err error
		tun, err = dataplane.OpenTUN(dataplane.TUNConfig{Name: tunName, Offload: true})
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	if err := errors.Join(l.noqueue(tunName, 0), l.tunUp(tunName)); err != nil {
		return nil, nil, errors.Join(err, tun.Close())
	}
	return tun, tun.Queues()[0], nil
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
