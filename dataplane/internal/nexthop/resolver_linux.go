package nexthop

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

const (
	// socketTimeout bounds every netlink request, so that the worker,
	// and Close waiting for it, can never hang on the kernel.
	socketTimeout = 2 * time.Second
	// rcvbuf is the subscription's socket buffer: the kernel's garbage
	// collection deletes hundreds of neighbours at once, one notification
	// each, and the default 208 KiB holds about 270.
	rcvbuf = 4 << 20
)

// system is the kernel side of a Resolver: netlink sockets in the
// interface's namespace, the worker that asks the kernel, and the
// watcher that follows its neighbour notifications.
type system struct {
	ns      netns.NsHandle           // kept to renew the subscription
	h       *netlink.Handle          // routes and NTF_USE probes
	get     map[int]*nl.SocketHandle // single-neighbour queries
	done    chan struct{}
	wg      sync.WaitGroup
	closing sync.Once
}

// New starts a Resolver for the interface cfg.Ifindex of the network
// namespace of the calling thread: its netlink sockets, the subscription
// to neighbour notifications included, are opened there, whichever
// thread they are used from. It starts two goroutines (a worker that
// asks the kernel, one request at a time, and a watcher of the
// notifications) and the subscription's two; Close stops them all.
func New(cfg Config) (*Resolver, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	runtime.LockOSThread() // the namespace is the thread's
	defer runtime.UnlockOSThread()
	sys, err := openSystem()
	if err != nil {
		return nil, err
	}
	r := newResolver(cfg)
	start := time.Now()
	r.now = func() int64 { return time.Since(start).Milliseconds() }
	r.sys = sys
	updates, stop, err := r.subscribe()
	if err != nil {
		sys.close()
		return nil, err
	}
	sys.wg.Add(2)
	go r.work()
	go r.watch(updates, stop)
	return r, nil
}

// openSystem opens the netlink sockets in the calling thread's network
// namespace.
func openSystem() (*system, error) {
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("nexthop: network namespace: %w", err)
	}
	// The sockets are made on this thread, in its namespace: no setns,
	// which would need CAP_SYS_ADMIN (udpfwd keeps only CAP_NET_ADMIN).
	s := &system{ns: ns, done: make(chan struct{})}
	if s.h, err = netlink.NewHandle(unix.NETLINK_ROUTE); err == nil {
		err = s.h.SetSocketTimeout(socketTimeout)
	}
	if err != nil {
		s.close()
		return nil, fmt.Errorf("nexthop: netlink: %w", err)
	}
	sock, err := nl.GetNetlinkSocketAt(netns.None(), netns.None(), unix.NETLINK_ROUTE)
	if err != nil {
		s.close()
		return nil, fmt.Errorf("nexthop: netlink: %w", err)
	}
	tv := unix.NsecToTimeval(socketTimeout.Nanoseconds())
	sock.SetSendTimeout(&tv)
	sock.SetReceiveTimeout(&tv)
	s.get = map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: {Socket: sock}}
	return s, nil
}

// elsewhere returns the resolver's namespace if the calling thread is in
// another one (a test's gateway opened on a thread of its own), else nil:
// entering the namespace one is in already still needs CAP_SYS_ADMIN.
func (s *system) elsewhere() *netns.NsHandle {
	cur, err := netns.Get()
	if err != nil {
		return &s.ns
	}
	defer cur.Close()
	if cur.Equal(s.ns) {
		return nil
	}
	return &s.ns
}

// close releases the sockets and the namespace handle.
func (s *system) close() {
	if s.h != nil {
		s.h.Close()
	}
	for _, sh := range s.get {
		sh.Close()
	}
	s.ns.Close()
}

// Close stops the resolver's goroutines and its subscription and closes
// its sockets and namespace handle; it returns once they are stopped.
// Lookups after Close still answer from the cache but resolve nothing.
func (r *Resolver) Close() {
	r.sys.closing.Do(func() {
		close(r.sys.done)
		r.sys.wg.Wait()
		r.sys.close()
	})
}

// subscribe subscribes to the neighbour notifications of the resolver's
// namespace; closing stop ends the subscription, which then closes
// updates.
func (r *Resolver) subscribe() (updates chan netlink.NeighUpdate, stop chan struct{}, err error) {
	updates, stop = make(chan netlink.NeighUpdate, 256), make(chan struct{})
	opts := netlink.NeighSubscribeOptions{Namespace: r.sys.elsewhere()}
	if hasNetAdmin() { // beyond net.core.rmem_max, and vishvananda/netlink leaks the socket if refused
		opts.ReceiveBufferSize, opts.ReceiveBufferForceSize = rcvbuf, true
	}
	if err := netlink.NeighSubscribeWithOptions(updates, stop, opts); err != nil {
		close(stop)
		return nil, nil, fmt.Errorf("nexthop: subscribe to neighbours: %w", err)
	}
	return updates, stop, nil
}

// hasNetAdmin reports whether the calling thread has CAP_NET_ADMIN, which
// the resolver needs anyway to have the kernel resolve neighbours.
func hasNetAdmin() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if unix.Capget(&hdr, &data[0]) != nil {
		return false
	}
	return data[unix.CAP_NET_ADMIN/32].Effective&(1<<(unix.CAP_NET_ADMIN%32)) != 0
}

// watch follows the kernel's neighbour notifications and advances the
// clock every tick, until Close. A subscription that ends (its socket
// overflowed) is renewed and the cache re-validated.
func (r *Resolver) watch(updates chan netlink.NeighUpdate, stop chan struct{}) {
	defer r.sys.wg.Done()
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for {
		select {
		case u, ok := <-updates:
			if ok {
				r.notified(u)
				continue
			}
			close(stop)
			updates, stop = r.renew()
		case <-ticker.C:
			r.advance(r.now())
			if updates == nil {
				updates, stop = r.renew()
			}
		case <-r.sys.done:
			if stop != nil {
				close(stop)
				for range updates { // until the subscription's goroutine is gone
				}
			}
			return
		}
	}
}

// renew subscribes again after notifications were lost, or returns nil
// channels to try again at the next tick.
func (r *Resolver) renew() (chan netlink.NeighUpdate, chan struct{}) {
	updates, stop, err := r.subscribe()
	if err != nil {
		return nil, nil
	}
	r.resync()
	return updates, stop
}

// notified applies a neighbour notification about the resolver's
// interface.
func (r *Resolver) notified(u netlink.NeighUpdate) {
	hop, ok := netip.AddrFromSlice(u.IP)
	if !ok || u.LinkIndex != r.cfg.Ifindex {
		return
	}
	n := neighOf(&u.Neigh)
	if u.Type == unix.RTM_DELNEIGH {
		n.kind = gone
	}
	r.settle(hop.Unmap(), n, false)
}

// neighOf copies what matters of a kernel neighbour entry: the message
// buffer it points into is not kept.
func neighOf(nb *netlink.Neigh) neigh {
	const valid = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY |
		netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP
	n := neigh{static: nb.State&(netlink.NUD_PERMANENT|netlink.NUD_NOARP) != 0}
	switch {
	case nb.State&valid != 0 && len(nb.HardwareAddr) == 6:
		n.kind = usable
		copy(n.mac[:], nb.HardwareAddr)
	case nb.State&netlink.NUD_FAILED != 0:
		n.kind = failed
	}
	return n
}

// work runs the jobs, one at a time, until Close.
func (r *Resolver) work() {
	defer r.sys.wg.Done()
	for {
		select {
		case <-r.sys.done:
			return
		case j := <-r.jobs:
			if j.recheck {
				r.recheck(j.key)
			} else {
				r.resolve(j.key, j.renew)
			}
		}
	}
}

// resolve finds key's next hop and asks the kernel for its MAC address:
// a neighbour with one settles the entry; otherwise the kernel is asked
// to resolve it (NTF_USE) and its notification settles the entry later,
// unless it failed at once. With renew, a resolution the kernel has
// under way is started again, with a solicitation at once: NTF_USE alone
// leaves an INCOMPLETE neighbour waiting for its next retransmission.
func (r *Resolver) resolve(key netip.Addr, renew bool) {
	hop := r.nextHop(key)
	if !r.setHop(key, hop) {
		return
	}
	n, err := r.neighbour(hop)
	if err == nil && n.kind == usable {
		if !n.static {
			_ = r.probe(hop) // best effort: mark it used, have a stale one verified
		}
		r.settle(hop, n, true)
		return
	}
	if err == nil && renew {
		err = r.unprobe(hop)
	}
	if err == nil {
		err = r.probe(hop)
	}
	if err == nil {
		n, err = r.neighbour(hop)
	}
	if err != nil {
		r.failKey(key)
		return
	}
	r.settle(hop, n, true)
}

// recheck re-validates a resolved entry in use: its route, and its
// neighbour, which an NTF_USE keeps verified by the kernel as if it
// carried the traffic (REACHABLE stays fresh, STALE goes through DELAY
// and PROBE to REACHABLE or FAILED, and the notifications tell).
func (r *Resolver) recheck(key netip.Addr) {
	hop := r.nextHop(key)
	if static, ok := r.rechecked(key, hop); ok && !static {
		_ = r.probe(hop) // a failure to come is notified
	}
}

// nextHop returns the configured gateway, or else the gateway of the
// kernel's route to dst through our interface, or dst itself when there
// is none (IPv4 then takes dst to be on link, as "ip route get DST oif
// IF" shows, and so do we for IPv6). The main table may route dst
// elsewhere, for example into the TUN device the packet came from: only
// routes through our interface count.
func (r *Resolver) nextHop(dst netip.Addr) netip.Addr {
	if r.cfg.Gateway.IsValid() {
		return r.cfg.Gateway
	}
	routes, err := r.sys.h.RouteGetWithOptions(dst.AsSlice(), &netlink.RouteGetOptions{OifIndex: r.cfg.Ifindex})
	if err != nil {
		// IPv6 answers ENETUNREACH where IPv4 assumes the destination is
		// on link: assume the same.
		return dst
	}
	for _, rt := range routes {
		if gw, ok := netip.AddrFromSlice(rt.Gw); ok && !gw.IsUnspecified() {
			return gw.Unmap()
		}
	}
	return dst
}

// neighbour asks the kernel for hop's neighbour entry on our interface:
// one RTM_GETNEIGH, which vishvananda/netlink only offers as a dump of
// the whole table, built and decoded with its encoder and decoder.
func (r *Resolver) neighbour(hop netip.Addr) (neigh, error) {
	req := nl.NewNetlinkRequest(unix.RTM_GETNEIGH, 0)
	req.Sockets = r.sys.get
	req.AddData(&netlink.Ndmsg{Family: family(hop), Index: uint32(r.cfg.Ifindex)})
	req.AddData(nl.NewRtAttr(unix.NDA_DST, hop.AsSlice()))
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWNEIGH)
	switch {
	case errors.Is(err, unix.ENOENT) || (err == nil && len(msgs) == 0):
		return neigh{}, nil // the kernel has no entry
	case err != nil:
		return neigh{}, fmt.Errorf("nexthop: neighbour %v: %w", hop, err)
	}
	nb, err := netlink.NeighDeserialize(msgs[0])
	if err != nil {
		return neigh{}, fmt.Errorf("nexthop: neighbour %v: %w", hop, err)
	}
	return neighOf(nb), nil
}

// probe asks the kernel to use hop (ip neigh replace HOP dev IF use):
// it creates the entry if missing and resolves it, restarts a failed
// one, moves a stale one to DELAY and refreshes its last use. Never on a
// permanent entry: NTF_USE clears NUD_PERMANENT (__neigh_update).
func (r *Resolver) probe(hop netip.Addr) error {
	err := r.sys.h.NeighSet(&netlink.Neigh{LinkIndex: r.cfg.Ifindex, Family: int(family(hop)), IP: hop.AsSlice(), Flags: netlink.NTF_USE})
	if err != nil {
		return fmt.Errorf("nexthop: probe %v: %w", hop, err)
	}
	return nil
}

// unprobe stops the kernel's resolution of hop, if it has one under way
// (ip neigh replace HOP dev IF nud none): the neighbour becomes NUD_NONE,
// its retransmission timer is stopped, and the packets it queued stay
// queued for the next resolution, which the next NTF_USE starts with a
// solicitation at once (__neigh_update, __neigh_event_send). Only for a
// neighbour without a MAC address to send to.
func (r *Resolver) unprobe(hop netip.Addr) error {
	err := r.sys.h.NeighSet(&netlink.Neigh{LinkIndex: r.cfg.Ifindex, Family: int(family(hop)), IP: hop.AsSlice(), State: netlink.NUD_NONE})
	if err != nil {
		return fmt.Errorf("nexthop: restart %v: %w", hop, err)
	}
	return nil
}

// family returns the address family of a.
func family(a netip.Addr) uint8 {
	if a.Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}
