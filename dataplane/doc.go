// Package dataplane is gsoplane's gateway: OpenGateway wires a TUN device
// (or a Host the caller supplies) and a port on a NIC, AF_XDP or
// AF_PACKET, together with the pipeline. Super-packets read from the TUN
// are validated, charged to a send budget, cut into the port's frames
// (or, on AF_PACKET with a NIC that segments, handed over whole) and
// sent; packets for the routed prefixes arriving on the NIC are written
// into the TUN. The gateway follows the NIC: a link that goes down holds
// the frames, an MTU change moves the TUN device's MTU with it, a MAC
// address change moves the frames' source and the XDP program's
// address, a detached program is attached again; what it cannot forward
// it answers with ICMP, as a router would.
//
// The MTU the gateway sends is the NIC's, or less where the port cannot
// send a frame that long: an AF_XDP port sends each packet in one UMEM
// frame, at most 4082 bytes of IP (4096 less the Ethernet header; 4058
// where the kernel has AF_XDP TX metadata, Linux 6.11, which takes 24
// bytes of each frame for checksum offload) in
// generic and native mode alike, and an AF_PACKET port in one of its
// small frames, sized from the NIC's MTU at open. Segments are held to
// that MTU, the TUN device's MTU is kept within it (a larger
// TUNOptions.MTU is lowered, logged once), and a larger packet is
// answered with ICMP fragmentation needed or packet too big carrying it
// (NICStats.SendMTU).
//
// The parts live in packages of their own, which embedders can use
// without the gateway:
//
//	dataplane/frame     Source, Sink, Frame, Receiver, Writer, the drop
//	                    reasons: the contract the ports implement
//	dataplane/pipeline  Hook, Forwarder, ReturnPath, WireSource, Stats:
//	                    the forwarding engine, pure Go, any OS
//	dataplane/icmp      the Replier: ICMP errors for what the gateway drops
//	dataplane/tun       the TUN port (IFF_VNET_HDR, multi-queue, offloads)
//	dataplane/xsk       the AF_XDP port: sockets, rings, the XDP program,
//	                    its Sink and Receiver
//	dataplane/afpacket  the AF_PACKET port: PACKET_VNET_HDR sockets, a
//	                    fanout group, an ingress filter (tcx, or cls_bpf
//	                    on a clsact qdisc), its Sink
//	                    (TSO/USO and checksum offload) and Receiver
//	dataplane/udp       the VPN halves: a Sink that sends with UDP_SEGMENT
//
// Imports flow one way: dataplane → pipeline and the ports → frame →
// segment; pipeline → txqueue.
// No port imports another. The gateway needs Linux, CAP_NET_ADMIN,
// CAP_BPF and CAP_NET_RAW; elsewhere OpenGateway returns an error
// wrapping ErrNotSupported.
package dataplane
