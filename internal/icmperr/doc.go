// Package icmperr builds the ICMP and ICMPv6 errors a router sends back
// to the source of a packet it cannot forward, and limits their rate the
// way Linux does. The gateway answers with them through the TUN device
// (or the host's stack): host unreachable when a next hop does not
// resolve, fragmentation needed (IPv4, DF set) or packet too big (IPv6)
// when a packet exceeds the egress MTU, time exceeded when a packet it
// forwards between two wires arrives with a TTL (hop limit) of 1 or less.
//
// Build writes a complete IPv4 or IPv6 packet, checksums included, into a
// caller's buffer, quoting as much of the original packet as the RFCs
// allow, and refuses (returns 0) where a router must stay silent: an ICMP
// error, a fragment other than the first, a multicast or broadcast
// destination, a source that is not a single host. Limiter is the
// kernel's pair of token buckets: the global icmp_msgs_per_sec bucket and
// a bounded table of per-destination buckets (icmp_ratelimit, ratemask).
//
// The reference is Linux 6.18: net/ipv4/icmp.c (__icmp_send,
// icmp_global_allow, icmpv4_xrlim_allow), net/ipv6/icmp.c (icmp6_send,
// is_ineligible, icmpv6_xrlim_allow) and net/ipv4/inetpeer.c
// (inet_peer_xrlim_allow). The package is pure Go, builds on every OS and
// allocates nothing per packet.
package icmperr
