// Package nexthop resolves the link-layer address of the next hop of a
// packet leaving one interface, by asking the kernel: its routing table
// says which neighbour a destination goes through, its neighbour table
// (ARP, IPv6 ND) says that neighbour's MAC address, and an unresolved
// neighbour is resolved by the kernel itself (an RTM_NEWNEIGH with NTF_USE
// makes it probe). No static entries are needed. It needs Linux and
// CAP_NET_ADMIN; the AF_XDP sink uses it.
package nexthop

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
)

// ErrUnresolved means the kernel could not resolve a next hop in time.
var ErrUnresolved = errors.New("next hop unresolved")

// TTL is how long a resolved MAC address is reused before the kernel is
// asked again.
const TTL = time.Second

const (
	neighTimeout = 3 * time.Second      // default wait for resolution
	neighPoll    = 5 * time.Millisecond // how often to look while waiting
)

type neighEntry struct {
	mac     net.HardwareAddr
	expires time.Time
}

// Resolver resolves destinations leaving one interface to MAC addresses.
// It may be used from several goroutines.
type Resolver struct {
	nl      *netlink.Handle // opened in the namespace of the interface
	ifindex int
	gateway netip.Addr // if valid, the next hop of every destination
	timeout time.Duration
	mu      sync.Mutex
	cache   map[netip.Addr]neighEntry
}

// New opens a netlink handle in the calling thread's network namespace
// for resolving next hops out of ifindex, through gateway if it is valid.
func New(ifindex int, gateway netip.Addr) (*Resolver, error) {
	h, err := netlink.NewHandle()
	if err != nil {
		return nil, fmt.Errorf("nexthop: netlink: %w", err)
	}
	return &Resolver{nl: h, ifindex: ifindex, gateway: gateway, timeout: neighTimeout, cache: make(map[netip.Addr]neighEntry)}, nil
}

// Close releases the netlink handle.
func (n *Resolver) Close() { n.nl.Close() }

// Lookup returns the MAC address packets to dst are sent to, asking the
// kernel, and waiting for it to resolve the neighbour, when the cached
// answer is missing or old.
func (n *Resolver) Lookup(dst netip.Addr) (net.HardwareAddr, error) {
	n.mu.Lock()
	e, ok := n.cache[dst]
	n.mu.Unlock()
	if ok && time.Now().Before(e.expires) {
		return e.mac, nil
	}
	mac, err := n.resolve(dst)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	n.cache[dst] = neighEntry{mac: mac, expires: time.Now().Add(TTL)}
	n.mu.Unlock()
	return mac, nil
}

// resolve finds the next hop for dst and its MAC address.
func (n *Resolver) resolve(dst netip.Addr) (net.HardwareAddr, error) {
	hop, err := n.nextHop(dst)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(n.timeout)
	for asked := false; ; asked = true {
		mac, err := n.neighbour(hop)
		if err != nil || mac != nil {
			return mac, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("nexthop: %w: %v via ifindex %d", ErrUnresolved, hop, n.ifindex)
		}
		if !asked {
			n.probe(hop)
		}
		time.Sleep(neighPoll)
	}
}

// nextHop returns the configured gateway, or else the gateway of the
// kernel's route to dst through our interface, or dst itself when there is
// none (IPv4 then takes dst to be on link, as "ip route get DST oif IF"
// shows, and so do we for IPv6). The main table may route dst elsewhere, for example into the
// TUN device the packet came from: only routes through our interface count.
func (n *Resolver) nextHop(dst netip.Addr) (netip.Addr, error) {
	if n.gateway.IsValid() {
		return n.gateway, nil
	}
	routes, err := n.nl.RouteGetWithOptions(dst.AsSlice(), &netlink.RouteGetOptions{OifIndex: n.ifindex})
	if err != nil {
		// IPv6 answers ENETUNREACH where IPv4 assumes the destination is
		// on link: assume the same.
		return dst, nil
	}
	for _, r := range routes {
		if gw, ok := netip.AddrFromSlice(r.Gw); ok && !gw.IsUnspecified() {
			return gw.Unmap(), nil
		}
	}
	return dst, nil
}

// neighbour returns hop's MAC from the kernel's table, nil if unresolved.
func (n *Resolver) neighbour(hop netip.Addr) (net.HardwareAddr, error) {
	family := netlink.FAMILY_V4
	if hop.Is6() {
		family = netlink.FAMILY_V6
	}
	list, err := n.nl.NeighList(n.ifindex, family)
	if err != nil {
		return nil, fmt.Errorf("nexthop: neighbours of ifindex %d: %w", n.ifindex, err)
	}
	const usable = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY |
		netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP
	for _, nb := range list {
		if ip, ok := netip.AddrFromSlice(nb.IP); ok && ip.Unmap() == hop && nb.State&usable != 0 && len(nb.HardwareAddr) == 6 {
			return nb.HardwareAddr, nil
		}
	}
	return nil, nil
}

// probe asks the kernel to resolve hop (ip neigh replace HOP dev IF use).
func (n *Resolver) probe(hop netip.Addr) {
	// An error leaves the wait to time out with ErrUnresolved.
	_ = n.nl.NeighSet(&netlink.Neigh{LinkIndex: n.ifindex, IP: hop.AsSlice(), Flags: netlink.NTF_USE})
}
