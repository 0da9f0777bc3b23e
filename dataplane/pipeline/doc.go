// Package pipeline is gsoplane's forwarding pipeline, independent of any
// device: the Forwarder moves super-packets from a frame.Source through
// validation, admission by a txqueue.Budget, segmentation straight into a
// frame.Sink's frames, an optional per-segment Hook and a txqueue.Queue to
// the Sink, whose in-order completions release the charges; while the
// budget is full the forwarder does not read its source. A super-packet
// of more than frame.BurstSegments segments (TSO at a small MSS) goes
// through a chunk of BurstSegments at a time, each admitted on its own.
// The ReturnPath moves packets the other way, from a port's
// frame.Receiver into a frame.Writer such as a TUN queue. Each of their loops has a Pulse, which tells from outside a
// loop that works or waits for work from one that is wedged, for a
// watchdog.
//
// The interfaces, the frames and the drop reasons are package frame's,
// the contract the ports implement: dataplane/tun (a Source and a
// Writer), dataplane/xsk (a Sink and a Receiver on AF_XDP),
// dataplane/afpacket (the same on AF_PACKET, with offloads),
// dataplane/udp (a Sink for VPNs). A VPN embeds the pipeline with its own
// Source or Sink; the package example shows one in memory.
//
// A packet the forwarder cannot send, it answers as a router does, through
// a frame.Replier: dataplane/icmp's writes fragmentation needed or packet
// too big (a packet over ForwarderConfig.MTU) and host unreachable (a
// next hop a port's sink could not resolve) back into the TUN device,
// within Linux's rate limits, and time exceeded (a packet from a wire
// whose TTL ran out).
//
// A WireSource takes packets from a wire instead, without a virtio-net
// header, takes one off each one's TTL (hop limit) as a router does and
// gives it the header that cuts it to the egress MTU, or with which an
// OffloadSink's NIC cuts it whole, with the segment size the receiving
// kernel gave it where a HeaderReceiver says; an MSSTable, shared by a
// gateway's two directions, remembers the MSS each TCP flow's handshake
// announced, so that no segment exceeds it. A FanIn makes one Receiver
// (and HeaderReceiver) of several, for a forwarder that takes the packets
// of more receive queues than its egress port has transmit queues.
//
// The package is pure Go with no system calls and builds on every OS. It
// imports only frame, segment, txqueue and internal/iphdr; the gateway (package dataplane) and dataplane/tunnel
// import it, the ports never do.
package pipeline
