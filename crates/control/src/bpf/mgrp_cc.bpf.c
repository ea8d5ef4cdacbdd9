// SPDX-License-Identifier: GPL-2.0
/* mgrp's transfer modes as TCP congestion controls (struct_ops):
 *   mgrp_bg      Reno whose cwnd is capped at g·RTT·A/M (seed 001 §5.1, background);
 *   mgrp_fs      Reno whose congestion avoidance grows by max(1, h(1 − cwnd/V)) per RTT,
 *                V = A·RTT/M (seed 001 §5.2, full-speed);
 *   mgrp_ledbat  a LEDBAT baseline (RFC 6817, delay from the RTT above its minimum).
 * A comes from the `paths` map, keyed by destination, filled by the agent. With no fresh entry
 * both modes behave as Reno and count the ack in `acks_no_estimate`. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define MGRP_INLINE static __always_inline
#include "rules.h"
#include "maps.h"
#include "reset.h"

char _license[] SEC("license") = "GPL";

#define AF_INET 2
#define AF_INET6 10
#define SOL_TCP 6
#define TCP_CONGESTION 13
#define TCP_CA_NAME_MAX 16
#define TCP_CA_Loss 4

/* The Reno pieces the kernel exports to BPF congestion controls. */
extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;
extern __u32 tcp_reno_ssthresh(struct sock *sk) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;
extern __u32 tcp_slow_start(struct tcp_sock *tp, __u32 acked) __ksym;
extern void tcp_cong_avoid_ai(struct tcp_sock *tp, __u32 w, __u32 acked) __ksym;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct mgrp_path_key);
	__type(value, struct mgrp_path);
} paths SEC(".maps");

/* Bytes acked by background flows per destination: the agent adds their rate back to the
 * path's measured A (their own traffic is not cross traffic). LRU: a stranger's flows to many
 * destinations cannot fill it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct mgrp_path_key);
	__type(value, __u64);
} bg_acked SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MGRP_MODES);
	__type(key, __u32);
	__type(value, struct mgrp_mode_stats);
} stats SEC(".maps");

/* Per-socket state in the congestion control's private area (fixed offsets only: the
 * verifier refuses computed offsets into a socket). */
struct mgrp_ca {
	__u64 last_ack_ns;
	__u32 limited;		/* the last ack was held at the cap */
	__s32 lift;		/* background: packets the limit is moved from the estimate's cap */
	__u64 round_start_ns;	/* background: the current round (one base RTT) began */
	__u32 round_min_rtt_us;	/* background: smallest RTT sample of the round, 0: none */
	__u32 jump_rtt_us;	/* full-speed: the RTT a jump-started window was sized with, 0: none */
	__u64 entry_ns;		/* background: the map entry the lift was found under */
	__u64 bw_cur;		/* full-speed: largest delivery rate (bit/s) of this slot */
	__u64 bw_prev;		/* full-speed: of the slot before */
	__u64 bw_slot_ns;	/* full-speed: when this slot began */
};

/* Full-speed: the growth factor when no map entry gives one (seed: 100). */
#define MGRP_FS_DEFAULT_H 100
/* Full-speed: a delivery-rate slot lasts this many base RTTs; the max of two slots is the
 * flow's own estimate of what the path gives it. */
#define MGRP_FS_BW_SLOT_RTTS 10

/* LEDBAT's per-socket history, in socket storage where arrays may be indexed. */
struct ledbat {
	__u32 base_minute;
	__u32 base[16];		/* minimum RTT per minute, the last 10 minutes in [0, 10) */
	__u32 cur[4];		/* the last 4 RTT samples */
	__u32 cur_i;
	__u32 credit_milli;	/* accumulated growth, thousandths of a packet */
	__u32 debit_milli;	/* accumulated reduction */
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct ledbat);
} ledbat_state SEC(".maps");

static __always_inline struct tcp_sock *tcp_sk(const struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct mgrp_ca *ca_of(struct sock *sk)
{
	return (void *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

static __always_inline struct mgrp_mode_stats *stats_of(__u32 mode)
{
	return bpf_map_lookup_elem(&stats, &mode);
}

static __always_inline void key_of(struct sock *sk, struct mgrp_path_key *k)
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
}

/* The path's entry when it is fresh, else NULL. */
static __always_inline struct mgrp_path *fresh_path(struct sock *sk, __u64 now)
{
	struct mgrp_path_key k;
	struct mgrp_path *p;

	key_of(sk, &k);
	p = bpf_map_lookup_elem(&paths, &k);
	if (!p || p->avail_bps == 0 || now < p->updated_ns || now - p->updated_ns > p->max_age_ns)
		return NULL;
	return p;
}

static __always_inline __u32 srtt_us(struct tcp_sock *tp)
{
	return tp->srtt_us >> 3;
}

/* The RTT windows are sized with: the path's minimum RTT (the kernel's 5-minute windowed min),
 * so that a queue the flow builds does not grow its window. */
static __always_inline __u32 base_rtt_us(struct tcp_sock *tp)
{
	return mgrp_base_rtt_us(tp->rtt_min.s[0].v, srtt_us(tp));
}

static __always_inline int cwnd_limited(struct tcp_sock *tp)
{
	/* As the kernel's tcp_is_cwnd_limited(): in slow start, grow while the window is less than
	 * twice what was in flight. */
	if (tp->snd_cwnd < tp->snd_ssthresh)
		return tp->snd_cwnd < 2 * tp->max_packets_out;
	return tp->is_cwnd_limited;
}

static __always_inline void count_ack(__u32 mode, struct sock *sk, __u32 acked, int no_estimate)
{
	struct mgrp_mode_stats *s = stats_of(mode);
	if (!s)
		return;
	__sync_fetch_and_add(&s->acks, 1);
	__sync_fetch_and_add(&s->acked_bytes, (__u64)acked * tcp_sk(sk)->mss_cache);
	if (no_estimate)
		__sync_fetch_and_add(&s->acks_no_estimate, 1);
}

static __always_inline void count_open(__u32 mode, struct sock *sk)
{
	struct mgrp_mode_stats *s = stats_of(mode);
	__builtin_memset(ca_of(sk), 0, sizeof(struct mgrp_ca));
	if (s)
		__sync_fetch_and_add(&s->flows_opened, 1);
}

static __always_inline void count_close(__u32 mode)
{
	struct mgrp_mode_stats *s = stats_of(mode);
	if (s)
		__sync_fetch_and_add(&s->flows_closed, 1);
}

static __always_inline __u32 count_loss(__u32 mode, struct sock *sk)
{
	struct mgrp_mode_stats *s = stats_of(mode);
	if (s)
		__sync_fetch_and_add(&s->losses, 1);
	return tcp_reno_ssthresh(sk);
}

/* Bytes acked on this host's background and full-speed flows per destination: the agent adds
 * their rate back to the path's measured A (a flow's own traffic is not cross traffic). */
static __always_inline void count_own_bytes(struct sock *sk, __u32 acked)
{
	struct mgrp_path_key k;
	__u64 *bytes, add = (__u64)acked * tcp_sk(sk)->mss_cache;

	key_of(sk, &k);
	bytes = bpf_map_lookup_elem(&bg_acked, &k);
	if (bytes)
		__sync_fetch_and_add(bytes, add);
	else
		bpf_map_update_elem(&bg_acked, &k, &add, BPF_NOEXIST);
}

/* ---- background ---- */

SEC("struct_ops")
void BPF_PROG(mgrp_bg_init, struct sock *sk)
{
	count_open(MGRP_MODE_BG, sk);
}

SEC("struct_ops")
void BPF_PROG(mgrp_bg_release, struct sock *sk)
{
	count_close(MGRP_MODE_BG);
}

/* An RTT sample: the round's smallest is its queueing signal. */
SEC("struct_ops")
void BPF_PROG(mgrp_bg_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	struct mgrp_ca *ca = ca_of(sk);
	__s32 rtt = sample->rtt_us;

	if (rtt <= 0)
		return;
	if (ca->round_min_rtt_us == 0 || (__u32)rtt < ca->round_min_rtt_us)
		ca->round_min_rtt_us = rtt;
}

/* At the end of each round (one base RTT), move the lift by what the round saw. After a
 * decrease the next round starts one base RTT later: the queue the last round saw is still
 * draining then, and judging it again would cut twice for one excess. */
static __always_inline void bg_round(struct mgrp_ca *ca, __u64 now, __u32 base_us, __u32 cap)
{
	__u64 rtt_ns = (__u64)base_us * 1000;
	__s32 before = ca->lift;

	if (ca->round_start_ns && (now < ca->round_start_ns || now - ca->round_start_ns < rtt_ns))
		return;
	if (ca->round_start_ns)
		ca->lift = mgrp_bg_lift_next(ca->lift, cap, ca->round_min_rtt_us, base_us,
					     ca->limited);
	ca->round_start_ns = ca->lift < before ? now + rtt_ns : now;
	ca->round_min_rtt_us = 0;
}

SEC("struct_ops")
void BPF_PROG(mgrp_bg_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct mgrp_ca *ca = ca_of(sk);
	__u64 now = bpf_ktime_get_ns();
	struct mgrp_path *p = fresh_path(sk, now);
	struct mgrp_mode_stats *s = stats_of(MGRP_MODE_BG);
	__u32 cap, limit, base, inc;

	count_own_bytes(sk, acked);
	count_ack(MGRP_MODE_BG, sk, acked, !p);

	if (!p) {
		tcp_reno_cong_avoid(sk, ack, acked);
		ca->limited = 0;
		ca->lift = 0;
		ca->last_ack_ns = now;
		return;
	}
	/* The seed's cap, g·A·RTT/M, with the path's base RTT; the lift on top. */
	base = base_rtt_us(tp);
	cap = mgrp_bg_max_cwnd(p->avail_bps, base, tp->mss_cache, p->g_milli, p->threshold_pkts,
			       p->floor_pkts);
	/* A new estimate accounts for the room a lift found; a queue it did not see still holds
	 * the limit under its cap. */
	if (p->updated_ns != ca->entry_ns) {
		ca->entry_ns = p->updated_ns;
		if (ca->lift > 0)
			ca->lift = 0;
	}
	if (!(p->flags & MGRP_PATH_PROBE) || !cap)
		ca->lift = 0;
	else
		bg_round(ca, now, base, cap);
	limit = mgrp_bg_limit(cap, ca->lift);

	if (cwnd_limited(tp)) {
		if (tp->snd_cwnd < tp->snd_ssthresh)
			acked = tcp_slow_start(tp, acked);
		/* Below the limit grow toward it as full-speed does toward V (Reno's +1 per RTT
		 * would take 100 RTTs to climb back from a 9 to a 45 Mbit/s limit at 40 ms). */
		if (acked) {
			inc = limit ? mgrp_fs_increase(tp->snd_cwnd, limit, p->h) : 1;
			tcp_cong_avoid_ai(tp, mgrp_ai_window(tp->snd_cwnd, inc), acked);
		}
	}
	if (limit && tp->snd_cwnd >= limit) {
		tp->snd_cwnd = limit;
		if (s) {
			__sync_fetch_and_add(&s->acks_limited, 1);
			if (ca->limited && ca->last_ack_ns && now > ca->last_ack_ns)
				__sync_fetch_and_add(&s->limited_ns, now - ca->last_ack_ns);
		}
		ca->limited = 1;
	} else {
		ca->limited = 0;
	}
	ca->last_ack_ns = now;
}

SEC("struct_ops")
__u32 BPF_PROG(mgrp_bg_ssthresh, struct sock *sk)
{
	return count_loss(MGRP_MODE_BG, sk);
}

SEC("struct_ops")
__u32 BPF_PROG(mgrp_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops mgrp_bg = {
	.init = (void *)mgrp_bg_init,
	.release = (void *)mgrp_bg_release,
	.ssthresh = (void *)mgrp_bg_ssthresh,
	.cong_avoid = (void *)mgrp_bg_cong_avoid,
	.pkts_acked = (void *)mgrp_bg_pkts_acked,
	.undo_cwnd = (void *)mgrp_undo_cwnd,
	.name = "mgrp_bg",
};

/* ---- full-speed ---- */

/* With a fresh estimate and an RTT sample (the handshake's), start at V paced at 1.2·A rather
 * than slow-starting toward it from the initial window: the estimate already says what slow
 * start would find (7–8 RTTs on a 100 Mbit/s, 200 ms path), and overshooting it loses up to a
 * window. The kernel paces the socket itself (no fq here) once pacing is marked needed; from
 * the first ack on it sets the rate from cwnd/srtt as usual. */
static __always_inline void fs_jump_start(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct mgrp_path *p = fresh_path(sk, bpf_ktime_get_ns());
	__u32 v, w;

	if (!p || !(p->flags & MGRP_PATH_JUMP))
		return;
	v = mgrp_fs_target(p->avail_bps, base_rtt_us(tp), tp->mss_cache);
	w = mgrp_fs_jump_cwnd(tp->snd_cwnd, v, tp->snd_cwnd_clamp);
	if (w <= tp->snd_cwnd)
		return;
	tp->snd_cwnd = w;
	tp->snd_ssthresh = w;
	ca_of(sk)->jump_rtt_us = base_rtt_us(tp);
	if (sk->sk_pacing_status == SK_PACING_NONE)
		sk->sk_pacing_status = SK_PACING_NEEDED;
	sk->sk_pacing_rate = mgrp_fs_jump_pacing(p->avail_bps);
}

SEC("struct_ops")
void BPF_PROG(mgrp_fs_init, struct sock *sk)
{
	count_open(MGRP_MODE_FS, sk);
	fs_jump_start(sk);
}

SEC("struct_ops")
void BPF_PROG(mgrp_fs_release, struct sock *sk)
{
	count_close(MGRP_MODE_FS);
}

/* The flow's own estimate of what the path gives it: the largest delivery rate of the last
 * 10–20 base RTTs (the kernel's rate sampler, as BBR's bandwidth filter). It needs no probe,
 * so it holds where the agent's estimator cannot finish (heavy random loss). */
static __always_inline __u64 fs_own_bps(struct mgrp_ca *ca, struct tcp_sock *tp, __u64 now,
					__u32 base_us)
{
	__u64 bps = mgrp_delivery_bps(tp->rate_delivered, tp->rate_interval_us, tp->mss_cache);

	if (now - ca->bw_slot_ns >= (__u64)base_us * 1000 * MGRP_FS_BW_SLOT_RTTS) {
		ca->bw_prev = ca->bw_cur;
		ca->bw_cur = 0;
		ca->bw_slot_ns = now;
	}
	if (bps > ca->bw_cur)
		ca->bw_cur = bps;
	return ca->bw_cur > ca->bw_prev ? ca->bw_cur : ca->bw_prev;
}

SEC("struct_ops")
void BPF_PROG(mgrp_fs_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct mgrp_ca *ca = ca_of(sk);
	__u64 now = bpf_ktime_get_ns();
	struct mgrp_path *p = fresh_path(sk, now);
	__u32 base = base_rtt_us(tp), target = 0, inc;
	__u64 own = fs_own_bps(ca, tp, now, base), a;

	count_own_bytes(sk, acked);
	count_ack(MGRP_MODE_FS, sk, acked, !p);
	/* A jump-started window follows the path's minimum RTT down from the handshake's. */
	if (ca->jump_rtt_us && base < ca->jump_rtt_us) {
		tp->snd_cwnd = mgrp_fs_jump_rescale(tp->snd_cwnd, ca->jump_rtt_us, base);
		if (tp->snd_ssthresh > tp->snd_cwnd)
			tp->snd_ssthresh = tp->snd_cwnd;
		ca->jump_rtt_us = base;
	}
	if (!cwnd_limited(tp))
		return;
	/* Slow start is kept (seed: only congestion avoidance changes), but ends at the fresh
	 * estimate's V rather than at the loss of up to a window past it. */
	if (tp->snd_cwnd < tp->snd_ssthresh) {
		if (p)
			tp->snd_ssthresh = mgrp_fs_ss_exit(
				tp->snd_ssthresh, mgrp_fs_target(p->avail_bps, base, tp->mss_cache));
		if (tp->snd_cwnd < tp->snd_ssthresh) {
			acked = tcp_slow_start(tp, acked);
			if (!acked)
				return;
		}
	}
	/* V from the larger of the agent's A and the flow's own delivery rate. */
	a = p && p->avail_bps > own ? p->avail_bps : own;
	target = mgrp_fs_target(a, base, tp->mss_cache);
	inc = mgrp_fs_increase(tp->snd_cwnd, target, p ? p->h : MGRP_FS_DEFAULT_H);
	tcp_cong_avoid_ai(tp, mgrp_ai_window(tp->snd_cwnd, inc), acked);
}

SEC("struct_ops")
__u32 BPF_PROG(mgrp_fs_ssthresh, struct sock *sk)
{
	return count_loss(MGRP_MODE_FS, sk);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops mgrp_fs = {
	.init = (void *)mgrp_fs_init,
	.release = (void *)mgrp_fs_release,
	.ssthresh = (void *)mgrp_fs_ssthresh,
	.cong_avoid = (void *)mgrp_fs_cong_avoid,
	.undo_cwnd = (void *)mgrp_undo_cwnd,
	.name = "mgrp_fs",
};

/* ---- LEDBAT baseline (RFC 6817, with the RTT standing in for one-way delay) ---- */

#define LEDBAT_TARGET_US 100000
#define LEDBAT_MIN_CWND 2

SEC("struct_ops")
void BPF_PROG(mgrp_ledbat_init, struct sock *sk)
{
	count_open(MGRP_MODE_LEDBAT, sk);
}

SEC("struct_ops")
void BPF_PROG(mgrp_ledbat_release, struct sock *sk)
{
	count_close(MGRP_MODE_LEDBAT);
}

/* Base delay: the minimum per minute over the last 10 minutes (RFC 6817 BASE_HISTORY = 10);
 * current delay: the minimum of the last 4 samples (CURRENT_FILTER = 4). */
SEC("struct_ops")
void BPF_PROG(mgrp_ledbat_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	struct ledbat *lb = bpf_sk_storage_get(&ledbat_state, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	__s32 rtt = sample->rtt_us;
	__u32 minute, i;

	if (!lb || rtt <= 0)
		return;
	minute = (__u32)(bpf_ktime_get_ns() / 60000000000ULL);
	i = minute % 10;
	/* A mask the compiler cannot drop bounds the index for the verifier (base has 16 slots,
	 * 10 of them used). */
	barrier_var(i);
	i &= 15;
	if (minute != lb->base_minute || lb->base[i] == 0) {
		lb->base_minute = minute;
		lb->base[i] = rtt;
	} else if ((__u32)rtt < lb->base[i]) {
		lb->base[i] = rtt;
	}
	i = lb->cur_i & 3;
	lb->cur[i] = rtt;
	lb->cur_i = (i + 1) & 3;
}

static __always_inline __u32 min_nonzero(__u32 *v, int n)
{
	__u32 m = 0xffffffff;
	for (int i = 0; i < n; i++)
		if (v[i] && v[i] < m)
			m = v[i];
	return m;
}

SEC("struct_ops")
void BPF_PROG(mgrp_ledbat_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct ledbat *ca = bpf_sk_storage_get(&ledbat_state, sk, 0, 0);
	__u32 base, cur, qdelay, cwnd_milli, steps;
	__s64 off;

	count_ack(MGRP_MODE_LEDBAT, sk, acked, !ca);
	if (!cwnd_limited(tp))
		return;
	base = ca ? min_nonzero(ca->base, 10) : 0xffffffff;
	cur = ca ? min_nonzero(ca->cur, 4) : 0xffffffff;
	if (!ca || base == 0xffffffff || cur == 0xffffffff) {
		tcp_reno_cong_avoid(sk, ack, acked);
		return;
	}
	qdelay = cur > base ? cur - base : 0;
	/* Slow start only while the queue it builds stays under half the target. */
	if (tp->snd_cwnd < tp->snd_ssthresh) {
		if (qdelay < LEDBAT_TARGET_US / 2) {
			tcp_slow_start(tp, acked);
			return;
		}
		tp->snd_ssthresh = tp->snd_cwnd;
	}
	/* cwnd += GAIN·off_target·acked/cwnd with GAIN = 1, in thousandths of a packet. */
	off = mgrp_ledbat_off_target_milli(qdelay, LEDBAT_TARGET_US);
	cwnd_milli = tp->snd_cwnd * 1000;
	if (off >= 0)
		ca->credit_milli += (__u32)off * acked;
	else
		ca->debit_milli += (__u32)(-off) * acked;
	if (ca->credit_milli >= cwnd_milli) {
		steps = ca->credit_milli / cwnd_milli;
		ca->credit_milli -= steps * cwnd_milli;
		tp->snd_cwnd += steps;
	}
	if (ca->debit_milli >= cwnd_milli) {
		steps = ca->debit_milli / cwnd_milli;
		ca->debit_milli -= steps * cwnd_milli;
		tp->snd_cwnd = tp->snd_cwnd > steps + LEDBAT_MIN_CWND ? tp->snd_cwnd - steps
								 : LEDBAT_MIN_CWND;
	}
	/* RFC 6817: cwnd ≤ flightsize + ALLOWED_INCREASE (1 packet). */
	if (tp->snd_cwnd > tp->packets_out + 1 && tp->packets_out > 0)
		tp->snd_cwnd = tp->packets_out + 1 > LEDBAT_MIN_CWND ? tp->packets_out + 1
								   : LEDBAT_MIN_CWND;
}

SEC("struct_ops")
__u32 BPF_PROG(mgrp_ledbat_ssthresh, struct sock *sk)
{
	return count_loss(MGRP_MODE_LEDBAT, sk);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops mgrp_ledbat = {
	.init = (void *)mgrp_ledbat_init,
	.release = (void *)mgrp_ledbat_release,
	.ssthresh = (void *)mgrp_ledbat_ssthresh,
	.cong_avoid = (void *)mgrp_ledbat_cong_avoid,
	.pkts_acked = (void *)mgrp_ledbat_pkts_acked,
	.undo_cwnd = (void *)mgrp_undo_cwnd,
	.name = "mgrp_ledbat",
};

/* ---- unloading: move every socket on one of ours to `fallback_cc` ---- */

/* The only variable in .data: the loader writes the name at offset 0 before loading. */
char fallback_cc[TCP_CA_NAME_MAX] = "cubic";

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} reset_moved SEC(".maps");

SEC("iter/tcp")
int mgrp_reset(struct bpf_iter__tcp *ctx)
{
	/* Every mgrp_ name: this object's and MPAT's. */
	return mgrp_reset_socket(ctx, "mgrp_", 5, fallback_cc, &reset_moved);
}
