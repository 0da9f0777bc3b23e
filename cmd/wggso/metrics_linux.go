package main

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/wireguard"
	"github.com/gsoplane/gsoplane/dataplane/wireguard/wgtunnel"
	"github.com/gsoplane/gsoplane/internal/buildinfo"
	"github.com/gsoplane/gsoplane/internal/httpserve"
)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("wggso_"+name, help, labels, nil)
}

// The metrics; docs/wireguard.md (Metrics) says what each one counts.
var (
	descPeers          = desc("peers", "The interface's peers.")
	descPeerRxBytes    = desc("peer_receive_bytes_total", "Bytes of the messages authenticated from the peer, handshake messages included: wg show's received.", "peer")
	descPeerTxBytes    = desc("peer_transmit_bytes_total", "Bytes of the messages sealed or written for the peer, handshake messages included: wg show's sent.", "peer")
	descPeerRxPackets  = desc("peer_receive_packets_total", "Data messages from the peer handed to the interface (opened, from an allowed source).", "peer")
	descPeerTxPackets  = desc("peer_transmit_packets_total", "Data messages sent to the peer (taken by the kernel).", "peer")
	descPeerInits      = desc("peer_handshake_initiations_total", "Handshake initiations sent to the peer.", "peer")
	descPeerHandshakes = desc("peer_handshakes_total", "Handshakes completed with the peer, either side starting them.", "peer")
	descPeerLast       = desc("peer_last_handshake_seconds", "Unix time of the latest handshake with the peer; 0: none yet.", "peer")
	descPeerDrops      = desc("peer_drops_total", "Packets for the peer that could not be sealed (no_room; unknown_peer: removed meanwhile) and authenticated ones from it that were refused (malformed). Packets waiting for a session are staged: wggso_staged_packets_total.", "peer", "reason")
	descRefused        = desc("refused_total", "Messages refused before they named a peer, by message (data, handshake) and reason.", "message", "reason")
	descQueueDropped   = desc("handshake_queue_dropped_total", "Handshake messages dropped, the handshake goroutine's queue full.")
	descStaged         = desc("staged_packets_total", "Packets that waited for a handshake, by event: staged, sent once it completed, dropped with the queue full (full: the oldest, past 128 a peer) or with the handshake given up or the peer removed (cleared).", "event")
	descTunnel         = desc("tunnel_events_total", "The tunnel's counters, by name: traffic each way, the socket's messages, calls and errors, control messages, fall-backs.", "event")
	descTunnelDrops    = desc("tunnel_drops_total", "Packets the tunnel dropped, by direction (tun_to_peer, peer_to_tun) and reason.", "direction", "reason")
)

// reasonLabels are the reasons' label values.
var reasonLabels = map[wireguard.Reason]string{
	wireguard.Short: "short", wireguard.Oversize: "oversize", wireguard.UnknownType: "unknown_type",
	wireguard.BadMAC1: "bad_mac1", wireguard.NeedCookie: "need_cookie", wireguard.Auth: "auth",
	wireguard.BadKey: "bad_key", wireguard.UnknownPeer: "unknown_peer", wireguard.UnknownIndex: "unknown_index",
	wireguard.Replay: "replay", wireguard.OldTimestamp: "old_timestamp", wireguard.RateLimited: "rate_limited",
	wireguard.Expired: "expired", wireguard.NoKey: "no_key", wireguard.NoRoom: "no_room",
	wireguard.Malformed: "malformed", wireguard.NoPrivateKey: "no_private_key", wireguard.Queued: "queued",
	wireguard.SourceLimited: "source_limited",
}

// peerReasons are the reasons of a peer's drops; refusedReasons those of
// the messages refused before they named a peer.
var (
	peerReasons    = []wireguard.Reason{wireguard.NoRoom, wireguard.UnknownPeer, wireguard.Malformed}
	refusedReasons = []wireguard.Reason{
		wireguard.Short, wireguard.Oversize, wireguard.UnknownType, wireguard.BadMAC1, wireguard.NeedCookie,
		wireguard.Auth, wireguard.BadKey, wireguard.UnknownPeer, wireguard.UnknownIndex, wireguard.Replay,
		wireguard.OldTimestamp, wireguard.RateLimited, wireguard.SourceLimited, wireguard.Expired, wireguard.NoPrivateKey,
	}
)

// collector exports a device's counters, read once per scrape.
type collector struct {
	dev interface {
		Stats() wgtunnel.Stats
		PeerStats() []wgtunnel.PeerStats
	}
}

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		descPeers, descPeerRxBytes, descPeerTxBytes, descPeerRxPackets, descPeerTxPackets, descPeerInits,
		descPeerHandshakes, descPeerLast, descPeerDrops, descRefused, descQueueDropped, descStaged, descTunnel, descTunnelDrops,
	} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	peers := c.dev.PeerStats()
	ch <- prometheus.MustNewConstMetric(descPeers, prometheus.GaugeValue, float64(len(peers)))
	for _, p := range peers {
		key := p.PublicKey.String()
		counter(descPeerRxBytes, p.RxBytes, key)
		counter(descPeerTxBytes, p.TxBytes, key)
		counter(descPeerRxPackets, p.RxPackets, key)
		counter(descPeerTxPackets, p.TxPackets, key)
		counter(descPeerInits, p.Initiations, key)
		counter(descPeerHandshakes, p.Handshakes, key)
		var last float64
		if !p.LastHandshake.IsZero() {
			last = float64(p.LastHandshake.UnixNano()) / 1e9
		}
		ch <- prometheus.MustNewConstMetric(descPeerLast, prometheus.GaugeValue, last, key)
		for _, r := range peerReasons {
			counter(descPeerDrops, p.Drops[r], key, reasonLabels[r])
		}
	}
	s := c.dev.Stats()
	for _, r := range refusedReasons {
		counter(descRefused, s.DataRefused[r], "data", reasonLabels[r])
		counter(descRefused, s.HandshakeRefused[r], "handshake", reasonLabels[r])
	}
	counter(descQueueDropped, s.ControlDropped)
	for _, e := range []struct {
		name string
		v    uint64
	}{{"staged", s.Staged.Staged}, {"sent", s.Staged.Sent}, {"full", s.Staged.Full}, {"cleared", s.Staged.Cleared}} {
		counter(descStaged, e.v, e.name)
	}
	for _, e := range s.Tunnel.AppendCounters(nil) {
		counter(descTunnel, e.Value, e.Name)
	}
	for _, r := range frame.ForwardDropReasons {
		counter(descTunnelDrops, s.Tunnel.Forward.Drops[r], "tun_to_peer", r.String())
	}
	for _, r := range frame.ReturnDropReasons {
		counter(descTunnelDrops, s.Tunnel.Return.Drops[r], "peer_to_tun", r.String())
	}
}

// newRegistry registers c with the build information and the Go runtime
// and process collectors.
func newRegistry(c collector) *prometheus.Registry {
	b := buildinfo.Read()
	return httpserve.NewRegistry("wggso", httpserve.Build{Version: b.Version, Revision: b.Revision, Go: b.Go}, c)
}

// health says why the interface cannot carry packets now: no private
// key, or no peer (/healthz: 503); nil while it can.
func health(dev *wgtunnel.Device) error {
	switch {
	case dev.PublicKey() == wireguard.Key{}:
		return errors.New("no private key: the interface is not configured (wg setconf)")
	case len(dev.Peers()) == 0:
		return errors.New("no peers")
	}
	return nil
}
