/*
 * The XDP program of the AF_XDP port. What it takes and what it passes
 * is the file comment of prog_linux.go; this is how.
 *
 * Two programs: gsop_xsk_redir, for frames that are whole in their
 * linear part, and gsop_xsk_frags, loaded with BPF_F_XDP_HAS_FRAGS,
 * which reads every frame's length with bpf_xdp_get_buff_len and parses
 * a copy of the headers on the stack when the linear part ends before
 * they do.
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

/* The counters of frames for the redirect prefixes passed to the kernel, by reason. */
enum reason {
	OTHER_HOST,  /* unicast to another MAC address */
	NOT_UNICAST, /* to a broadcast or multicast MAC address */
	OVERSIZE,    /* longer than the sockets take */
	VERSION,     /* the IP version is not the EtherType's (any destination) */
	NUM_COUNTERS,
	NO_REASON = NUM_COUNTERS, /* a frame to take */
};

/* Per CPU, NUM_COUNTERS per queue: slot queue*NUM_COUNTERS + reason. */
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
 * in a copy of its first HDR_LEN bytes on the stack. The verifier lets
 * a program add only constants to a packet pointer (without
 * CAP_PERFMON), so the frame's length bounds a copy but not the packet.
 */
struct frame {
	const __u8 *data;
	const __u8 *end; /* the packet's data_end */
	__u64 len;       /* the frame's length, fragments included (0 without frags) */
	int copy;
};

/* What parse returns when the headers it reads reach into the fragments. */
#define COPY_HEADERS -1

/*
 * need returns 0 if the frame has its first n bytes to read, and else
 * what parse returns: XDP_PASS if the frame is shorter, COPY_HEADERS if
 * the rest of them is in the fragments.
 */
static __always_inline int need(const struct frame *f, __u32 n)
{
	if (f->copy)
		return f->len >= n ? 0 : XDP_PASS;
	if (f->data + n <= f->end)
		return 0;
	return f->len >= n ? COPY_HEADERS : XDP_PASS;
}

/*
 * load_addr copies the n 32-bit words at off (an address the frame has)
 * into a key. The copy on the stack is read in 16-bit words: the
 * addresses are only 2-byte aligned in it, and the verifier refuses
 * misaligned stack loads.
 */
static __always_inline void load_addr(__u32 *to, const struct frame *f, int off, int n)
{
	if (f->copy) {
		for (int i = 0; i < 2 * n; i++)
			((__u16 *)to)[i] = ((const __u16 *)(f->data + off))[i];
		return;
	}
	for (int i = 0; i < n; i++)
		to[i] = ((const __u32 *)(f->data + off))[i];
}

/* count adds one to the counter of reason on the frame's queue, and passes the frame. */
static __always_inline int count(struct xdp_md *ctx, enum reason why)
{
	__u32 slot = ctx->rx_queue_index * NUM_COUNTERS + why;
	__u64 *n = bpf_map_lookup_elem(&gsop_xdp_stats, &slot);

	if (n)
		*n += 1;
	return XDP_PASS;
}

/* to_us reports whether a frame is sent to the NIC's MAC address. */
static __always_inline int to_us(const __u8 *eth)
{
	return *(const __u32 *)eth == *(const volatile __u32 *)gsop_mac &&
	       *(const __u16 *)(eth + 4) == *(const volatile __u16 *)(gsop_mac + 4);
}

/*
 * parse applies the rules to a frame that has a socket on its queue:
 * why is OVERSIZE if it is too long for the sockets, else NO_REASON.
 * It counts nothing before it has read all it needs (see need).
 */
static __always_inline int parse(struct xdp_md *ctx, const struct frame *f, enum reason why)
{
	const __u8 *p = f->data;
	int lack = need(f, ETH_HLEN + 2);

	if (lack)
		return lack;
	if (!to_us(p))
		why = p[0] & 1 ? NOT_UNICAST : OTHER_HOST;
	__u16 proto = *(const __u16 *)(p + ETH_PROTO);
	__u8 version = p[ETH_HLEN] >> 4;

	if (proto == bpf_htons(ETH_P_IP)) {
		if ((lack = need(f, IPV4_END)))
			return lack;
		if (version != 4)
			return count(ctx, VERSION);
		struct lpm_key4 k = LPM_KEY4;
		load_addr(&k.addr, f, IPV4_DST, 1);
		if (!redirected4(&k))
			return XDP_PASS;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		if ((lack = need(f, IPV6_END)))
			return lack;
		if (version != 6)
			return count(ctx, VERSION);
		if (p[IPV6_NEXTHDR] == IPPROTO_ICMPV6) {
			if ((lack = need(f, IPV6_END + 1)))
				return lack;
			if (is_nd(p[IPV6_END]))
				return XDP_PASS;
		}
		struct lpm_key6 k = LPM_KEY6;
		load_addr(k.addr, f, IPV6_DST, 4);
		if (!redirected6(&k))
			return XDP_PASS;
	} else {
		return XDP_PASS;
	}
	if (why != NO_REASON)
		return count(ctx, why);
	/* XDP_PASS if the queue has no socket after all. */
	return bpf_redirect_map(&gsop_xsks, ctx->rx_queue_index, XDP_PASS);
}

/* parse_copy parses a copy of the first bytes of a frame of len bytes. */
static __always_inline int parse_copy(struct xdp_md *ctx, __u64 len, enum reason why)
{
	__u8 buf[HDR_LEN] __attribute__((aligned(8))) = {};
	__u64 n = len < HDR_LEN ? len : HDR_LEN;

	if (n < ETH_HLEN + 2 || bpf_xdp_load_bytes(ctx, 0, buf, n))
		return XDP_PASS;
	struct frame f = {.data = buf, .len = len, .copy = 1};
	return parse(ctx, &f, why);
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
	enum reason why = NO_REASON;

	if (frags) {
		f.len = bpf_xdp_get_buff_len(ctx);
		if (f.len > gsop_max_len)
			why = OVERSIZE;
	} else if (oversize(ctx, &f)) {
		why = OVERSIZE;
	}
	int verdict = parse(ctx, &f, why);

	if (verdict != COPY_HEADERS)
		return verdict;
	return parse_copy(ctx, f.len, why);
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
