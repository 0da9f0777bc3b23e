package main

// The wireguard-go rows of the tunnel and wireguard scenarios: its
// plumbing alone (TUN and StdNetBind wired by loops, plaintext) and a
// real device; and what every WireGuard end of the bench shares (its
// configuration, the wait for its handshake).

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/curve25519"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	wgtun "golang.zx2c4.com/wireguard/tun"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
	"github.com/gsoplane/gsoplane/internal/testing/wggo"
)

// wgOffset is the headroom wireguard-go's device reads and writes its TUN
// with (its transport header), which a virtio-net header needs too.
const wgOffset = 16

// wgPlumbing is wireguard-go's TUN device and StdNetBind, plaintext: a
// loop reads batches from the TUN (split by its Read) and sends them
// with Bind.Send (UDP GSO), and a loop per ReceiveFunc (UDP GRO) writes
// what it receives into the TUN (whose Write coalesces).
type wgPlumbing struct {
	dev  wgtun.Device
	bind conn.Bind
	ep   conn.Endpoint
	wg   sync.WaitGroup

	sent, sends, received, receives atomic.Uint64
}

// openWGPlumbing opens the TUN (MTU 1472: no header of its own, so
// 1500 less the outer IPv4 and UDP headers) and the bind in ns and starts
// the loops.
func openWGPlumbing(ns *netlab.NS, local, peer netip.Addr) (tunnelEnd, error) {
	p := &wgPlumbing{}
	var fns []conn.ReceiveFunc
	err := ns.Run(func() (err error) {
		if p.dev, err = createWGTUN(1500 - 28); err != nil {
			return err
		}
		p.bind = conn.NewStdNetBind()
		fns, _, err = p.bind.Open(tnlPort)
		return err
	})
	if err == nil {
		p.ep, err = p.bind.ParseEndpoint(netip.AddrPortFrom(peer, tnlPort).String())
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("wireguard-go plumbing: %w", err), p.close())
	}
	p.wg.Go(p.forward)
	for _, fn := range fns {
		p.wg.Go(func() { p.receive(fn) })
	}
	return p, nil
}

// createWGTUN creates wireguard-go's TUN device (with offloads) and
// drains its events, which nobody else reads.
func createWGTUN(mtu int) (wgtun.Device, error) {
	dev, err := wgtun.CreateTUN(tnlName, mtu)
	if err != nil {
		return nil, fmt.Errorf("wireguard-go CreateTUN: %w", err)
	}
	go func() {
		for range dev.Events() {
		}
	}()
	return dev, nil
}

// forward moves TUN → UDP until the TUN is closed.
func (p *wgPlumbing) forward() {
	n := p.dev.BatchSize()
	bufs, sizes, pkts := wgBufs(n), make([]int, n), make([][]byte, n)
	for {
		k, err := p.dev.Read(bufs, sizes, wgOffset)
		if err != nil {
			return
		}
		for i := range k {
			pkts[i] = bufs[i][wgOffset : wgOffset+sizes[i]]
		}
		for from := 0; from < k; from += p.bind.BatchSize() {
			batch := pkts[from:min(k, from+p.bind.BatchSize())]
			if p.bind.Send(batch, p.ep) == nil {
				p.sent.Add(uint64(len(batch)))
				p.sends.Add(1)
			}
		}
	}
}

// receive moves UDP → TUN until the bind is closed.
func (p *wgPlumbing) receive(fn conn.ReceiveFunc) {
	n := p.bind.BatchSize()
	bufs, sizes, eps, pkts, out := wgBufs(n), make([]int, n), make([]conn.Endpoint, n), make([][]byte, n), make([][]byte, n)
	for i := range bufs {
		pkts[i] = bufs[i][wgOffset:]
	}
	for {
		k, err := fn(pkts, sizes, eps)
		if err != nil {
			return
		}
		p.received.Add(uint64(k))
		p.receives.Add(1)
		for i := range k {
			out[i] = bufs[i][:wgOffset+sizes[i]]
		}
		p.dev.Write(out[:k], wgOffset)
	}
}

// wgBufs are n buffers of the largest packet behind the headroom.
func wgBufs(n int) [][]byte {
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, wgOffset+65535)
	}
	return bufs
}

func (p *wgPlumbing) datagrams() (sent, sends, received, receives uint64) {
	return p.sent.Load(), p.sends.Load(), p.received.Load(), p.receives.Load()
}

func (p *wgPlumbing) stop() error {
	err := p.close()
	p.wg.Wait()
	return err
}

func (p *wgPlumbing) close() error {
	var errs []error
	if p.bind != nil {
		errs = append(errs, p.bind.Close())
	}
	if p.dev != nil {
		errs = append(errs, p.dev.Close())
	}
	return errors.Join(errs...)
}

// wgDevice is a wireguard-go device: the real VPN.
type wgDevice struct {
	dev *device.Device
	log *wgLog
}

// wgLog keeps a WireGuard end's last log lines, for an error that
// needs them.
type wgLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *wgLog) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	if len(l.lines) > 20 {
		l.lines = l.lines[len(l.lines)-20:]
	}
}

// Write takes a log line (a slog handler's).
func (l *wgLog) Write(b []byte) (int, error) {
	l.printf("%s", strings.TrimSpace(string(b)))
	return len(b), nil
}

func (l *wgLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "; ")
}

// wgKeys are the private keys of the ends, by their outer address, made
// once per bench run.
var wgKeys struct {
	sync.Mutex
	priv map[netip.Addr][32]byte
}

// openWGDevice opens a wireguard-go device in ns (MTU 1420, as wg-quick
// sets it), configured with IpcSet (wgConfig).
func openWGDevice(ns *netlab.NS, local, peer netip.Addr) (tunnelEnd, error) {
	cfg, err := wgConfig(local, peer)
	if err != nil {
		return nil, err
	}
	var d *device.Device
	log := &wgLog{}
	err = ns.Run(func() error {
		dev, err := wgtun.CreateTUN(tnlName, 1420)
		if err != nil {
			return fmt.Errorf("wireguard-go CreateTUN: %w", err)
		}
		// Up here, in the namespace: on the link's up event the device
		// would bind its sockets outside it (wggo.SteadyTUN).
		d = device.NewDevice(wggo.SteadyTUN(dev), conn.NewDefaultBind(), &device.Logger{Verbosef: log.printf, Errorf: log.printf})
		if err := d.IpcSet(cfg); err != nil {
			return fmt.Errorf("wireguard-go IpcSet: %w", err)
		}
		return d.Up() // opens the bind's sockets, here
	})
	if err != nil {
		if d != nil {
			d.Close()
		}
		return nil, err
	}
	return wgDevice{d, log}, nil
}

// wgConfig is the configuration of the WireGuard end at local, as a
// set operation of wg's configuration protocol: its key, its port, the
// peer's key, address and the inner /24 behind it.
func wgConfig(local, peer netip.Addr) (string, error) {
	mine, theirs := wgKey(local), wgKey(peer)
	pub, err := curve25519.X25519(theirs[:], curve25519.Basepoint)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("private_key=%s\nlisten_port=%d\npublic_key=%s\nendpoint=%s\nallowed_ip=%s\n",
		hex.EncodeToString(mine[:]), tnlPort, hex.EncodeToString(pub), netip.AddrPortFrom(peer, tnlPort), "198.19.0.0/24"), nil
}

// wgKey returns the private key of the end at addr, made the first time.
func wgKey(addr netip.Addr) [32]byte {
	wgKeys.Lock()
	defer wgKeys.Unlock()
	if wgKeys.priv == nil {
		wgKeys.priv = map[netip.Addr][32]byte{}
	}
	k, ok := wgKeys.priv[addr]
	if !ok {
		rand.Read(k[:])
		k[0] &= 248 // clamped, as wg genkey does
		k[31] = k[31]&127 | 64
		wgKeys.priv[addr] = k
	}
	return k
}

func (w wgDevice) datagrams() (sent, sends, received, receives uint64) { return 0, 0, 0, 0 }

// handshakeTimeout bounds waitHandshake: WireGuard tries a lost
// initiation again every REKEY_TIMEOUT (5 s), and a machine busy with
// other work slows each try.
const handshakeTimeout = time.Minute

// A handshaker is a WireGuard end: its packets wait for a handshake.
type handshaker interface {
	// handshaked reports whether the end completed a handshake with its
	// peer.
	handshaked() (bool, error)
	// logTail is the end's last log lines, for an error.
	logTail() string
}

// waitHandshake sends a datagram from ns to dst through the tunnel every
// half second until end reports a handshake with its peer (the end
// at the other end), so that a stream's connection never waits on one: a
// handshake done after the SYN's retransmission at 7 s left the
// connection to the one at 15 s, past its timeout. Without a handshake
// its error has both ends' last log lines.
func waitHandshake(ns *netlab.NS, dst netip.Addr, end, peer handshaker) error {
	deadline := time.Now().Add(handshakeTimeout)
	for {
		done, err := end.handshaked()
		if err != nil || done {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("wireguard: no handshake within %v; this end's log: %v; the peer's: %v", handshakeTimeout, end.logTail(), peer.logTail())
		}
		err = ns.Run(func() error {
			c, err := net.Dial("udp4", netip.AddrPortFrom(dst, 9).String()) // discard
			if err == nil {
				c.Write([]byte{0})
				c.Close()
			}
			return err
		})
		if err != nil {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (w wgDevice) handshaked() (bool, error) {
	cfg, err := w.dev.IpcGet()
	if err != nil {
		return false, fmt.Errorf("wireguard-go IpcGet: %w", err)
	}
	return strings.Contains(cfg, "last_handshake_time_sec=") && !strings.Contains(cfg, "last_handshake_time_sec=0\n"), nil
}

func (w wgDevice) logTail() string { return w.log.String() }

func (w wgDevice) stop() error {
	w.dev.Close()
	return nil
}
