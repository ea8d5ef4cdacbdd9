/* Unloading: an iter/tcp program moves every socket whose congestion control name starts with
 * `prefix` to `fallback` (set by the loader) and counts it in `moved` (an array of one u64), so
 * that no socket is left on an algorithm that is about to be unregistered. */
#ifndef MGRP_RESET_H
#define MGRP_RESET_H

#define MGRP_SOL_TCP 6
#define MGRP_TCP_CONGESTION 13
#define MGRP_CA_NAME_MAX 16

static __always_inline int mgrp_reset_socket(struct bpf_iter__tcp *ctx, const char *prefix,
					     int prefix_len, char *fallback, void *moved)
{
	struct sock_common *skc = ctx->sk_common;
	char cur[MGRP_CA_NAME_MAX];
	struct tcp_sock *tp;
	__u32 zero = 0;
	__u64 *n;

	if (!skc)
		return 0;
	tp = bpf_skc_to_tcp_sock(skc);
	if (!tp)
		return 0;
	if (bpf_getsockopt(tp, MGRP_SOL_TCP, MGRP_TCP_CONGESTION, cur, sizeof(cur)))
		return 0;
	for (int i = 0; i < prefix_len && i < MGRP_CA_NAME_MAX; i++)
		if (cur[i] != prefix[i])
			return 0;
	if (bpf_setsockopt(tp, MGRP_SOL_TCP, MGRP_TCP_CONGESTION, fallback, MGRP_CA_NAME_MAX))
		return 0;
	n = bpf_map_lookup_elem(moved, &zero);
	if (n)
		__sync_fetch_and_add(n, 1);
	return 0;
}

#endif
