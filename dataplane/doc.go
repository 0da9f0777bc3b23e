// Package dataplane is gsoplane's gateway: OpenGateway wires a TUN device
// (or a Host the caller supplies) and an AF_XDP port on a NIC together
// with the pipeline. Super-packets read from the TUN are validated,
// charged to a send budget, cut into AF_XDP frames and sent; packets for
// the routed prefixes arriving on the NIC are written into the TUN.
//
// The parts live in packages of their own, which embedders can use
// without the gateway:
//
//	dataplane/pipeline  Source, Sink, Frame, Hook, Forwarder, ReturnPath,
//	                    Stats: the forwarding pipeline, pure Go, any OS
//	dataplane/tun       the TUN port (IFF_VNET_HDR, multi-queue, offloads)
//	dataplane/xsk       the AF_XDP port: sockets, rings, the XDP program,
//	                    its Sink and Receiver
//	dataplane/udp       the VPN halves: a Sink that sends with UDP_SEGMENT
//
// Imports flow one way: dataplane → ports → pipeline → segment, txqueue.
// No port imports another. The gateway needs Linux, CAP_NET_ADMIN,
// CAP_BPF and CAP_NET_RAW; elsewhere OpenGateway returns an error.
package dataplane
