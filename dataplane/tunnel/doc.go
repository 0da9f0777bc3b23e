// Package tunnel is a VPN tunnel's data path, fast by default: a TUN
// device with offloads on one side, a UDP socket on the other, per TUN
// queue a forwarder (TUN → segmentation → UDP_SEGMENT datagrams) and one
// return path (UDP_GRO datagrams → GRO → TUN), with the VPN's framing
// and AEAD plugged in as batch hooks (Config.Seal, Config.Open) that work
// in place:
//
//	TUN → Forwarder → udp.Sink (Seal) ==== UDP ==== udp.Receiver (Open) → ReturnPath (GRO) → TUN
//
// With several queues (Config.Queues) each flow stays on one queue end
// to end, in order, as the kernel's own multi-queue paths keep it. The
// socket has one reader, the return path, which opens the datagrams in
// the order the socket took them and writes each inner packet into the
// TUN queue its flow (addresses, protocol, ports) hashes to. The TUN
// device reads a flow's packets the other way from the queue it last
// wrote that flow's packets to (its flow steering; a flow nothing came
// back for yet, from a queue its own hash picks), so one forwarder
// reads, seals and sends the flow. The queues spread the flows over
// forwarders; the receive side is one goroutine, as the kernel gives one
// peer's datagrams (one address and port pair) to one socket anyway.
// Two things still reorder, neither counted (the tunnel does not see the
// device's steering, and only Open knows the VPN's counters): a flow the
// device moves to another queue (its first packet back, or back after
// its steering entry expired, a few seconds idle) may send the packets
// still queued on the old queue after the new one's; and the datagrams
// of different flows to one peer interleave across the queues, so that
// the counters a Seal hook takes per peer reach the peer out of order by
// as many datagrams as the other queues send while one seals a batch and
// hands it to the kernel (up to 650 in TestTunnelQueuesOrder; more while
// its goroutine waits for a CPU): the VPN's replay window must be that
// wide (WireGuard's is 8192; examples/vpn runs one queue).
//
// A Tunnel has one peer (Config.Peer, the socket connected to it) or
// several (Config.Peers, an unconnected socket), routed as WireGuard's
// cryptokey routing does: each inner packet goes to the peer whose
// allowed prefix matches its destination longest (none: dropped, counted
// in Stats.Send.NoPeer); a datagram is the peer's whose endpoint it comes
// from (none: dropped, Stats.Receive.UnknownPeer), and its inner packet
// is handed on only if its source routes back to that peer (else
// Stats.Receive.NotAllowed). PeerStats counts each peer's traffic. The
// peers may change while the tunnel runs: SetPeers replaces them,
// SetEndpoint moves one, and with Config.Roam the return path hands Open
// the datagrams from unknown senders and moves a peer's endpoint to
// where the datagrams Open names it for come from (roaming).
//
// Besides the data path, the VPN's own messages (handshakes, cookie
// replies, keepalives) go out through Send, on the same socket, from any
// goroutine, and come in through Config.OnControl: the datagrams Open
// marks udp.Control, and, with Roam, an unknown sender's that Open names
// no peer for. Seal may pad: it sets each datagram's length within its
// frame, and the sink coalesces runs of equal sealed lengths.
//
// Open derives the inner MTU from the path MTU to the peer (to each peer,
// the smallest) and the encapsulation's overhead (outer IPv4 or IPv6 and
// UDP headers, the hook's headroom and tailroom), sizes the socket
// buffers for the batches, and warns (and counts, Stats.Fallbacks) when
// the kernel refuses UDP_SEGMENT or UDP_GRO or a buffer size. Run returns
// within 100 ms of its context's end or of Close, idle or under load.
// Close then takes longer when Open created the TUN device: closing its
// last queue makes the kernel delete the device before close(2) returns,
// under the lock every network configuration change on the host takes
// (RTNL) and after RCU grace periods: 8–60 ms here, and up to 400 ms
// while other processes created and deleted links and namespaces.
//
// There is no handshake or key management here: that is the VPN's (see
// examples/), on Send and OnControl; the hooks are told each datagram's peer, an index into
// Config.Peers, to pick its keys by. It needs Linux and CAP_NET_ADMIN
// (for the TUN device); on other systems Open returns an error wrapping
// frame.ErrNotSupported. It imports pipeline, tun, udp and txqueue
// (and internal/iphdr, to hash flows).
package tunnel
