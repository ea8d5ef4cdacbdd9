// SPDX-License-Identifier: GPL-2.0
/* MPAT (seed 003 §2) and a mulTCP baseline as TCP congestion controls (struct_ops), in an object
 * of their own so that they load apart from mgrp_cc.
 *
 *   mgrp_mpat    a socket matching a rule of `mpat_rules` (destination and/or port) joins that
 *                rule's aggregate in `mpat_aggs` with the rule's weight and brings one window.
 *                Each ack and loss of a member is charged to one of the aggregate's windows drawn
 *                at random (bpf_get_prandom_u32, with probability cwnd_j/C), Reno runs on that
 *                window (at most one halving per window per RTT), and the member's cwnd is
 *                max(2, x_i·C). A socket matching no rule runs Reno.
 *   mgrp_multcp  one flow acting as N (+N per RTT, cut by 1/(2N)); N from `multcp_n`.
 *
 * Locking: several sockets update one aggregate from different CPUs and a loss must read and
 * write a window's cwnd, ssthresh and last halving and the sum C together, so the aggregate
 * carries a bpf_spin_lock; atomics alone could double-halve a window or let C drift from Σcwnd.
 * No helper may run under the lock: time, randomness and the socket are read before it. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>

#define MGRP_INLINE static __always_inline
#include "rules.h"
#include "mpat_maps.h"
#include "reset.h"

char _license[] SEC("license") = "GPL";

#define AF_INET 2

extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;
extern __u32 tcp_reno_ssthresh(struct sock *sk) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;
extern __u32 tcp_slow_start(struct tcp_sock *tp, __u32 acked) __ksym;
extern void tcp_cong_avoid_ai(struct tcp_sock *tp, __u32 w, __u32 acked) __ksym;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MGRP_MPAT_AGGS);
	__type(key, __u32);
	__type(value, struct mgrp_mpat_agg);
} mpat_aggs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MGRP_MPAT_RULES);
	__type(key, struct mgrp_mpat_rule_key);
	__type(value, struct mgrp_mpat_rule);
} mpat_rules SEC(".maps");

/* What a member socket joined with; the weight is re-read from its rule on every ack so that
 * a live reweight reaches it. */
struct mpat_member {
	struct mgrp_mpat_rule_key rule;
	__u32 agg;
	__u32 gen;
	__u32 weight;
	__u32 joined;
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct mpat_member);
} mpat_members SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} multcp_n SEC(".maps");

static __always_inline struct tcp_sock *tcp_sk(const struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline void dst_of(struct sock *sk, struct mgrp_mpat_rule_key *k)
{
	__builtin_memset(k, 0, sizeof(*k));
	if (sk->__sk_common.skc_family == AF_INET) {
		__u32 a = sk->__sk_common.skc_daddr;
		k->addr[10] = 0xff;
		k->addr[11] = 0xff;
		__builtin_memcpy(&k->addr[12], &a, 4);
	} else {
		__builtin_memcpy(k->addr, &sk->__sk_common.skc_v6_daddr, 16);
	}
	k->port = bpf_ntohs(sk->__sk_common.skc_dport);
}

/* The most specific rule: destination and port, then destination, then port. */
static __always_inline struct mgrp_mpat_rule *find_rule(struct sock *sk,
							 struct mgrp_mpat_rule_key *k)
{
	struct mgrp_mpat_rule *r;
	__u16 port;

	dst_of(sk, k);
	port = k->port;
	r = bpf_map_lookup_elem(&mpat_rules, k);
	if (r)
		return r;
	k->port = 0;
	r = bpf_map_lookup_elem(&mpat_rules, k);
	if (r)
		return r;
	__builtin_memset(k->addr, 0, sizeof(k->addr));
	k->port = port;
	return bpf_map_lookup_elem(&mpat_rules, k);
}

static __always_inline void csum_set(struct mgrp_mpat_agg *a, __u32 j, __u32 next)
{
	a->csum_milli = a->csum_milli - a->cwnd_milli[j] + next;
	a->cwnd_milli[j] = next;
}

SEC("struct_ops")
void BPF_PROG(mgrp_mpat_init, struct sock *sk)
{
	struct mgrp_mpat_rule_key k;
	struct mgrp_mpat_rule *r = find_rule(sk, &k);
	struct mpat_member *m;
	struct mgrp_mpat_agg *a;
	__u32 agg, j, joined = 0;

	if (!r || r->weight == 0)
		return;
	agg = r->agg;
	a = bpf_map_lookup_elem(&mpat_aggs, &agg);
	if (!a || !a->used)
		return;
	m = bpf_sk_storage_get(&mpat_members, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!m)
		return;
	__sync_fetch_and_add(&r->flows, 1);
	bpf_spin_lock(&a->lock);
	j = a->n;
	if (j < MGRP_MPAT_WINDOWS) {
		j &= MGRP_MPAT_WINDOWS - 1;
		a->n = j + 1;
		a->weight_sum += r->weight;
		a->cwnd_milli[j] = 0;
		csum_set(a, j, MGRP_MPAT_MIN_MILLI);
		a->ssthresh_milli[j] = 0x7fffffff;
		a->last_halving_ns[j] = 0;
		a->flows_opened++;
		joined = 1;
	} else {
		a->refused++;
	}
	bpf_spin_unlock(&a->lock);
	m->rule = k;
	m->agg = agg;
	m->gen = a->gen;
	m->weight = r->weight;
	m->joined = joined;
}

static __always_inline struct mpat_member *member_of(struct sock *sk)
{
	struct mpat_member *m = bpf_sk_storage_get(&mpat_members, sk, 0, 0);
	return m && m->joined ? m : NULL;
}

/* The member's aggregate, unless it was removed since the member joined (then NULL). */
static __always_inline struct mgrp_mpat_agg *agg_of(struct mpat_member *m)
{
	__u32 agg = m->agg;
	struct mgrp_mpat_agg *a = bpf_map_lookup_elem(&mpat_aggs, &agg);
	return a && a->used && a->gen == m->gen ? a : NULL;
}

SEC("struct_ops")
void BPF_PROG(mgrp_mpat_release, struct sock *sk)
{
	struct mpat_member *m = member_of(sk);
	struct mgrp_mpat_agg *a;
	__u32 last;

	if (!m)
		return;
	m->joined = 0;
	a = agg_of(m);
	if (!a)
		return;
	/* The aggregate loses one window (the last): it is as aggressive as its flows. */
	bpf_spin_lock(&a->lock);
	if (a->n > 0) {
		last = (a->n - 1) & (MGRP_MPAT_WINDOWS - 1);
		csum_set(a, last, 0);
		a->n = last;
		a->weight_sum = a->weight_sum > m->weight ? a->weight_sum - m->weight : 0;
	}
	a->flows_closed++;
	bpf_spin_unlock(&a->lock);
}

/* A live reweight: the rule's weight replaces the one the member joined with. */
static __always_inline __u32 fresh_weight(struct mpat_member *m, __s32 *delta)
{
	struct mgrp_mpat_rule *r = bpf_map_lookup_elem(&mpat_rules, &m->rule);
	*delta = 0;
	if (r && r->weight && r->weight != m->weight) {
		*delta = (__s32)(r->weight - m->weight);
		m->weight = r->weight;
	}
	return m->weight;
}

static __always_inline int cwnd_limited(struct tcp_sock *tp)
{
	/* As the kernel's tcp_is_cwnd_limited(). */
	if (tp->snd_cwnd < tp->snd_ssthresh)
		return tp->snd_cwnd < 2 * tp->max_packets_out;
	return tp->is_cwnd_limited;
}

static __always_inline void count_bytes(struct mpat_member *m, __u64 bytes)
{
	struct mgrp_mpat_rule *r = bpf_map_lookup_elem(&mpat_rules, &m->rule);
	if (r)
		__sync_fetch_and_add(&r->acked_bytes, bytes);
}

SEC("struct_ops")
void BPF_PROG(mgrp_mpat_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct mpat_member *m = member_of(sk);
	__u32 r = bpf_get_prandom_u32(), weight, j, cwnd;
	struct mgrp_mpat_agg *a = m ? agg_of(m) : NULL;
	__s32 delta;

	/* Not a member, or its aggregate was removed: Reno. */
	if (!m || !a) {
		tcp_reno_cong_avoid(sk, ack, acked);
		return;
	}
	count_bytes(m, (__u64)acked * tp->mss_cache);
	/* An application-limited member's acks say nothing about the path's room: no growth (as
	 * Reno), but its share still follows C and the weights. */
	if (!cwnd_limited(tp))
		acked = 0;
	weight = fresh_weight(m, &delta);
	bpf_spin_lock(&a->lock);
	a->weight_sum += delta;
	j = mgrp_mpat_pick(a->cwnd_milli, a->n, r) & (MGRP_MPAT_WINDOWS - 1);
	csum_set(a, j, mgrp_mpat_on_ack(a->cwnd_milli[j], a->ssthresh_milli[j], acked));
	a->acks++;
	cwnd = mgrp_mpat_member_cwnd(a->csum_milli, weight, a->weight_sum);
	bpf_spin_unlock(&a->lock);
	tp->snd_cwnd = cwnd;
}

SEC("struct_ops")
__u32 BPF_PROG(mgrp_mpat_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct mpat_member *m = member_of(sk);
	__u64 now = bpf_ktime_get_ns(), rtt_ns = (__u64)(tp->srtt_us >> 3) * 1000;
	__u32 r = bpf_get_prandom_u32(), j, cwnd, weight;
	struct mgrp_mpat_agg *a = m ? agg_of(m) : NULL;

	if (!m || !a)
		return tcp_reno_ssthresh(sk);
	weight = m->weight;
	bpf_spin_lock(&a->lock);
	j = mgrp_mpat_pick(a->cwnd_milli, a->n, r) & (MGRP_MPAT_WINDOWS - 1);
	a->losses++;
	if (mgrp_mpat_may_halve(now, a->last_halving_ns[j], rtt_ns)) {
		a->ssthresh_milli[j] = mgrp_mpat_halve(a->cwnd_milli[j]);
		csum_set(a, j, a->ssthresh_milli[j]);
		a->last_halving_ns[j] = now;
		a->halvings++;
	}
	cwnd = mgrp_mpat_member_cwnd(a->csum_milli, weight, a->weight_sum);
	bpf_spin_unlock(&a->lock);
	/* The member's share of the new C: the kernel brings cwnd down to it in recovery. */
	return cwnd;
}

SEC("struct_ops")
__u32 BPF_PROG(mgrp_mpat_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops mgrp_mpat = {
	.init = (void *)mgrp_mpat_init,
	.release = (void *)mgrp_mpat_release,
	.ssthresh = (void *)mgrp_mpat_ssthresh,
	.cong_avoid = (void *)mgrp_mpat_cong_avoid,
	.undo_cwnd = (void *)mgrp_mpat_undo_cwnd,
	.name = "mgrp_mpat",
};

/* ---- mulTCP baseline ---- */

static __always_inline __u32 multcp_n_now(void)
{
	__u32 zero = 0, *n = bpf_map_lookup_elem(&multcp_n, &zero);
	return n && *n ? *n : 1;
}

SEC("struct_ops")
void BPF_PROG(mgrp_multcp_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);

	if (!tp->is_cwnd_limited && tp->snd_cwnd >= tp->snd_ssthresh)
		return;
	if (tp->snd_cwnd < tp->snd_ssthresh) {
		acked = tcp_slow_start(tp, acked);
		if (!acked)
			return;
	}
	tcp_cong_avoid_ai(tp, mgrp_multcp_ai_window(tp->snd_cwnd, multcp_n_now()), acked);
}

SEC("struct_ops")
__u32 BPF_PROG(mgrp_multcp_ssthresh, struct sock *sk)
{
	return mgrp_multcp_cut(tcp_sk(sk)->snd_cwnd, multcp_n_now());
}

SEC(".struct_ops.link")
struct tcp_congestion_ops mgrp_multcp = {
	.ssthresh = (void *)mgrp_multcp_ssthresh,
	.cong_avoid = (void *)mgrp_multcp_cong_avoid,
	.undo_cwnd = (void *)mgrp_mpat_undo_cwnd,
	.name = "mgrp_multcp",
};

/* ---- unloading: move every socket on mgrp_mpat or mgrp_multcp to `fallback_cc` ---- */

/* The only variable in .data: the loader writes the name at offset 0 before loading. */
char fallback_cc[MGRP_CA_NAME_MAX] = "cubic";

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} mpat_reset_moved SEC(".maps");

SEC("iter/tcp")
int mpat_reset(struct bpf_iter__tcp *ctx)
{
	/* "mgrp_m…": this object's two names (mgrp_cc's are mgrp_bg, mgrp_fs, mgrp_ledbat). */
	return mgrp_reset_socket(ctx, "mgrp_m", 6, fallback_cc, &mpat_reset_moved);
}
