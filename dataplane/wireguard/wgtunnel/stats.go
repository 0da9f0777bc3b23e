package wgtunnel

import (
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/udp"
	"github.com/gsoplane/gsoplane/dataplane/wireguard"
)

// Drops counts messages or packets dropped by reason: Drops[r] those
// dropped with wireguard.Reason r.
type Drops [wireguard.NumReasons]uint64

// reasons counts by wireguard.Reason, as Drops.
type reasons [len(Drops{})]atomic.Uint64

func (c *reasons) add(r wireguard.Reason) {
	if int(r) < len(c) {
		c[r].Add(1)
	}
}

func (c *reasons) load() (d Drops) {
	for i := range c {
		d[i] = c[i].Load()
	}
	return d
}

// peerCounters are a peer's counters of its own, kept while it is the
// device's peer.
type peerCounters struct {
	initiations, handshakes atomic.Uint64
	drops                   reasons
	// The tunnels' per-peer counts, summed over the tunnels closed
	// (Device.mu).
	rxPackets, txPackets uint64
}

// PeerStats are one peer's counters.
type PeerStats struct {
	PublicKey wireguard.Key
	Endpoint  netip.AddrPort // zero: none yet
	// RxBytes and TxBytes are wg(8)'s transfer (wireguard.Peer.Transfer):
	// the bytes of the messages authenticated from the peer, and of those
	// sealed or written for it.
	RxBytes, TxBytes uint64
	// RxPackets counts the peer's data messages handed to the TUN device
	// (opened, from an allowed source), TxPackets those sent to it (taken
	// by the kernel): udp.PeerStats's datagrams, keepalives and
	// handshake messages not included.
	RxPackets, TxPackets uint64
	// Initiations counts the handshake initiations sent to the peer,
	// Handshakes the handshakes completed with it, either side starting
	// them; LastHandshake is the latest's time (zero: none).
	Initiations, Handshakes uint64
	LastHandshake           time.Time
	// Drops counts the packets for the peer that Seal refused (NoRoom;
	// those without a session, or whose session is out of counters, are
	// staged instead: Stats.Staged) and those from it that authenticated
	// but were refused (Malformed).
	Drops Drops
}

// PeerStats returns a snapshot of each peer's counters, in the order of
// wireguard.Device.Peers. They are kept while the tunnel opens again
// (another listen port, another MTU) and start from zero for a peer
// added (again).
func (d *Device) PeerStats() []PeerStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	var now []udp.PeerStats
	if d.tnl != nil {
		now = d.tnl.PeerStats()
	}
	tab := d.hooks.slots.Load()
	var out []PeerStats
	for _, p := range d.Device.Peers() {
		s := PeerStats{PublicKey: p.PublicKey(), Endpoint: p.Endpoint(), LastHandshake: p.LastHandshake()}
		s.RxBytes, s.TxBytes = p.Transfer()
		if i, ok := tab.index[p]; ok {
			c := tab.counters[i]
			s.Initiations, s.Handshakes, s.Drops = c.initiations.Load(), c.handshakes.Load(), c.drops.load()
			s.RxPackets, s.TxPackets = c.rxPackets, c.txPackets
			if i < len(now) {
				s.RxPackets += now[i].ReceivedDatagrams
				s.TxPackets += now[i].SentDatagrams
			}
		}
		out = append(out, s)
	}
	return out
}
