/*
 * The part of the kernel's BPF interface (linux/bpf.h, and PACKET_HOST
 * of linux/if_packet.h) that gsoplane's programs use: types, the two
 * contexts as far as they read them, the map definitions, the return
 * codes and the helpers, by their numbers.
 */
#ifndef GSOPLANE_BPF_H
#define GSOPLANE_BPF_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;

#define SEC(name) __attribute__((section(name), used))
#define __always_inline inline __attribute__((always_inline))

/* A map definition in the ".maps" section, read from its BTF. */
#define __uint(name, val) int (*name)[val]
#define __type(name, val) __typeof__(val) *name

enum {
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LPM_TRIE = 11,
	BPF_MAP_TYPE_XSKMAP = 17,
};

#define BPF_F_NO_PREALLOC 1

/* The first fields of struct __sk_buff. */
struct __sk_buff {
	__u32 len;
	__u32 pkt_type;
	__u32 mark;
	__u32 queue_mapping;
	__u32 protocol; /* skb->protocol, in network order */
	__u32 vlan_present;
};

struct xdp_md {
	__u32 data;
	__u32 data_end;
	__u32 data_meta;
	__u32 ingress_ifindex;
	__u32 rx_queue_index;
	__u32 egress_ifindex;
};

enum { XDP_PASS = 2, XDP_REDIRECT = 4 };
enum { TCX_NEXT = -1, TCX_DROP = 2 };
enum { PACKET_HOST = 0 };

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_skb_load_bytes)(const struct __sk_buff *skb, __u32 offset, void *to, __u32 len) = (void *)26;
static long (*bpf_redirect_map)(void *map, __u64 key, __u64 flags) = (void *)51;
static __u64 (*bpf_xdp_get_buff_len)(struct xdp_md *ctx) = (void *)188;
static long (*bpf_xdp_load_bytes)(struct xdp_md *ctx, __u32 offset, void *buf, __u32 len) = (void *)189;

/* A 16-bit constant in network order, in the target's byte order. */
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define bpf_htons(x) ((__u16)__builtin_bswap16(x))
#else
#define bpf_htons(x) ((__u16)(x))
#endif

#endif
