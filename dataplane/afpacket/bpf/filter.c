/*
 * The AF_PACKET port's two programs (see filter_linux.go): the socket
 * filter keeps exactly the packets the port takes, the ingress program
 * (tcx, or a direct-action cls_bpf filter on a clsact qdisc) drops
 * exactly those. Both run on a __sk_buff whose data starts
 * at the Ethernet header, and read it with bpf_skb_load_bytes: socket
 * filters have no direct packet access, and the helper reads the paged
 * super-packets GRO makes. Every buffer and key passed to a helper is
 * written in full first: a loader without CAP_PERFMON gets no
 * uninitialised stack reads.
 */
#include "bpf.h"
#include "redirect.h"

/* takes reports whether the port takes the packet. */
static __always_inline int takes(const struct __sk_buff *skb)
{
	if (skb->pkt_type != PACKET_HOST || skb->vlan_present)
		return 0;
	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		struct lpm_key4 k;
		if (bpf_skb_load_bytes(skb, IPV4_DST, &k.addr, sizeof(k.addr)))
			return 0;
		k.prefixlen = LPM_LEN4;
		return redirected4(&k);
	}
	if (skb->protocol != bpf_htons(ETH_P_IPV6))
		return 0;
	__u8 b = 0;
	if (bpf_skb_load_bytes(skb, IPV6_NEXTHDR, &b, 1))
		return 0;
	if (b == IPPROTO_ICMPV6 && (bpf_skb_load_bytes(skb, IPV6_END, &b, 1) || is_nd(b)))
		return 0;
	struct lpm_key6 k;
	if (bpf_skb_load_bytes(skb, IPV6_DST, k.addr, sizeof(k.addr)))
		return 0;
	k.prefixlen = LPM_LEN6;
	return redirected6(&k);
}

/* The socket filter: the whole packet (the snap length -1) or nothing. */
SEC("socket")
int gsop_pkt_keep(struct __sk_buff *skb)
{
	return takes(skb) ? -1 : 0;
}

/*
 * The ingress program: drop, or leave the packet to what comes next.
 * TCX_DROP and TCX_NEXT are TC_ACT_SHOT and TC_ACT_UNSPEC, which mean
 * the same to cls_bpf in direct-action mode.
 */
SEC("tc")
int gsop_pkt_drop(struct __sk_buff *skb)
{
	return takes(skb) ? TCX_DROP : TCX_NEXT;
}

char LICENSE[] SEC("license") = "GPL";
