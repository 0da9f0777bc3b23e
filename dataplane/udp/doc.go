// Package udp holds the two halves of a VPN's tunnel for embedders of
// the pipeline. Sink, a frame.Sink, sends every segment as the payload
// of a UDP datagram on a connected socket (or to several peers, below),
// with sendmmsg(2) and UDP_SEGMENT, the way WireGuard sends its tunnel
// traffic. Receiver, a
// frame.Receiver, takes datagrams with recvmmsg(2) and UDP_GRO and
// hands out the inner packets, which a pipeline.ReturnPath with GRO merges
// again and writes into a TUN device:
//
//	TUN → Forwarder → Sink ==== UDP ==== Receiver → ReturnPath (GRO) → TUN
//
// A VPN's framing and crypto plug in as batch hooks that work in place:
// SinkConfig.Seal seals a batch of datagrams (Headroom bytes of header
// room, the packet, Tailroom bytes of trailer room) before sendmmsg,
// ReceiverConfig.Open opens a batch after recvmmsg and gives each a
// Verdict, the drops counted by reason. Both are told each datagram's
// peer, to pick its keys by. Seal may set a datagram's length within its
// frame (padding); Open may mark a datagram Control, the tunnel's own
// message, which goes to ReceiverConfig.OnControl with its source. The
// Receiver is a frame.ReadDeadliner,
// so a ReturnPath stops promptly on cancel.
//
// A tunnel with several peers gives both halves one Peers table, on an
// unconnected socket: WireGuard's cryptokey routing. The sink sends each
// packet to the peer whose allowed prefix matches its inner destination
// longest, and drops one that matches none; the receiver drops a
// datagram from an address that is no peer's endpoint, and an opened
// packet whose inner source does not route back to the peer it came
// from. The table counts each peer's traffic (Peers.Stats). It may
// change while they run (Peers.Set, Peers.SetEndpoint), swapped whole
// and loaded once per batch; with ReceiverConfig.Roam a datagram from an
// unknown address goes to Open, which may name its peer, and the peer's
// endpoint follows it.
//
// When the kernel refuses a UDP_SEGMENT message (EMSGSIZE: over the path
// MTU to its peer), the sink sends its datagrams again one per message,
// and that peer's datagrams of that size or larger for a second, then
// tries UDP_SEGMENT again for the peer (a re-probe): the other peers keep
// it, and the peer gets it back within a second of its path MTU
// recovering. SinkStats counts the refusals (MsgSize, GSORefused) and
// the re-probes (Reprobes), PeerStats each peer's.
// dataplane/tunnel wires both halves, for one peer or several, with fast
// defaults.
//
// It needs Linux (UDP_SEGMENT since 4.18, UDP_GRO since 5.0); on other
// systems NewSink and NewReceiver return errors. It imports frame and,
// for the receiver's recvmmsg(2) batches, internal/mmsg; internal/iphdr
// reads the inner addresses.
package udp
