/*
 * The XDP program of the AF_XDP port. What it takes and what it passes
 * is the file comment of prog_linux.go; this is how.
 *
 * Two programs: gsop_xsk_redir, for frames that are whole in their
 * linear part, and gsop_xsk_frags, loaded with BPF_F_XDP_HAS_FRAGS,
 * which reads every frame's length with bpf_xdp_get_buff_len (the other
 * only that of a frame longer than a 1500-byte MTU's) and parses a copy
 * of the headers on the stack when the linear part ends before they do.
 *
 * They load where the loader has only CAP_NET_ADMIN and CAP_BPF (no
 * CAP_PERFMON), as on older verifiers: every buffer and key passed to a
 * helper is written in full first, only constants are added to packet
 * pointers, and the stack is read only in aligned loads.
 */
#include "bpf.h"
#include "redirect.h"

/*
 * Set at load: the NIC's MAC address (aligned for the two loads that
 * compare it), and the longest frame the sockets take.
 */
const volatile __u8 gsop_mac[6] __attribute__((aligned(4)));
const volatile __u32 gsop_max_len;

/* Queue → 1 while a socket is registered. The Go side sizes the three queue maps. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
} gsop_qidconf SEC(".maps");

/* Queue → its socket. */
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
} gsop_xsks SEC(".maps");

/*
 * What the rules make of a frame: the first four are the reasons a frame
 * for the redirect prefixes, or an IP frame whose version is not its
 * EtherType's, passes to the kernel, and the slots of their counters.
 */
enum outcome {
	OTHER_HOST,  /* unicast to another MAC address */
	NOT_UNICAST, /* to a broadcast or multicast MAC address */
	OVERSIZE,    /* longer than the sockets take */
	VERSION,     /* the IP version is not the EtherType's (any destination) */
	NUM_COUNTERS,
	TAKE = NUM_COUNTERS, /* redirect it to the queue's socket */
	PASS,                /* pass it, uncounted */
	COPY_HEADERS,        /* the headers reach into the fragments: parse a copy */
};

/* Per CPU, NUM_COUNTERS per queue: slot queue*NUM_COUNTERS + outcome. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, NUM_COUNTERS);
} gsop_xdp_stats SEC(".maps");

/* How much of a frame the program reads: up to the ICMPv6 type after a fixed IPv6 header. */
#define HDR_LEN (IPV6_END + 1)

/*
 * The frame as a parse reads it: in the packet, bounded by data_end, or
 * in a copy of its first HDR_LEN bytes on the stack, bounded by its
 * length.
 */
struct frame {
	const __u8 *data;
	const __u8 *end; /* the packet's data_end */
	__u64 len;       /* the frame's length, fragments included (0 without frags) */
	int copy;
};

/* has reports whether parse can read the frame's first n bytes. */
static __always_inline int has(const struct frame *f, __u32 n)
{
	return f->copy ? f->len >= n : f->data + n <= f->end;
}

/*
 * missing is the outcome of a frame whose first n bytes parse cannot
 * read: PASS if it is shorter, COPY_HEADERS if the rest of them is in
 * its fragments.
 */
static __always_inline enum outcome missing(const struct frame *f, __u32 n)
{
	return !f->copy && f->len >= n ? COPY_HEADERS : PASS;
}

/*
 * join joins n 16-bit words at p, in memory order, into one word: the
 * bytes it has in memory once stored.
 */
static __always_inline __u64 join(const __u16 *p, int n)
{
	__u64 w = 0;

	for (int i = 0; i < n; i++) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
		w |= (__u64)p[i] << (16 * i);
#else
		w |= (__u64)p[i] << (16 * (n - 1 - i));
#endif
	}
	return w;
}

/*
 * The keys of the tries are built in registers and stored in whole
 * 64-bit words: the verifier of Linux 6.1 refuses a loader without
 * CAP_PERFMON a store into part of a stack slot that holds a spilled
 * register (and a narrower store at a slot's start is one), and the
 * compiler orders the stores of a key's fields as it likes. The trie
 * reads the key back in the same words, which keeps the store-to-load
 * forwarding. The address is read from the packet in words too, and
 * from the copy on the stack in 16-bit words: the addresses are only
 * 2-byte aligned in it, and the verifier refuses misaligned stack loads.
 */

/* addr_word returns the size bytes (4 or 8) at off, which the frame has. */
static __always_inline __u64 addr_word(const struct frame *f, int off, int size)
{
	if (f->copy)
		return join((const __u16 *)(f->data + off), size / 2);
	if (size == 4)
		return *(const __u32 *)(f->data + off);
	return *(const __u64 *)(f->data + off);
}

/* key4 is a key of the IPv4 trie, struct lpm_key4, as one word. */
static __always_inline __u64 key4(const struct frame *f)
{
	__u64 addr = addr_word(f, IPV4_DST, 4);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return LPM_LEN4 | addr << 32;
#else
	return (__u64)LPM_LEN4 << 32 | addr;
#endif
}

/*
 * key6 fills k with a key of the IPv6 trie, struct lpm_key6, 4 bytes
 * into it: 4 bytes of padding and the length, then the address, whose
 * words are thus 8-byte aligned.
 */
static __always_inline const struct lpm_key6 *key6(__u64 k[3], const struct frame *f)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	k[0] = (__u64)LPM_LEN6 << 32;
#else
	k[0] = LPM_LEN6;
#endif
	k[1] = addr_word(f, IPV6_DST, 8);
	k[2] = addr_word(f, IPV6_DST + 8, 8);
	return (const struct lpm_key6 *)((const __u8 *)k + 4);
}

/* to_us reports whether a frame is sent to the NIC's MAC address. */
static __always_inline int to_us(const __u8 *eth)
{
	return *(const __u32 *)eth == *(const volatile __u32 *)gsop_mac &&
	       *(const __u16 *)(eth + 4) == *(const volatile __u16 *)(gsop_mac + 4);
}

/*
 * parse applies the rules to a frame that has a socket on its queue, to
 * be taken unless one says otherwise: size is OVERSIZE if the frame is
 * too long for the sockets, else TAKE.
 */
static __always_inline enum outcome parse(const struct frame *f, enum outcome size)
{
	const __u8 *p = f->data;

	if (!has(f, ETH_HLEN + 2))
		return missing(f, ETH_HLEN + 2);
	/* The outcome of a frame for the redirect prefixes. */
	enum outcome matched = to_us(p) ? size : p[0] & 1 ? NOT_UNICAST : OTHER_HOST;
	__u16 proto = *(const __u16 *)(p + ETH_PROTO);
	__u8 version = p[ETH_HLEN] >> 4;

	if (proto == bpf_htons(ETH_P_IP)) {
		if (!has(f, IPV4_END))
			return missing(f, IPV4_END);
		if (version != 4)
			return VERSION;
		__u64 k = key4(f);
		return redirected4((const struct lpm_key4 *)&k) ? matched : PASS;
	}
	if (proto == bpf_htons(ETH_P_IPV6)) {
		if (!has(f, IPV6_END))
			return missing(f, IPV6_END);
		if (version != 6)
			return VERSION;
		if (p[IPV6_NEXTHDR] == IPPROTO_ICMPV6) {
			if (!has(f, IPV6_END + 1))
				return missing(f, IPV6_END + 1);
			if (is_nd(p[IPV6_END]))
				return PASS;
		}
		__u64 k[3];
		return redirected6(key6(k, f)) ? matched : PASS;
	}
	return PASS;
}

/* The copy's buffer: HDR_LEN rounded up to a power of two. */
#define COPY_LEN 64
_Static_assert(HDR_LEN <= COPY_LEN && (COPY_LEN & (COPY_LEN - 1)) == 0, "COPY_LEN");

/*
 * parse_copy parses a copy of the first bytes of a frame of len bytes.
 * For a loader without CAP_PERFMON the verifier also walks the paths a
 * mispredicted branch would take (Spectre v1), where the min below does
 * not bound n; older kernels (Debian 13's 6.12) refuse the program for
 * them where newer ones (6.18) fence the branch. The mask bounds n on
 * those paths too, and
 * changes nothing on the real one (n <= HDR_LEN <= COPY_LEN); the empty
 * asm keeps the compiler from dropping it as such.
 */
static __always_inline enum outcome parse_copy(struct xdp_md *ctx, __u64 len, enum outcome size)
{
	__u8 buf[COPY_LEN] __attribute__((aligned(8))) = {};
	__u64 n = len < HDR_LEN ? len : HDR_LEN;

	asm volatile("" : "+r"(n));
	n &= COPY_LEN - 1;
	if (n < ETH_HLEN + 2 || bpf_xdp_load_bytes(ctx, 0, buf, n))
		return PASS;
	struct frame f = {.data = buf, .len = len, .copy = 1};
	return parse(&f, size);
}

/*
 * oversize reports whether a frame without fragments is longer than the
 * sockets take. A frame of a 1500-byte MTU is not when they take that
 * much (the verifier knows gsop_max_len, and drops the test): only a
 * longer one costs a helper call. (The verifier lets a program add only
 * constants to a packet pointer, so data + gsop_max_len is not an
 * option.)
 */
static __always_inline int oversize(struct xdp_md *ctx, const struct frame *f)
{
	if (gsop_max_len >= ETH_FRAME_LEN && f->data + ETH_FRAME_LEN + 1 > f->end)
		return 0;
	return bpf_xdp_get_buff_len(ctx) > gsop_max_len;
}

/* verdict does what the outcome says: redirect, or count and pass. */
static __always_inline int verdict(struct xdp_md *ctx, enum outcome o)
{
	if (o == TAKE) /* XDP_PASS if the queue has no socket after all */
		return bpf_redirect_map(&gsop_xsks, ctx->rx_queue_index, XDP_PASS);
	if (o < NUM_COUNTERS) {
		__u32 slot = ctx->rx_queue_index * NUM_COUNTERS + o;
		__u64 *n = bpf_map_lookup_elem(&gsop_xdp_stats, &slot);

		if (n)
			*n += 1;
	}
	return XDP_PASS;
}

/* take is the program, with frags (BPF_F_XDP_HAS_FRAGS) or without. */
static __always_inline int take(struct xdp_md *ctx, int frags)
{
	__u32 q = ctx->rx_queue_index;
	__u32 *on = bpf_map_lookup_elem(&gsop_qidconf, &q);

	if (!on || !*on)
		return XDP_PASS; /* no socket on this queue */
	struct frame f = {
		.data = (const __u8 *)(long)ctx->data,
		.end = (const __u8 *)(long)ctx->data_end,
	};
	enum outcome size = TAKE;

	if (frags) {
		f.len = bpf_xdp_get_buff_len(ctx);
		if (f.len > gsop_max_len)
			size = OVERSIZE;
	} else if (oversize(ctx, &f)) {
		size = OVERSIZE;
	}
	enum outcome o = parse(&f, size);

	if (o == COPY_HEADERS)
		o = parse_copy(ctx, f.len, size);
	return verdict(ctx, o);
}

SEC("xdp")
int gsop_xsk_redir(struct xdp_md *ctx)
{
	return take(ctx, 0);
}

SEC("xdp.frags")
int gsop_xsk_frags(struct xdp_md *ctx)
{
	return take(ctx, 1);
}

char LICENSE[] SEC("license") = "GPL";
