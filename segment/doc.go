// Package segment is gsoplane's software GSO: it decodes and validates the
// virtio-net header that a Linux TUN device (IFF_VNET_HDR) puts in front of
// every packet, and cuts TCP and UDP super-packets into wire-sized packets
// exactly as the Linux kernel's software segmentation would.
//
// Validate mirrors the kernel's virtio_net_hdr_to_skb (for tunnels
// virtio_net_hdr_tnl_to_skb) and the IP, TCP and UDP GSO handlers behind
// it, and says which rule a packet broke with an
// *Error that names the rule and matches ErrInvalid. It never trusts
// hdr_len. Like the kernel, it caps the segments of a USO super-packet
// (128) and of no other: a 64 KiB TSO super-packet at a small gso_size
// has hundreds of segments, or tens of thousands.
//
// Split writes the segments into caller-owned buffers and does not
// allocate; SplitFrom writes them a chunk at a time, for a caller with
// fewer buffers than a super-packet has segments:
//
//   - TSO (GSOTCPv4, GSOTCPv6): every segment carries the whole IP and TCP
//     header, options and IPv6 extension headers included; the sequence
//     number advances by the payload already sent; FIN and PSH stay on the
//     last segment, CWR on the first; IPv4 IDs count up by one per segment.
//   - USO (GSOUDPL4): every segment is its own UDP datagram with its own
//     length and checksum; IPv4 IDs count up by one per segment.
//   - UFO (GSOUDP): the UDP checksum is computed over the whole datagram,
//     which is then cut into IP fragments of gso_size bytes: IPv4 fragments
//     share one ID and carry MF and the offset, IPv6 fragments get a
//     Fragment header with one identification.
//   - GSONone with NEEDS_CSUM: the checksum is completed in place.
//   - UDP tunnels (GSOUDPTunnelIPv4 or GSOUDPTunnelIPv6 on TSO or USO, in
//     the 24-byte header of Linux 6.17, HeaderSizeTunnel): a VXLAN or
//     Geneve super-packet. The inner packet is cut as above; every segment
//     carries the outer IP and UDP headers and the tunnel header, with the
//     outer IPv4 ID counting up, the outer lengths and IPv4 header
//     checksum rewritten, and the outer UDP checksum computed when
//     FlagUDPTunnelCsum asks for it (else copied, normally zero), as the
//     kernel's skb_udp_tunnel_segment does. Its segments always carry
//     complete checksums, also from a Segmenter in Partial mode.
//
// A BIG TCP super-packet (longer than an IP length field can say: Linux's
// GSO and GRO make them up to 512 KiB, with the length field 0) is no
// input for Validate; Segmenter.ValidateBig takes one, as a packet socket
// hands it over, and Split cuts it into TSO super-packets of at most
// 64 KiB instead of into segments, for a device that takes no more.
//
// Checksums are completed in software in a single pass that copies and
// sums the payload (AVX2 on amd64). A Segmenter in Partial mode leaves the
// pseudo-header sum in TSO/USO segments instead, for sinks that offload
// checksums; Layout.SegmentHeader describes the result.
//
// A computed UDP checksum of zero is written as 0xffff. IPv4 total
// lengths, IPv6 payload lengths and IPv4 header checksums are rewritten.
// The kernel differential tests (kernel_linux_test.go,
// kernel_tunnel_linux_test.go) hold Split's segments, byte for byte, and
// Validate's refusals against the running kernel.
//
// GRO, the inverse of Split: a Coalescer takes a batch of IP packets
// received from the network and merges runs of TCP segments and UDP
// datagrams of one flow into super-packets with a virtio-net header,
// ready to be written into a TUN device, exactly as Linux 6.18's GRO
// would merge them (dev_gro_receive, inet_gro_receive, ipv6_gro_receive,
// tcp_gro_receive, udp_gro_receive_segment). The rules, and where it is
// stricter than the kernel, are listed on Coalescer; the kernel
// differential test (gro_kernel_linux_test.go) holds them against the
// running kernel. It never reorders a flow and does not allocate.
//
// Packets from the wire have no virtio-net header: Segmenter.ForWire
// builds the header Split needs for a packet that must leave through a
// smaller MTU, from its own IP and TCP/UDP headers (TSO to the lesser of
// the flow's MSS and the MTU, UFO for IPv4 UDP without DF), and says which
// packets a router must refuse instead (ErrTooBig: ICMP fragmentation
// needed or packet too big) and whether the packet's checksum is complete,
// partial or bad. ParseTCP reads what a SYN or SYN-ACK announces and what
// a RST ends, for a table that remembers each flow's MSS (the pipeline's
// MSSTable); Clamp lowers the MSS option of a SYN to fit an MTU.
//
// The package is pure Go with no system calls and builds on any OS.
package segment
