// Package dataplane is gsoplane's Linux I/O and the forwarding pipeline:
// the ports that move packets between the kernel and the segment and
// txqueue packages.
//
// TUN port: OpenTUN creates or attaches a TUN device with a virtio-net
// header (IFF_VNET_HDR), optionally with several queues, and enables the
// offloads (TUNSETOFFLOAD) that make the kernel hand over TCP and UDP
// super-packets instead of segmenting them itself. TUNQueue.Read and
// TUNQueue.Write move batches of packets, virtio-net header first, through
// caller-owned buffers without allocating.
//
// The package needs Linux and CAP_NET_ADMIN. It does not enter network
// namespaces itself: callers open ports from a goroutine locked to a
// thread in the namespace they want.
package dataplane
