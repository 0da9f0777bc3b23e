// Package tunnel is a VPN tunnel's data path, fast by default: a TUN
// device with offloads on one side, a UDP socket on the other, and per
// TUN queue a forwarder (TUN → segmentation → UDP_SEGMENT datagrams) and
// a return path (UDP_GRO datagrams → GRO → TUN), with the VPN's framing
// and AEAD plugged in as batch hooks (Config.Seal, Config.Open) that work
// in place:
//
//	TUN → Forwarder → udp.Sink (Seal) ==== UDP ==== udp.Receiver (Open) → ReturnPath (GRO) → TUN
//
// A Tunnel has one peer (Config.Peer, the socket connected to it) or
// several (Config.Peers, an unconnected socket), routed as WireGuard's
// cryptokey routing does: each inner packet goes to the peer whose
// allowed prefix matches its destination longest (none: dropped, counted
// in Stats.Send.NoPeer); a datagram is the peer's whose endpoint it comes
// from (none: dropped, Stats.Receive.UnknownPeer), and its inner packet
// is handed on only if its source routes back to that peer (else
// Stats.Receive.NotAllowed). Endpoints are fixed: there is no roaming to
// the address a peer's datagrams come from. PeerStats counts each peer's
// traffic.
//
// Open derives the inner MTU from the path MTU to the peer (to each peer,
// the smallest) and the encapsulation's overhead (outer IPv4 or IPv6 and
// UDP headers, the hook's headroom and tailroom), sizes the socket
// buffers for the batches, and warns (and counts, Stats.Fallbacks) when
// the kernel refuses UDP_SEGMENT or UDP_GRO or a buffer size. Run returns
// within 100 ms of its context's end and Close within 100 ms, idle or
// under load.
//
// There is no handshake or key management here: that is the VPN's (see
// examples/); the hooks are told each datagram's peer, an index into
// Config.Peers, to pick its keys by. It needs Linux and CAP_NET_ADMIN
// (for the TUN device); on other systems Open returns an error wrapping
// pipeline.ErrNotSupported. It imports pipeline, tun, udp and txqueue.
package tunnel
