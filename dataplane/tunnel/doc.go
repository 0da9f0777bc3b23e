// Package tunnel is a point-to-point VPN tunnel's data path, fast by
// default: a TUN device with offloads on one side, a UDP socket connected
// to the peer on the other, and per TUN queue a forwarder (TUN →
// segmentation → UDP_SEGMENT datagrams) and a return path (UDP_GRO
// datagrams → GRO → TUN), with the VPN's framing and AEAD plugged in as
// batch hooks (Config.Seal, Config.Open) that work in place:
//
//	TUN → Forwarder → udp.Sink (Seal) ==== UDP ==== udp.Receiver (Open) → ReturnPath (GRO) → TUN
//
// Open derives the inner MTU from the path MTU to the peer and the
// encapsulation's overhead (outer IPv4 or IPv6 and UDP headers, the
// hook's headroom and tailroom), sizes the socket buffers for the
// batches, and warns (and counts, Stats.Fallbacks) when the kernel
// refuses UDP_SEGMENT or UDP_GRO or a buffer size. Run returns within
// 100 ms of its context's end and Close within 100 ms, idle or under
// load.
//
// A Tunnel has one peer: a VPN with several peers opens a Tunnel per peer
// (each with its own TUN device), or builds on dataplane/udp and
// dataplane/pipeline directly. There is no handshake or key management
// here: that is the VPN's (see examples/). It needs Linux and
// CAP_NET_ADMIN (for the TUN device); on other systems Open returns an
// error wrapping pipeline.ErrNotSupported. It imports pipeline, tun, udp
// and txqueue.
package tunnel
