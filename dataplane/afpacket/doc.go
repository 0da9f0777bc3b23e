// Package afpacket is gsoplane's AF_PACKET port: the fallback where XDP is
// missing, and the port that hands whole super-packets to a NIC that
// segments them itself. It has the AF_XDP port's shape (Open, Port,
// Socket, NewSink, Socket.Receiver), so the gateway can use one or the
// other.
//
// Open opens one AF_PACKET SOCK_RAW socket per NIC RX queue, each bound to
// the NIC with ETH_P_ALL, with a 10-byte virtio-net header in front of
// every packet both ways (PACKET_VNET_HDR) and transmitting straight to
// the driver (PACKET_QDISC_BYPASS), all in one PACKET_FANOUT_HASH group,
// so that a flow always reaches the same socket. The group's ID is the
// kernel's choice (PACKET_FANOUT_FLAG_UNIQUEID on the first socket, read
// back for the others): fanout IDs are per network namespace and a group
// with a guessed ID, such as one derived from the pid and the ifindex,
// could be another process's, whose sockets would then silently share
// our packets; asking the kernel makes a collision impossible. The group
// ignores outgoing packets (PACKET_FANOUT_FLAG_IGNORE_OUTGOING).
//
// Taking packets from the host: a packet socket is a tap, it receives a
// copy and the host's stack still handles the packet. For the redirected
// prefixes (Config.Redirect) the port therefore attaches an ingress eBPF
// program that drops exactly the packets its sockets take: in
// __netif_receive_skb_core (net/core/dev.c) the taps on ptype_all and on
// the device's ptype_all are delivered first, and only after them, at
// skip_taps, sch_handle_ingress runs tc ingress (delivering the last
// pending tap before it runs the programs), so a drop there removes the
// packet from the host's stack after the sockets have their copy;
// TestReceiveRedirect shows it on Linux 6.18 in both ways of attaching
// (every datagram reaches a socket, none the host's listener or its
// forwarding). An XDP drop would come before the skb exists and hide the
// packet from the sockets too, and a socket bound to ETH_P_IP instead of
// ETH_P_ALL would be served after tc ingress.
//
// The program is attached one of two ways (Config.HostFilter). With tcx
// (Linux 6.6) it hangs on a BPF link ahead of every other tcx program and
// returns TCX_NEXT for everything it does not drop; when the process dies
// the link dies with its file descriptor, so a killed gateway leaves
// nothing attached. Before tcx it is a direct-action cls_bpf filter
// (named gsoplane-afpacket) on the ingress hook of the interface's clsact
// qdisc, or of an ingress qdisc already there, at a priority ahead of the
// filters there; its TCX_DROP and TCX_NEXT are cls_bpf's TC_ACT_SHOT and
// TC_ACT_UNSPEC (the next filter decides). The port adds the clsact
// qdisc only when the interface has none, and Close deletes its own
// filter, by priority, handle and program ID, and the qdisc only if the
// port added it and no other filter is on it: another's qdisc and
// filters stay as they were (TestClsactLeavesOthers). A filter holds no
// file descriptor, so a process killed with SIGKILL leaves it, and the
// qdisc it added, behind; the next port to attach through cls_bpf finds
// it (its name, another program), deletes it before adding its own and
// takes its clsact qdisc as its own (Port.Leftovers): two ports on one
// interface are not supported. HostFilterAuto, the default, takes tcx and
// falls back to cls_bpf where the kernel has no tcx (the tcx attach says
// ebpf.ErrNotSupported); Port.HostFilter says which and why. Either way
// a program detached from outside (bpftool link detach, tc filter del)
// shows in Port.Attached and Port.Reattach puts it back.
//
// A socket filter (SO_ATTACH_BPF), the same test on the same LPM tries,
// keeps everything else out of the sockets: the test is a frame for this
// host (PACKET_HOST) without a VLAN tag in the metadata, IPv4 or IPv6,
// not IPv6 neighbour discovery, to a redirected destination. ARP, ND,
// traffic for the host's own addresses and all other traffic go to the
// host only.
//
// TX: NewSink returns a frame.OffloadSink. Offload decides per
// super-packet from what the NIC advertises (ethtool features, gso
// limits) and a GSOMode: whole super-packets the NIC segments, segments
// with partial checksums it completes, or complete segments. Transmit
// sends a batch with sendmmsg(2), a frame is complete when sendmmsg
// returned (the kernel copied it), and the socket's send buffer, sized
// from the sink's frames, stops the sink (EAGAIN, then a wait through
// the Go runtime poller) while the kernel still holds that much truesize
// of its packets: backpressure on top of the forwarder's budget. The
// Ethernet destination comes from dataplane/internal/nexthop. In the modes that
// hand super-packets whole (auto, offload) the sink lends its large
// frames to the forwarder, which reads the TUN's super-packets straight
// into them (frame.OffloadSink): a super-packet the NIC segments is
// copied twice on its way, by the TUN read and by sendmmsg, and not a
// third time between them; partial and full lend none.
//
// RX: a socket's Receiver takes up to 64 frames per recvmmsg(2) and hands
// them out behind the kernel's virtio-net header: with GRO on the NIC
// they are the kernel's super-packets (a GSO type and a partial
// checksum), which the return path writes into the TUN as they are, from
// the receive buffer (the TUN's virtio-net header written over the end
// of the Ethernet header): copied by recvmmsg and by the TUN write, never
// in between. A BIG TCP super-packet (longer than 64 KiB, its IP length
// field 0) is received whole too: the receive buffers are as long as the
// device's GRO limits and tso_max_size (which a veth shares with the peer
// whose GSO packets it hands over whole) allow, up to the kernel's
// 512 KiB; the return path cuts it into TSO super-packets a TUN write
// takes (segment.Segmenter.ValidateBig), a copy more.
//
// Mechanisms, measured on Linux 6.18 over the reference topology's veth
// (2 vCPUs shared with other work, so ranges over 3 runs or more; CPU
// time is the process's, user and system, which other load disturbs
// least; the benchmarks in mechanism_linux_test.go):
//
//	TX, frames of 60 / 1514 bytes:
//	  sendmmsg, 64 per call     0.75-1.08 / 1.01-1.36 Mpps, 0.99-1.32 / 0.84-1.11 µs CPU per frame
//	  TPACKET_V2 TX ring        0.91-1.15 / 0.91-1.06 Mpps, 0.91-1.13 / 0.95-1.14 µs CPU per frame
//	RX flood of 60 / 1514-byte frames from B (CPU includes the generator, about 1 µs a frame):
//	  recvmmsg, up to 64        0.49-0.54 / 0.26-0.45 Mpps, 3.0-3.3 / 3.2-3.5 µs CPU per frame
//	  TPACKET_V3 RX ring        0.67-0.73 / 0.56-0.67 Mpps, 1.4-1.7 / 1.9-2.2 µs CPU per frame
//	RX latency of a lone packet, p50 / p99:
//	  recvmmsg                  33-86 µs / 0.2-2 ms
//	  TPACKET_V3 (1 ms blocks)  528-543 µs / 1.0-1.1 ms
//	TCP through TUN, forwarder, port and GRO on the NIC, A to B / B to A
//	(throughput in a quiet moment; CPU over 12 runs, most of them loaded):
//	  recvmmsg                  2.4-4.0 / 1.4-3.1 Gbit/s, 2.9-3.9 / 3.5-4.6 ns CPU per kB
//	  TPACKET_V3 (1 ms blocks)  2.2-2.9 / 2.2-2.4 Gbit/s, 3.3-4.2 / 3.4-4.8 ns CPU per kB
//	TX of a whole 64 KiB TCP super-packet (45 segments), CPU per super-packet
//	(7 runs, the machine loaded; BenchmarkTXSuper; ring / sendmmsg of the
//	same run 1.5-3.1, median 2.1):
//	  sendmmsg, from user memory           2.0-3.8 µs
//	  TPACKET_V2 TX ring, packet in place  4.2-7.6 µs
//	  TX ring, copied into the slot first  5.8-7.9 µs
//
// TX: the ring is no faster (within the noise either way; the veth copies
// its pages anyway), it has one frame size per ring (whole super-packets
// would need 64 KiB slots, or a second socket and a merged completion
// order) and completes asynchronously: sendmmsg is kept. For whole
// super-packets the ring would spare the kernel its copy (tpacket_snd
// copies only hdr_len bytes and hangs the slot's pages on the skb as
// fragments, honouring the virtio-net header; the slot comes back,
// TP_STATUS_AVAILABLE, in the skb's destructor), but a veth, the peer of
// every container, copies those fragments itself: the skb carries user
// pages (SKBFL_ZEROCOPY_FRAG) and ____dev_forward_skb orphans them
// (skb_orphan_frags, skb_copy_ubufs) into freshly allocated pages, one
// by one, which costs more than sendmmsg's copy into its skb (perf, 40000
// super-packets: 4.1 µs each in skb_copy_ubufs under veth_xmit, 2.5 µs of
// it in memcpy, against 1.1 µs in _copy_from_iter for sendmmsg). Only a
// NIC that DMAs from the slot would gain, and there is none here to
// measure it on. MSG_ZEROCOPY is no alternative: the kernel refuses
// SO_ZEROCOPY on a packet socket (EOPNOTSUPP: sk_setsockopt allows TCP,
// UDP and RDS) and packet_snd copies whatever the flags
// (TestNoZeroCopySend).
//
// RX: the V3 ring costs half the CPU per small packet under a flood,
// because the kernel wakes the reader once per block instead of once per
// packet and skips the skb clone, but a block is only handed over when
// full or after its timeout (1 ms at least), which puts half a
// millisecond on every lone packet, ACKs included; with GRO the per-packet cost is spread over up
// to 64 KiB, and TCP through the gateway is faster A to B (its ACKs come
// back sooner) and as fast within the noise B to A, at no more CPU per
// byte, with recvmmsg: recvmmsg is kept.
//
// What the kernel does that callers should know:
//   - csum_start of a packet socket's virtio-net header counts from the
//     start of the Ethernet frame (virtio_net_hdr_to_skb sees skb->data at
//     the MAC header); the sink adds 14 and the receiver subtracts it.
//   - A qdisc-bypassing packet socket gets no software GSO:
//     __dev_direct_xmit drops the segment list validate_xmit_skb makes
//     for a super-packet the NIC cannot segment (tx_dropped) and sendmsg
//     says ENOBUFS, as for a full device queue. So a super-packet goes
//     whole only to a NIC that segments its kind within its gso limits,
//     and a sink whose NIC stops segmenting (ethtool -K) notices from the
//     refusals and cuts super-packets itself from then on (Sink.GSOOff).
//   - recvmmsg stops at a packet the kernel cannot give a virtio-net
//     header (a GSO type virtio has no name for), drops it and reports
//     EINVAL on the next call; the receiver counts it and goes on.
//   - PACKET_STATISTICS clears on read; Socket.Stats accumulates it.
//   - On a veth the send buffer never fills: each skb's charge is gone
//     within the send that made it (veth_xmit hands it to the peer there
//     and then), so even 16 KiB of buffer takes batches of 64 × 1.5 KiB
//     without EAGAIN. The socket holds the sink back on a NIC that frees
//     its skbs at TX completion.
//
// By what it uses, it needs Linux 4.20 or later: PACKET_IGNORE_OUTGOING
// (4.20) is the newest thing it cannot do without; PACKET_VNET_HDR,
// PACKET_QDISC_BYPASS (3.14), fanout with a group ID the kernel picks,
// eBPF socket filters, LPM tries (4.11), direct-action cls_bpf (4.4) and
// the clsact qdisc (4.5) are older. What is newer it uses
// where the kernel has it: tcx (6.6; cls_bpf before), the fanout group's
// PACKET_FANOUT_FLAG_IGNORE_OUTGOING (a kernel that does not know the
// flag ignores it, and the socket filter drops the outgoing packets the
// group then sees, which are not PACKET_HOST), and USO through the
// virtio-net header (6.2; before, the kernel refuses a UDP super-packet
// and the sink counts it as Refused, but the gateway's TUN device gives
// none there, its USO offload falling back). It is tested on Linux 6.18
// only, with tcx and with cls_bpf, and the fallback with a process whose
// tcx attach fails as on an older kernel (TestHostFilterFallback). It
// needs CAP_NET_RAW for the sockets and CAP_NET_ADMIN and CAP_BPF for the
// programs (SO_SNDBUFFORCE and SO_RCVBUFFORCE need CAP_NET_ADMIN too),
// and works in the network namespace of the calling thread. On other
// systems Open returns an error. It imports frame, segment and
// internal packages; the gateway (package dataplane) and embedders import
// it. It uses no package unsafe of its own: its sendmmsg(2) and
// recvmmsg(2) batches are internal/mmsg's.
package afpacket
