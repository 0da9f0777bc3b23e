package wgtunnel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netns"

	"github.com/gsoplane/gsoplane/dataplane/tun"
	"github.com/gsoplane/gsoplane/dataplane/tunnel"
	"github.com/gsoplane/gsoplane/dataplane/udp"
	"github.com/gsoplane/gsoplane/dataplane/wireguard"
	"github.com/gsoplane/gsoplane/dataplane/wireguard/uapi"
)

// DefaultMTU is the TUN device's MTU when it is created: WireGuard's.
const DefaultMTU = 1420

// pollInterval is how often Run checks the TUN device's MTU and that it
// still exists.
const pollInterval = time.Second

// controlQueue is how many handshake messages wait for the handshake
// goroutine; past half of it the device is under load (cookies).
const controlQueue = 256

// ErrDeviceRemoved is what Run returns when the TUN device was deleted
// (ip link delete, as wg-quick down does).
var ErrDeviceRemoved = errors.New("wgtunnel: the TUN device was removed")

// Config configures a Device.
type Config struct {
	// Name is the TUN device's name; it is created with DefaultMTU.
	Name string
	// Queues is the number of TUN queues (0: 1).
	Queues int
	// Logger takes what happens (nil: slog.Default()).
	Logger *slog.Logger
	// Timers are the protocol's limits (nil: the protocol's); tests
	// shorten them.
	Timers *wireguard.Timers
	// UnderLoad, if set, reports whether the device is under load
	// besides its own judgement (past half of its queue of handshake
	// messages): then it answers initiations and responses without a
	// valid MAC2 with cookie replies. Tests force it.
	UnderLoad func() bool
}

// A Device is a WireGuard interface: its protocol state (the embedded
// wireguard.Device), a TUN device and a UDP socket, and, while it has
// peers, a tunnel.Tunnel moving the packets. It is a uapi.Device and a
// uapi.Router: configure it with a uapi.Handler.
type Device struct {
	*wireguard.Device
	log   *slog.Logger
	ns    netns.NsHandle // where New ran: the socket, the TUN device and their links are there
	tun   *tun.Device
	hooks *hooks
	wake  chan struct{} // a peer wants its Tick
	ctrl  chan control  // handshake messages for the handshake loop
	fail  chan error    // a tunnel's Run failed

	ctrlDropped atomic.Uint64 // handshake messages dropped, the queue full
	hsRefused   reasons       // handshake messages Handle refused
	underLoad   func() bool   // Config.UnderLoad

	mu      sync.Mutex // the fields below, and configuration changes
	conn    *net.UDPConn
	fwmark  uint32
	tnl     *tunnel.Tunnel
	running sync.WaitGroup // the tunnel's Run
	slotted []*wireguard.Peer
	given   []netip.AddrPort // the endpoints the tunnel was given, by slot
	allowed map[wireguard.Key][]netip.Prefix
	// counters are the peers' own; past sums the counters of the
	// tunnels closed.
	counters map[*wireguard.Peer]*peerCounters
	past     tunnel.Stats
	closed   bool
}

// control is a handshake message and its source.
type control struct {
	from netip.AddrPort
	msg  []byte
	// roam, with no msg: an authenticated keepalive came from this
	// peer, at from, which is not its endpoint.
	roam *wireguard.Peer
}

// New creates the TUN device and binds the UDP socket to a port the
// kernel picks (the listen port changes it), with no key and no peers,
// in the network namespace of the calling thread, where the device's
// methods then work from any goroutine.
func New(cfg Config) (_ *Device, err error) {
	d := &Device{
		log:  cfg.Logger,
		wake: make(chan struct{}, 1), ctrl: make(chan control, controlQueue), fail: make(chan error, 1),
		allowed: map[wireguard.Key][]netip.Prefix{}, counters: map[*wireguard.Peer]*peerCounters{}, underLoad: cfg.UnderLoad,
	}
	if d.log == nil {
		d.log = slog.Default()
	}
	d.Device, err = wireguard.NewDevice(wireguard.Config{Timers: cfg.Timers, Notify: func(*wireguard.Peer) { d.kick() }})
	if err != nil {
		return nil, err
	}
	d.hooks = newHooks(d.Device, max(cfg.Queues, 1)+1) // the forwarders and the return path
	if d.ns, err = currentNS(); err != nil {
		return nil, fmt.Errorf("wgtunnel: %w", err)
	}
	defer func() {
		if err != nil {
			d.ns.Close()
		}
	}()
	if d.tun, err = tun.Open(tun.Config{Name: cfg.Name, Queues: cfg.Queues, MTU: DefaultMTU, Offload: true}); err != nil {
		return nil, fmt.Errorf("wgtunnel: %w", err)
	}
	if err = d.SetListenPort(0); err != nil {
		d.tun.Close()
		return nil, err
	}
	return d, nil
}

// Name is the TUN device's name.
func (d *Device) Name() string { return d.tun.Name() }

// kick wakes the timer loop.
func (d *Device) kick() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// SetListenPort binds the socket to port (0: one the kernel picks) on
// all addresses, IPv6 and IPv4 (IPv4 alone where the host has no IPv6),
// and moves the tunnel to it; the old socket stays if the port cannot be
// bound (in use: syscall.EADDRINUSE).
func (d *Device) SetListenPort(port uint16) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn != nil && port != 0 && port == d.Device.ListenPort() {
		return nil
	}
	var conn *net.UDPConn
	err := inNS(d.ns, func() (err error) {
		conn, err = listen(port, d.fwmark)
		return err
	})
	if err != nil {
		return fmt.Errorf("wgtunnel: listen port %d: %w", port, err)
	}
	old := d.conn
	d.conn = conn
	d.Device.SetListenPort(conn.LocalAddr().(*net.UDPAddr).AddrPort().Port())
	if d.tnl != nil {
		d.reopenLocked()
	}
	if old != nil {
		old.Close()
	}
	return nil
}

// listen binds a UDP socket to port, marked with mark if not 0.
func listen(port uint16, mark uint32) (*net.UDPConn, error) {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv6unspecified, Port: int(port)})
	if err != nil {
		if conn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4zero, Port: int(port)}); err != nil {
			return nil, err
		}
	}
	if err := setMark(conn, mark); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// SetFwmark marks the socket's packets (SO_MARK; 0: none), as wg-quick
// expects for its policy routing.
func (d *Device) SetFwmark(mark uint32) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := setMark(d.conn, mark); err != nil {
		return fmt.Errorf("wgtunnel: fwmark: %w", err)
	}
	d.fwmark = mark
	return d.Device.SetFwmark(mark)
}

// SetAllowedIPs is the Router's: after each set operation it gives the
// tunnel the device's peers (each keeps its place, a new one takes a
// free place), their endpoints and allowed IPs, opening the tunnel for
// the first peer and closing it with the last.
func (d *Device) SetAllowedIPs(routes map[wireguard.Key][]netip.Prefix) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.allowed = routes
	return d.syncLocked()
}

// syncLocked gives the tunnel the device's peers now. d.mu is held.
func (d *Device) syncLocked() error {
	peers := d.Device.Peers()
	slotted := placePeers(d.slotted, peers)
	if len(peers) == 0 {
		d.closeTunnelLocked()
		d.slotted, d.given = nil, nil
		clear(d.counters)
		d.hooks.slots.Store(newSlots(nil))
		return nil
	}
	list := make([]udp.Peer, len(slotted))
	for i, p := range slotted {
		list[i].Endpoint = placeholder(i)
		if p == nil {
			continue
		}
		if ep := p.Endpoint(); ep.IsValid() {
			list[i].Endpoint = ep
		}
		list[i].Key = p.PublicKey().String()
		list[i].Allowed = d.allowed[p.PublicKey()]
	}
	if d.tnl == nil {
		if err := d.openTunnelLocked(list); err != nil {
			return err
		}
	} else if err := d.tnl.SetPeers(list); err != nil {
		return err
	}
	d.slotted, d.given = slotted, make([]netip.AddrPort, len(list))
	for i := range list {
		d.given[i] = d.tnl.Peer(i).Endpoint
	}
	d.keepCounters(peers)
	d.hooks.slots.Store(newSlots(slotted).keep(d.counters))
	return nil
}

// keepCounters keeps the counters of peers, new ones for a peer new,
// and forgets those of the others. d.mu is held.
func (d *Device) keepCounters(peers []*wireguard.Peer) {
	keep := make(map[*wireguard.Peer]*peerCounters, len(peers))
	for _, p := range peers {
		if keep[p] = d.counters[p]; keep[p] == nil {
			keep[p] = new(peerCounters)
		}
	}
	d.counters = keep
}

// openTunnelLocked opens the tunnel on the TUN device and the socket,
// at the device's MTU, and runs it. d.mu is held.
func (d *Device) openTunnelLocked(peers []udp.Peer) error {
	mtu, err := d.deviceMTU()
	if err != nil {
		return err
	}
	var t *tunnel.Tunnel
	err = inNS(d.ns, func() (err error) {
		t, err = tunnel.Open(tunnel.Config{
			Device: d.tun, Conn: d.conn, Peers: peers, MTU: mtu,
			Headroom: wireguard.HeaderLen, Tailroom: wireguard.TagLen,
			Seal: d.hooks.seal, Open: d.hooks.open, Roam: true, OnControl: d.onControl,
			Logger: d.log,
		})
		return err
	})
	if err != nil {
		return err
	}
	d.tnl = t
	d.running.Go(func() {
		if err := t.Run(context.Background()); err != nil {
			select {
			case d.fail <- err:
			default:
			}
		}
	})
	d.log.Info("wgtunnel: tunnel up", "device", d.tun.Name(), "peers", len(peers), "mtu", mtu, "port", d.Device.ListenPort())
	return nil
}

// closeTunnelLocked closes the tunnel (not the TUN device or the
// socket). d.mu is held.
func (d *Device) closeTunnelLocked() {
	if d.tnl == nil {
		return
	}
	d.tnl.Close()
	d.running.Wait()
	d.past = d.past.Add(d.tnl.Stats())
	for i, s := range d.tnl.PeerStats() {
		if c := d.hooks.slots.Load().counter(i); c != nil {
			c.rxPackets += s.ReceivedDatagrams
			c.txPackets += s.SentDatagrams
		}
	}
	d.tnl = nil
}

// reopenLocked opens the tunnel again with the same peers (another
// socket, another MTU). d.mu is held.
func (d *Device) reopenLocked() {
	d.closeTunnelLocked()
	if err := d.syncLocked(); err != nil {
		d.log.Error("wgtunnel: reopening the tunnel", "err", err)
	}
}

// deviceMTU is the TUN device's MTU now (ErrDeviceRemoved: it is
// gone).
func (d *Device) deviceMTU() (mtu int, err error) {
	err = inNS(d.ns, func() (err error) {
		mtu, err = linkMTU(d.tun.Index())
		return err
	})
	return mtu, err
}

// onControl takes the tunnel's control datagrams: handshake messages
// are queued for the handshake loop (dropped and counted when it is
// full); a keepalive (authenticated: Open named its peer) needs nothing
// more, unless it comes from a new address: then the handshake loop
// moves the peer's endpoint there, as a data message moves it.
func (d *Device) onControl(from netip.AddrPort, peer int, b []byte) {
	c := control{from: from}
	switch wireguard.Type(b) {
	case 0:
		return
	case wireguard.TypeData:
		if c.roam = d.hooks.slots.Load().peer(peer); c.roam == nil || c.roam.Endpoint() == from {
			return
		}
	default:
		c.msg = append([]byte(nil), b...)
	}
	select {
	case d.ctrl <- c:
	default:
		d.ctrlDropped.Add(1)
	}
}

// Run runs the device's protocol: the handshake loop answering
// handshake messages, the timers of each peer (initiations, keepalives),
// the tunnel's endpoints following the peers', and the tunnel's MTU
// following the TUN device's. It returns when ctx ends (nil), the TUN
// device is deleted (ErrDeviceRemoved) or the tunnel fails.
func (d *Device) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // before the Wait
	wg.Go(func() { d.handshakes(ctx) })
	return d.timers(ctx)
}

// handshakes answers handshake messages until ctx ends.
func (d *Device) handshakes(ctx context.Context) {
	var out []byte
	for {
		var c control
		select {
		case <-ctx.Done():
			return
		case c = <-d.ctrl:
		}
		if c.roam != nil {
			c.roam.SetEndpoint(c.from)
			d.follow(c.roam)
			continue
		}
		var p *wireguard.Peer
		var err error
		out, p, err = d.Handle(out[:0], c.msg, c.from, d.loaded())
		if len(out) > 0 {
			d.send(c.from, out)
		}
		if err != nil {
			if r, ok := errors.AsType[wireguard.Reason](err); ok {
				d.hsRefused.add(r)
			}
			d.log.Debug("wgtunnel: handshake message refused", "from", c.from, "err", err)
			continue
		}
		if p != nil {
			if c := d.hooks.slots.Load().of(p); c != nil {
				c.handshakes.Add(1)
			}
			d.follow(p)
			d.kick() // a completed handshake: Tick sends its keepalive
		}
	}
}

// loaded reports whether the device is under load: past half of its
// queue of handshake messages, or as Config.UnderLoad says.
func (d *Device) loaded() bool {
	return len(d.ctrl) > controlQueue/2 || d.underLoad != nil && d.underLoad()
}

// send sends a message of the protocol's own through the tunnel, and
// says whether it did.
func (d *Device) send(to netip.AddrPort, msg []byte) bool {
	d.mu.Lock()
	t := d.tnl
	d.mu.Unlock()
	if t == nil || !to.IsValid() || isPlaceholder(to) {
		return false
	}
	if err := t.Send(to, msg); err != nil {
		d.log.Debug("wgtunnel: send", "to", to, "err", err)
		return false
	}
	return true
}

// follow moves the tunnel's endpoint of p to p's, where its last
// handshake message came from.
func (d *Device) follow(p *wireguard.Peer) {
	ep := p.Endpoint()
	d.mu.Lock()
	defer d.mu.Unlock()
	slot, ok := d.hooks.slots.Load().index[p]
	if !ok || d.tnl == nil || !ep.IsValid() {
		return
	}
	if d.tnl.Peer(slot).Endpoint != ep {
		if err := d.tnl.SetEndpoint(slot, ep); err != nil {
			d.log.Warn("wgtunnel: peer endpoint", "peer", p.PublicKey(), "endpoint", ep, "err", err)
			return
		}
	}
	d.given[slot] = d.tnl.Peer(slot).Endpoint // the tunnel may have roamed there first
}

// timers runs the peers' Ticks when due or asked for, and checks the
// TUN device's MTU every pollInterval.
func (d *Device) timers(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	poll := time.NewTicker(pollInterval)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-d.fail:
			if _, merr := d.deviceMTU(); errors.Is(merr, ErrDeviceRemoved) {
				return ErrDeviceRemoved
			}
			return err
		case <-poll.C:
			if err := d.checkDevice(); err != nil {
				return err
			}
			continue // the peers' Ticks are not due
		case <-d.wake:
		case <-timer.C:
		}
		next := time.Now().Add(time.Minute)
		for _, p := range d.Device.Peers() {
			act, at := p.Tick()
			d.act(p, act)
			if at.Before(next) {
				next = at
			}
		}
		timer.Reset(max(time.Until(next), time.Millisecond))
	}
}

// act sends what p's Tick asked for.
func (d *Device) act(p *wireguard.Peer, act wireguard.Action) {
	d.syncEndpoint(p)
	to := p.Endpoint()
	if act&wireguard.SendInitiation != 0 && to.IsValid() {
		if msg, err := d.AppendInitiation(nil, p); err == nil && d.send(to, msg) {
			if c := d.hooks.slots.Load().of(p); c != nil {
				c.initiations.Add(1)
			}
		}
	}
	if act&wireguard.SendStaged != 0 {
		d.SendStaged(p, func(to netip.AddrPort, msg []byte) { d.send(to, msg) })
	}
	if act&wireguard.SendKeepalive != 0 {
		ka := []wireguard.Packet{{Buf: make([]byte, wireguard.HeaderLen, wireguard.MinDataSize), Peer: p}}
		d.Seal(ka)
		if ka[0].Reason == wireguard.OK {
			d.send(to, ka[0].Buf)
		}
	}
}

// Peers returns the device's peers in the order they were added (as
// uapi's get shows them), each with the endpoint the tunnel roamed it to.
func (d *Device) Peers() []*wireguard.Peer {
	peers := d.Device.Peers()
	for _, p := range peers {
		d.syncEndpoint(p)
	}
	return peers
}

// syncEndpoint takes the tunnel's endpoint of p where the tunnel roamed
// it (data from a new address): where it differs from the one the tunnel
// was given.
func (d *Device) syncEndpoint(p *wireguard.Peer) {
	d.mu.Lock()
	defer d.mu.Unlock()
	slot, ok := d.hooks.slots.Load().index[p]
	if !ok || d.tnl == nil {
		return
	}
	if ep := d.tnl.Peer(slot).Endpoint; ep != d.given[slot] {
		d.given[slot] = ep
		p.SetEndpoint(ep)
	}
}

// checkDevice reopens the tunnel at the TUN device's MTU when it
// changed (wg-quick sets it), and says whether the device is gone.
func (d *Device) checkDevice() error {
	mtu, err := d.deviceMTU()
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.tnl != nil && d.tnl.MTU() != mtu {
		d.log.Info("wgtunnel: the TUN device's MTU changed", "from", d.tnl.MTU(), "to", mtu)
		d.reopenLocked()
	}
	return nil
}

// Stats are a device's counters.
type Stats struct {
	// Tunnel sums the counters of the tunnels opened so far (one at a
	// time: another opens for another listen port or MTU).
	Tunnel tunnel.Stats
	// NoKey counts the packets that found their peer without a keypair
	// (a handshake is asked for; they are staged), Unsealed those Seal
	// refused otherwise (those out of counters are staged too; both are
	// in Tunnel.Send.Unsealed, with those staged behind others);
	// ControlDropped the handshake messages dropped with the handshake
	// loop's queue full.
	NoKey, Unsealed, ControlDropped uint64
	// Staged counts the packets that waited for a handshake, and those
	// dropped from the queues (see wireguard.StagedStats).
	Staged wireguard.StagedStats
	// DataRefused counts the data messages Open refused before they
	// named a peer (Replay, Auth, UnknownIndex, Expired, Short; their
	// verdicts are in Tunnel.Receive), HandshakeRefused the handshake
	// messages Handle refused (BadMAC1, NeedCookie, UnknownPeer,
	// OldTimestamp, RateLimited, ...). PeerStats has each peer's drops.
	DataRefused, HandshakeRefused Drops
}

// Stats returns a snapshot of the counters.
func (d *Device) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := Stats{
		Tunnel: d.past, NoKey: d.hooks.noKey.Load(), Unsealed: d.hooks.unsealed.Load(), ControlDropped: d.ctrlDropped.Load(),
		Staged: d.StagedStats(), DataRefused: d.hooks.refused.load(), HandshakeRefused: d.hsRefused.load(),
	}
	if d.tnl != nil {
		s.Tunnel = s.Tunnel.Add(d.tnl.Stats())
	}
	return s
}

// Close closes the tunnel, the socket and the TUN device (which the
// kernel then deletes).
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	d.closeTunnelLocked()
	return errors.Join(d.conn.Close(), d.tun.Close(), d.ns.Close())
}

var (
	_ uapi.Device = (*Device)(nil)
	_ uapi.Router = (*Device)(nil)
)
