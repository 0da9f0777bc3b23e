// Package nexthop resolves the link-layer (MAC) address of the next hop
// of packets leaving one Ethernet interface, by asking the kernel, and
// never makes its caller wait: the kernel's routing table says which
// neighbour a destination goes through, its neighbour table (ARP, IPv6
// ND) says that neighbour's MAC address, and the kernel itself resolves
// an unknown neighbour when asked to (an RTM_NEWNEIGH with NTF_USE makes
// it probe). No static entries are needed.
//
// Lookup answers from a bounded cache: Resolved with the MAC address,
// Pending while a resolution is under way (the caller queues the frame,
// see dataplane/internal/egress), or Failed when the kernel could not resolve the next hop
// recently (the caller drops the frame and may answer the sender with
// ICMP host unreachable, see internal/icmperr). A miss starts a
// resolution in the background and returns at once. The resolver learns
// the outcome, and every later change (a new MAC address, a failure, a
// deleted neighbour), from the kernel's neighbour notifications
// (RTNLGRP_NEIGH), not by polling; Changed tells the caller when to look
// again at the frames it queued.
//
// The cache is bounded (Config.MaxEntries, clock eviction that spares the
// destinations in use) and keeps copies, never netlink buffers. A
// resolved entry follows the kernel's notifications, and while in use is
// re-validated at most every Config.Revalidate: its route is asked again
// and its neighbour marked used (NTF_USE), so that the kernel keeps
// verifying it as if it carried the traffic; if its neighbour fails, it
// is resolved again at once, as the kernel does for the next packet; if
// the kernel deletes its neighbour (as it deletes a link's neighbours
// when the link goes down), it is resolved again too, and Lookup answers
// its last MAC address meanwhile, so that frames to it are not queued on
// a link that is going down (the sink holds them until it is up). A
// failed resolution is remembered for Config.FailedTTL. At most
// Config.MaxPending resolutions are under way, run one at a time by a
// single worker goroutine: a few netlink requests each, the waiting is
// the kernel's. Lookup only takes a mutex that the resolver's goroutines
// hold for microseconds, never across a system call.
//
// What the kernel does, and so what the resolver reports (Linux 6.18,
// net/core/neighbour.c): a neighbour being resolved is NUD_INCOMPLETE and
// is probed mcast_solicit times (3), retrans_time (1 s) apart
// (__neigh_event_send, neigh_timer_handler, neigh_max_probes); then it is
// NUD_FAILED, the packets it queued are answered with host unreachable
// (neigh_invalidate, arp_error_report, ndisc_error_report), and the next
// packet starts a new resolution at once: the kernel keeps no hold-down.
// The resolver keeps a failure for Config.FailedTTL (1 s by default, one
// retrans_time) so that a flood towards a dead host costs one resolution
// per FailedTTL plus 3 s instead of back-to-back ones. Periodic garbage
// collection deletes failed and long-unused neighbours (neigh_periodic_work,
// gc_stale_time 60 s, once the table holds gc_thresh1 entries), and
// neigh_alloc refuses new ones beyond gc_thresh3 (1024) per family: the
// resolver's bounded pending set keeps below that.
//
// It needs Linux and CAP_NET_ADMIN in the interface's network namespace
// (New runs there); elsewhere New fails. The AF_XDP sink uses it.
package nexthop
