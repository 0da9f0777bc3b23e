// Package tun is gsoplane's TUN port: Open creates or attaches a Linux
// TUN device with a virtio-net header in front of every packet
// (IFF_VNET_HDR), optionally with several queues, and enables the
// offloads (TUNSETOFFLOAD) that make the kernel hand over TCP and UDP
// super-packets instead of segmenting them itself — on Linux 6.17 and
// later also VXLAN and Geneve super-packets, with the 24-byte virtio-net
// header that carries their tunnel offsets (older kernels segment tunnel
// traffic before the TUN, and Device.Offloads says so). Queue.Read and
// Queue.Write move batches of packets, virtio-net header first, through
// caller-owned buffers without allocating: a Queue is a frame.Source
// and a frame.Writer.
//
// It needs Linux and CAP_NET_ADMIN, and works in the network namespace of
// the calling thread. On other systems Open returns an error. It imports
// segment and frame only; the gateway (package dataplane) and
// embedders import it.
package tun
