/* The transfer modes' rules as pure integer functions: compiled into the BPF congestion controls
 * and, unchanged, into a host library that the Rust tests check against the seed's formulas
 * (seed 001 §5, ../shared/notes/seed-001.md §4). No kernel or BPF headers here: the includer
 * provides __u32/__u64/__s64. */
#ifndef MGRP_RULES_H
#define MGRP_RULES_H

#ifndef MGRP_INLINE
#define MGRP_INLINE static inline __attribute__((always_inline))
#endif

/* The bandwidth-delay product in bytes of a rate (bit/s) over an RTT (µs), saturating at 2^50
 * bytes so that the products below cannot overflow. */
MGRP_INLINE __u64 mgrp_bdp_bytes(__u64 rate_bps, __u32 rtt_us)
{
	__u64 bytes_per_s = rate_bps / 8;
	__u64 cap = 1ULL << 50;
	__u64 whole;
	/* Split the product so that it stays in 64 bits: (whole seconds' worth) + (the rest). */
	if (bytes_per_s / 1000000 > cap / ((__u64)rtt_us + 1))
		return cap;
	whole = (bytes_per_s / 1000000) * rtt_us + ((bytes_per_s % 1000000) * rtt_us) / 1000000;
	return whole > cap ? cap : whole;
}

/* Background mode: the largest cwnd (packets) a flow may have, or 0 for no cap.
 *   w = g·RTT·A / M  (g = g_milli/1000)
 *   the seed caps only when w > m·N (threshold_pkts) and leaves the flow alone below it;
 *   floor_pkts > 0 caps below the threshold too, at max(w, floor_pkts). */
MGRP_INLINE __u32 mgrp_bg_max_cwnd(__u64 avail_bps, __u32 rtt_us, __u32 mss, __u32 g_milli,
				   __u32 threshold_pkts, __u32 floor_pkts)
{
	__u64 w;
	if (mss == 0 || rtt_us == 0)
		return 0;
	w = mgrp_bdp_bytes(avail_bps, rtt_us) * g_milli / 1000 / mss;
	if (w > 0xffffffffULL)
		w = 0xffffffffULL;
	if (w > threshold_pkts)
		return (__u32)w;
	if (floor_pkts == 0)
		return 0;
	return w > floor_pkts ? (__u32)w : floor_pkts;
}

/* Full-speed mode: the target window V = A·RTT/M in packets (0 when unknown). */
MGRP_INLINE __u32 mgrp_fs_target(__u64 avail_bps, __u32 rtt_us, __u32 mss)
{
	__u64 v;
	if (mss == 0 || rtt_us == 0)
		return 0;
	v = mgrp_bdp_bytes(avail_bps, rtt_us) / mss;
	return v > 0xffffffffULL ? 0xffffffffU : (__u32)v;
}

/* Full-speed mode, congestion avoidance: the growth per RTT in packets,
 *   max(1, h·(1 − cwnd/V)), which is Reno's +1 when V is unknown or cwnd ≥ V. */
MGRP_INLINE __u32 mgrp_fs_increase(__u32 cwnd, __u32 target, __u32 h)
{
	__u64 inc;
	if (target == 0 || cwnd >= target)
		return 1;
	inc = (__u64)h * (target - cwnd) / target;
	return inc > 1 ? (__u32)inc : 1;
}

/* The window w for the kernel's additive increase (tcp_cong_avoid_ai: +1 per w packets acked)
 * that gives `increase` packets per RTT at `cwnd`. */
MGRP_INLINE __u32 mgrp_ai_window(__u32 cwnd, __u32 increase)
{
	__u32 w;
	if (increase == 0)
		increase = 1;
	w = cwnd / increase;
	return w > 0 ? w : 1;
}

/* The RTT the modes size windows with: the path's minimum (no queueing in it), else the smoothed
 * RTT before a minimum exists. A window of A·srtt grows with the queue the flow itself builds
 * (rate = window/RTT stays at A however long the queue), one of A·min_rtt drains it. */
MGRP_INLINE __u32 mgrp_base_rtt_us(__u32 min_rtt_us, __u32 srtt_us)
{
	if (min_rtt_us > 0 && (srtt_us == 0 || min_rtt_us <= srtt_us))
		return min_rtt_us;
	return srtt_us;
}

/* Queueing delay that counts as "a queue": max(1 ms, base RTT / 20), 2 ms at 40 ms. Below it
 * an RTT sample is the path's own delay plus jitter. */
MGRP_INLINE __u32 mgrp_queue_target_us(__u32 base_rtt_us)
{
	__u32 t = base_rtt_us / 20;
	return t > 1000 ? t : 1000;
}

/* Background: the smallest window a limit may leave a flow (its ack clock needs two). */
#define MGRP_BG_MIN_CWND 2

/* Background: the lift, packets a capped flow's limit is moved from the estimate's cap (limit =
 * cap + lift, at least 2), after one round (one base RTT) in which the smallest RTT sample was
 * `round_min_rtt_us`:
 *   a queue above the target all round long → limit − limit/8 (at least 1 packet): someone needs
 *     the room (the lift goes below 0: the flow yields under the estimate's cap to a standing
 *     queue it did not expect), or the flow found the path's edge. Twice the growth step, so
 *     that at the edge the limit saws between it and 1/8 under it;
 *   no queue and the flow at its limit → limit + limit/16 (at least 1): the path is empty, the
 *     estimate is stale (the foreground left), and the flow finds the room before the next
 *     estimate says so;
 *   otherwise (not at the limit, no sample) → unchanged.
 * The lift stays within [2 − cap, 2^20]. */
MGRP_INLINE __s32 mgrp_bg_lift_next(__s32 lift, __u32 cap, __u32 round_min_rtt_us,
				    __u32 base_rtt_us, int at_limit)
{
	__s64 limit = (__s64)cap + lift, next, step;
	if (round_min_rtt_us == 0 || base_rtt_us == 0)
		return lift;
	if (limit < MGRP_BG_MIN_CWND)
		limit = MGRP_BG_MIN_CWND;
	if (round_min_rtt_us > base_rtt_us + mgrp_queue_target_us(base_rtt_us)) {
		step = (__s64)((__u64)limit / 8);
		next = limit - (step > 0 ? step : 1);
	} else if (at_limit) {
		step = (__s64)((__u64)limit / 16);
		next = limit + (step > 0 ? step : 1);
	} else {
		return lift;
	}
	if (next < MGRP_BG_MIN_CWND)
		next = MGRP_BG_MIN_CWND;
	next -= cap;
	return next > (1 << 20) ? (1 << 20) : (__s32)next;
}

/* Background: the window limit for a cap (0: none) and a lift. */
MGRP_INLINE __u32 mgrp_bg_limit(__u32 cap, __s32 lift)
{
	__s64 l = (__s64)cap + lift;
	if (cap == 0)
		return 0;
	if (l < MGRP_BG_MIN_CWND)
		return MGRP_BG_MIN_CWND;
	return l > 0xffffffffLL ? 0xffffffffU : (__u32)l;
}

/* A delivery-rate sample (packets delivered over an interval, as the kernel's rate sampler
 * leaves them in tcp_sock) in bit/s; 0 when there is none. */
MGRP_INLINE __u64 mgrp_delivery_bps(__u32 delivered_pkts, __u32 interval_us, __u32 mss)
{
	if (interval_us == 0 || delivered_pkts == 0 || mss == 0)
		return 0;
	return (__u64)delivered_pkts * mss * 8 * 1000000ULL / interval_us;
}

/* Full-speed: the slow-start threshold for a fresh estimate's V (packets): slow start ends at V
 * instead of at the first loss (an A·RTT window fills the path; doubling past it only fills
 * the queue and loses up to a window). Never raises a threshold a loss set lower; V = 0 leaves
 * it. */
MGRP_INLINE __u32 mgrp_fs_ss_exit(__u32 ssthresh, __u32 target)
{
	if (target == 0)
		return ssthresh;
	if (target < 2)
		target = 2;
	return ssthresh > target ? target : ssthresh;
}

/* Full-speed: the window a new connection starts with when a fresh estimate gives V (packets):
 * V itself, paced at A, instead of slow-starting from the initial window (7–8 RTTs to a 100
 * Mbit/s, 200 ms path). Never lower than the window it has; V = 0 (no estimate or no RTT yet)
 * leaves it; at most `clamp` (the socket's snd_cwnd_clamp). */
MGRP_INLINE __u32 mgrp_fs_jump_cwnd(__u32 cwnd, __u32 target, __u32 clamp)
{
	if (target <= cwnd)
		return cwnd;
	return clamp && target > clamp ? (clamp > cwnd ? clamp : cwnd) : target;
}

/* Full-speed: a jump-started window sized with the handshake's RTT, once the path's minimum RTT
 * is found lower (the SYN met a queue, or a delay line under load): scaled by min/used, so that
 * it stays what A·RTT/M gives with the better RTT, never under 2. Unchanged otherwise. */
MGRP_INLINE __u32 mgrp_fs_jump_rescale(__u32 cwnd, __u32 rtt_used_us, __u32 rtt_now_us)
{
	__u64 w;
	if (rtt_used_us == 0 || rtt_now_us == 0 || rtt_now_us >= rtt_used_us)
		return cwnd;
	w = (__u64)cwnd * rtt_now_us / rtt_used_us;
	return w > 2 ? (__u32)w : 2;
}

/* Full-speed: the pacing rate (bytes/s) of a jump-started window, 1.2·A as the kernel paces a
 * window in congestion avoidance (tcp_update_pacing_rate), so that V packets spread over most
 * of an RTT rather than leaving as one burst into the queue. */
MGRP_INLINE __u64 mgrp_fs_jump_pacing(__u64 avail_bps)
{
	return avail_bps / 8 * 6 / 5;
}

/* LEDBAT (RFC 6817 §2.4.2): off_target = (TARGET − queuing_delay)/TARGET in thousandths,
 * clamped to [−1000, 1000] so that one RTT never takes more than one packet off the window
 * (the RFC leaves the decrease's bound to the implementation). */
MGRP_INLINE __s64 mgrp_ledbat_off_target_milli(__u32 queuing_delay_us, __u32 target_us)
{
	/* Unsigned arithmetic only: BPF before v4 has no signed division. */
	if (target_us == 0 || queuing_delay_us >= 2 * (__u64)target_us)
		return -1000;
	if (queuing_delay_us <= target_us)
		return (__s64)(((__u64)(target_us - queuing_delay_us) * 1000) / target_us);
	return -(__s64)(((__u64)(queuing_delay_us - target_us) * 1000) / target_us);
}

/* ---- MPAT (seed 003 §2) and mulTCP: windows in thousandths of a packet ---- */

#define MGRP_MPAT_MIN_MILLI 2000

/* Reno on `acked` packets charged to one of the aggregate's windows: +1 each in slow start,
 * +1/cwnd each in congestion avoidance (in thousandths: 10^6·acked/cwnd_milli). */
MGRP_INLINE __u32 mgrp_mpat_on_ack(__u32 cwnd_milli, __u32 ssthresh_milli, __u32 acked)
{
	__u64 next;
	if (cwnd_milli < MGRP_MPAT_MIN_MILLI)
		cwnd_milli = MGRP_MPAT_MIN_MILLI;
	if (cwnd_milli < ssthresh_milli)
		next = (__u64)cwnd_milli + 1000ULL * acked;
	else
		next = (__u64)cwnd_milli + 1000000ULL * acked / cwnd_milli;
	return next > 0x7fffffffULL ? 0x7fffffffU : (__u32)next;
}

/* One halving per window per RTT: a loss within rtt of the last halving is the same episode.
 * last_ns == 0: never halved. */
MGRP_INLINE int mgrp_mpat_may_halve(__u64 now_ns, __u64 last_ns, __u64 rtt_ns)
{
	if (last_ns == 0)
		return 1;
	return now_ns >= last_ns && now_ns - last_ns >= rtt_ns;
}

/* The halved window (Reno's ssthresh), not below 2 packets. */
MGRP_INLINE __u32 mgrp_mpat_halve(__u32 cwnd_milli)
{
	__u32 h = cwnd_milli / 2;
	return h > MGRP_MPAT_MIN_MILLI ? h : MGRP_MPAT_MIN_MILLI;
}

/* A member's cwnd in packets: x_i·C rounded to the nearest, at least 2 (a flow needs two
 * packets in flight to keep its ack clock). */
MGRP_INLINE __u32 mgrp_mpat_member_cwnd(__u64 csum_milli, __u32 weight, __u32 weight_sum)
{
	__u64 w;
	if (weight_sum == 0 || weight == 0)
		return 2;
	if (weight > weight_sum)
		weight = weight_sum;
	w = (csum_milli * weight / weight_sum + 500) / 1000;
	if (w < 2)
		return 2;
	return w > 0xffffffULL ? 0xffffffU : (__u32)w;
}

/* The window an ack or loss is charged to: drawn with probability cwnd_j / C, which is how
 * often window j carries a packet in the per-packet reference (each window carries its cwnd
 * per RTT). `r` is a random 32-bit number; n ≤ 16 windows. */
MGRP_INLINE __u32 mgrp_mpat_pick(const __u32 *cwnd_milli, __u32 n, __u32 r)
{
	__u64 total = 0, at;
	__u32 j;
	for (j = 0; j < 16; j++)
		if (j < n)
			total += cwnd_milli[j];
	if (total == 0 || n == 0)
		return 0;
	at = ((__u64)r * total) >> 32;
	for (j = 0; j < 16; j++) {
		if (j >= n)
			break;
		if (at < cwnd_milli[j])
			return j;
		at -= cwnd_milli[j];
	}
	return n > 0 ? n - 1 : 0;
}

/* mulTCP (one flow acting as N): the additive-increase window for +N per RTT, and the
 * ssthresh after a loss, cwnd·(1 − 1/(2N)), not below 2. */
MGRP_INLINE __u32 mgrp_multcp_ai_window(__u32 cwnd, __u32 n)
{
	__u32 w;
	if (n == 0)
		n = 1;
	w = cwnd / n;
	return w > 0 ? w : 1;
}

MGRP_INLINE __u32 mgrp_multcp_cut(__u32 cwnd, __u32 n)
{
	__u32 cut;
	if (n == 0)
		n = 1;
	cut = cwnd / (2 * n);
	if (cut == 0)
		cut = 1;
	return cwnd > cut + 2 ? cwnd - cut : 2;
}

#endif
