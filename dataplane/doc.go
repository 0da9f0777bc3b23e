// Package dataplane is gsoplane's Linux I/O and the forwarding pipeline:
// the ports that move packets between the kernel and the segment and
// txqueue packages, and the loops that connect them.
//
// TUN port: OpenTUN creates or attaches a TUN device with a virtio-net
// header (IFF_VNET_HDR), optionally with several queues, and enables the
// offloads (TUNSETOFFLOAD) that make the kernel hand over TCP and UDP
// super-packets instead of segmenting them itself. TUNQueue.Read and
// TUNQueue.Write move batches of packets, virtio-net header first, through
// caller-owned buffers without allocating.
//
// AF_XDP port: OpenXDP binds one AF_XDP socket (XSK) to every RX queue of
// a NIC, each with its own UMEM and rings, and attaches an XDP program
// that redirects to them only IP packets for configured prefixes; ARP, ND
// and everything else, traffic for the host included, go on to the
// kernel. An XDP program someone else attached is an error, never
// replaced.
//
// Forwarder: from a Source (a TUN queue) through validation, admission by
// a txqueue.Budget, segmentation straight into a Sink's frames, an
// optional per-segment Hook and a txqueue.Queue to the Sink, whose
// in-order completions release the charges. While the budget is full the
// forwarder does not read its source. XSKSink transmits on an AF_XDP
// socket, filling in Ethernet headers from the kernel's routes and
// neighbours (resolved by the kernel when needed); UDPSink sends segments
// as UDP payloads, as a VPN sends its tunnel traffic. ReturnPath writes
// packets an XSK received into a TUN queue. OpenGateway wires all of it
// between a TUN device and a NIC.
//
// The package needs Linux, CAP_NET_ADMIN and, for AF_XDP, CAP_NET_RAW and
// CAP_BPF. It does not enter network namespaces itself: callers open ports
// from a goroutine locked to a thread in the namespace they want. The
// Forwarder and its Source and Sink interfaces are plain Go.
package dataplane
