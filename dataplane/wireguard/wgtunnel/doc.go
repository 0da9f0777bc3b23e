// Package wgtunnel is a WireGuard interface on the tunnel's data path:
// the protocol of package wireguard on a tunnel.Tunnel with one peer of
// the tunnel per WireGuard peer, configured through package uapi (a
// Device is a uapi.Device and a uapi.Router), as cmd/wggso serves it to
// wg(8) and wg-quick(8).
//
// New creates the TUN device (MTU 1420, offloads on, the tunnel's
// defaults) and binds the UDP socket; the tunnel opens with the first
// peer and closes with the last, and opens again on another socket when
// the listen port changes and at another inner MTU when the TUN device's
// changes (wg-quick sets it after the peers: Run checks it every second),
// so that the tunnel's MTU is always the device's. SetAllowedIPs hands
// the tunnel the peers (Tunnel.SetPeers) after each set operation: each
// WireGuard peer keeps its place among the tunnel's peers, whose Key is
// its public key and Allowed its allowed IPs; a peer without an endpoint
// yet has a placeholder one nothing is sent to (the tunnel wants one),
// until its first handshake.
//
// The data path is the device's batch Seal and Open as the tunnel's
// hooks (HeaderLen of headroom, TagLen of tailroom: a data message's
// padding to 16 bytes stops at the inner MTU, as WireGuard's does, and a
// keepalive, 32 bytes, is a datagram the tunnel takes). Seal maps each
// datagram's peer to its WireGuard peer and leaves it at its sealed
// length; a packet for a peer without a keypair (counted in Stats.NoKey)
// is staged while the device asks for a handshake, and so are those
// behind it until the staged ones are sent (wireguard.Peer.Stage, up to
// 128 a peer; Stats.Staged): the datagram leaves the batch (the tunnel's
// Send.Unsealed counts it) and its copy is sealed and sent in order
// with Tunnel.Send once the handshake completes. Open runs with the
// tunnel's Roam: a data message names its peer by its receiver index,
// so that the tunnel follows a peer to a new address; keepalives and
// handshake messages are udp.Control (a keepalive from a new address
// moves its peer's endpoint too, through the handshake loop). Neither
// allocates (staging a packet does, off the steady path).
//
// Run answers handshake messages (OnControl queues them for one
// goroutine; past half of its queue, or when Config.UnderLoad says so,
// the device is under load and asks for cookies), runs each peer's Tick
// and sends what it asks for (an initiation, the staged packets, a
// keepalive) with Tunnel.Send, and keeps each peer's endpoint and the
// tunnel's the same both ways (Peers, which uapi's get calls, takes the
// tunnel's roaming first).
//
// Stats sums the tunnels' counters (another opens for another listen
// port or MTU) with the messages refused by reason (wireguard.Reason)
// before they named a peer, and the staged packets; PeerStats has each
// peer's: wg(8)'s transfer, its data packets each way, handshakes
// initiated and completed, and its drops by reason. cmd/wggso exports
// both as Prometheus metrics. It needs Linux and CAP_NET_ADMIN;
// elsewhere New returns an error wrapping
// frame.ErrNotSupported.
package wgtunnel
