package main

// The peers' TUN readers and segmenters, wrapped as pipeline.Sources: each
// hands the forwarder packets that are already split, behind a zeroed
// virtio-net header (no GSO, no checksum to complete), so the forwarder
// only copies each into a frame.

import (
	"errors"
	"os"
	"sync/atomic"

	tstun "github.com/tailscale/wireguard-go/tun"
	wgtun "golang.zx2c4.com/wireguard/tun"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/segment"
)

// peerBatch is how many packets a peer source may return per Read: one
// 64 KiB TSO super-packet is up to 45 segments of 1448 bytes, and
// wireguard-go's Read fails when its buffers cannot take all of them.
// (wireguard-go uses conn.IdealBatchSize, 128.)
const peerBatch = 128

// wgSource reads a golang.zx2c4.com/wireguard/tun Device: CreateTUN with
// offloads (IFF_VNET_HDR, TSO and USO), whose Read returns the
// super-packet the kernel handed over already split into packets.
type wgSource struct {
	dev    wgtun.Device
	errors atomic.Uint64 // reads that failed for a bad packet
}

func (s *wgSource) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	for {
		n, err := s.dev.Read(bufs, sizes, offset+segment.HeaderSize)
		for i := range n {
			clear(bufs[i][offset : offset+segment.HeaderSize])
			sizes[i] += segment.HeaderSize
		}
		if err == nil || n > 0 {
			return n, nil
		}
		if errors.Is(err, os.ErrClosed) {
			return 0, err
		}
		// handleVirtioRead refused the packet: count it and go on, as the
		// forwarder does with a packet that fails validation.
		s.errors.Add(1)
	}
}

// wgWriter writes packets into the wireguard-go device (Device.Write,
// which puts its own virtio-net header in front of each packet and
// coalesces what it can): the return path hands it each packet behind
// room for that header.
type wgWriter struct{ dev wgtun.Device }

func (w wgWriter) Write(bufs [][]byte, _ int) (int, error) {
	return w.dev.Write(bufs, wgVnetHdrLen)
}

// wgVnetHdrLen is the headroom wireguard-go's Write needs for its
// virtio-net header.
const wgVnetHdrLen = 10

// tsSource reads super-packets from our TUN queue and splits them with
// Tailscale's tun.GSOSplit (github.com/tailscale/wireguard-go), into the
// forwarder's buffers.
type tsSource struct {
	q       frame.Source // our TUN queue
	hdrSize int
	raw     [][]byte // super-packets read, not yet split
	rawLen  []int
	next, n int // raw[next:n] are waiting
	errors  atomic.Uint64
}

func newTSSource(q frame.Source, hdrSize int) *tsSource {
	s := &tsSource{q: q, hdrSize: hdrSize, raw: make([][]byte, 8), rawLen: make([]int, 8)}
	for i := range s.raw {
		s.raw[i] = make([]byte, hdrSize+65535)
	}
	return s
}

func (s *tsSource) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	for {
		if s.next == s.n {
			n, err := s.q.Read(s.raw, s.rawLen, 0)
			s.next, s.n = 0, n
			if err != nil && n == 0 {
				if errors.Is(err, frame.ErrPacketTruncated) {
					s.errors.Add(1)
					continue
				}
				return 0, err
			}
		}
		out := 0
		for s.next < s.n {
			pkt := s.raw[s.next][:s.rawLen[s.next]]
			opts, segs, ok := s.options(pkt)
			if !ok {
				s.errors.Add(1)
				s.next++
				continue
			}
			if out > 0 && out+segs > len(bufs) {
				break // the rest next time
			}
			m, err := tstun.GSOSplit(pkt[s.hdrSize:], opts, bufs[out:], sizes[out:], offset+s.hdrSize)
			s.next++
			if err != nil {
				s.errors.Add(1)
				continue
			}
			for i := out; i < out+m; i++ { // each behind a header of the device's size that says nothing
				clear(bufs[i][offset : offset+s.hdrSize])
				sizes[i] += s.hdrSize
			}
			out += m
		}
		if out > 0 {
			return out, nil
		}
	}
}

// options turns the virtio-net header in front of pkt into GSOOptions,
// recomputing HdrLen from the packet (the kernel's hdr_len is not to be
// trusted), and returns how many segments GSOSplit will make.
func (s *tsSource) options(raw []byte) (tstun.GSOOptions, int, bool) {
	h, err := segment.DecodeHeader(raw, s.hdrSize)
	if err != nil {
		return tstun.GSOOptions{}, 0, false
	}
	pkt := raw[s.hdrSize:]
	o := tstun.GSOOptions{
		CsumStart: h.CsumStart, CsumOffset: h.CsumOffset, GSOSize: h.GSOSize,
		NeedsCsum: h.NeedsCsum(),
	}
	switch h.GSOType.Kind() {
	case segment.GSONone:
		o.GSOType = tstun.GSONone
		return o, 1, true
	case segment.GSOTCPv4, segment.GSOTCPv6:
		o.GSOType = tstun.GSOTCPv4
		if h.GSOType.Kind() == segment.GSOTCPv6 {
			o.GSOType = tstun.GSOTCPv6
		}
		if int(h.CsumStart)+13 > len(pkt) {
			return o, 0, false
		}
		o.HdrLen = h.CsumStart + uint16(pkt[h.CsumStart+12]>>4)*4
	case segment.GSOUDPL4:
		o.GSOType = tstun.GSOUDPL4
		o.HdrLen = h.CsumStart + 8
	default: // UFO: GSOSplit cannot
		return o, 0, false
	}
	if o.GSOSize == 0 || int(o.HdrLen) > len(pkt) {
		return o, 0, false
	}
	payload := len(pkt) - int(o.HdrLen)
	return o, max(1, (payload+int(o.GSOSize)-1)/int(o.GSOSize)), true
}
