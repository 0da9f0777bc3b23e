/*
 * What both ports' programs match a packet against: the redirect
 * prefixes, in two LPM tries the Go side fills (internal/prefix: Tries,
 * with keys as LPMKey encodes them), the header fields that hold a
 * packet's destination, and neighbour discovery, which is always the
 * host's.
 */
#ifndef GSOPLANE_REDIRECT_H
#define GSOPLANE_REDIRECT_H

#include "bpf.h"

#define ETH_HLEN 14
#define ETH_FRAME_LEN 1514 /* the longest frame of a 1500-byte MTU */
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define IPPROTO_ICMPV6 58

/* Offsets in a packet that starts with its Ethernet header. */
enum {
	ETH_PROTO = 12,
	IPV4_DST = ETH_HLEN + 16,
	IPV4_END = ETH_HLEN + 20,
	IPV6_NEXTHDR = ETH_HLEN + 6,
	IPV6_DST = ETH_HLEN + 24,
	IPV6_END = ETH_HLEN + 40, /* and the ICMPv6 type behind it */
};

/*
 * Keys of the tries (struct bpf_lpm_trie_key): a prefix length in host
 * order, then the address in network order. A lookup asks for the whole
 * address: LPM_LEN4 or LPM_LEN6. The verifier of Linux 6.1 refuses a
 * loader without CAP_PERFMON a store into part of a stack slot that
 * holds a spilled register ("attempt to corrupt spilled pointer on
 * stack"), and a register store at a slot's start is one, narrower or
 * not; a key initialised whole ({.prefixlen = 32}) is one 64-bit store.
 * So a key is written without a second store into a slot: its address
 * first (by a helper) and then its length, or in whole 64-bit words.
 */
struct lpm_key4 {
	__u32 prefixlen;
	__u32 addr;
};

struct lpm_key6 {
	__u32 prefixlen;
	__u32 addr[4];
};

#define LPM_LEN4 32
#define LPM_LEN6 128

/* The ports' limit of prefixes of one family; their loaders set it too. */
#define REDIRECT_MAX_PREFIXES 4096

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct lpm_key4);
	__type(value, __u8);
	__uint(max_entries, REDIRECT_MAX_PREFIXES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} gsop_redir4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct lpm_key6);
	__type(value, __u8);
	__uint(max_entries, REDIRECT_MAX_PREFIXES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} gsop_redir6 SEC(".maps");

/* redirected4 and redirected6 report whether a key's address is in a redirect prefix. */
static __always_inline int redirected4(const struct lpm_key4 *k)
{
	return bpf_map_lookup_elem(&gsop_redir4, k) != 0;
}

static __always_inline int redirected6(const struct lpm_key6 *k)
{
	return bpf_map_lookup_elem(&gsop_redir6, k) != 0;
}

/* is_nd reports whether an ICMPv6 type is neighbour discovery: router solicitation (133) to redirect (137). */
static __always_inline int is_nd(__u8 type)
{
	return type >= 133 && type <= 137;
}

#endif
