/* The rules of rules.h as exported host functions, for the Rust tests. */
#include <linux/types.h>
#define MGRP_INLINE static inline
#include "rules.h"

__u64 mgrp_host_bdp_bytes(__u64 r, __u32 rtt) { return mgrp_bdp_bytes(r, rtt); }
__u32 mgrp_host_bg_max_cwnd(__u64 a, __u32 rtt, __u32 mss, __u32 g, __u32 thr, __u32 floor)
{
	return mgrp_bg_max_cwnd(a, rtt, mss, g, thr, floor);
}
__u32 mgrp_host_fs_target(__u64 a, __u32 rtt, __u32 mss) { return mgrp_fs_target(a, rtt, mss); }
__u32 mgrp_host_fs_increase(__u32 cwnd, __u32 v, __u32 h) { return mgrp_fs_increase(cwnd, v, h); }
__u32 mgrp_host_ai_window(__u32 cwnd, __u32 inc) { return mgrp_ai_window(cwnd, inc); }
__u32 mgrp_host_base_rtt_us(__u32 m, __u32 s) { return mgrp_base_rtt_us(m, s); }
__u32 mgrp_host_queue_target_us(__u32 b) { return mgrp_queue_target_us(b); }
__s32 mgrp_host_bg_lift_next(__s32 lift, __u32 cap, __u32 rmin, __u32 base, int at)
{
	return mgrp_bg_lift_next(lift, cap, rmin, base, at);
}
__u32 mgrp_host_bg_limit(__u32 cap, __s32 lift) { return mgrp_bg_limit(cap, lift); }
__u64 mgrp_host_delivery_bps(__u32 d, __u32 i, __u32 mss) { return mgrp_delivery_bps(d, i, mss); }
__u32 mgrp_host_fs_ssthresh(__u32 s, __u32 v) { return mgrp_fs_ss_exit(s, v); }
__u32 mgrp_host_fs_jump_cwnd(__u32 c, __u32 v, __u32 k) { return mgrp_fs_jump_cwnd(c, v, k); }
__u32 mgrp_host_fs_jump_rescale(__u32 c, __u32 u, __u32 n) { return mgrp_fs_jump_rescale(c, u, n); }
__u64 mgrp_host_fs_jump_pacing(__u64 a) { return mgrp_fs_jump_pacing(a); }
__s64 mgrp_host_ledbat_off_target_milli(__u32 qd, __u32 t)
{
	return mgrp_ledbat_off_target_milli(qd, t);
}
__u32 mgrp_host_mpat_on_ack(__u32 c, __u32 s, __u32 a) { return mgrp_mpat_on_ack(c, s, a); }
int mgrp_host_mpat_may_halve(__u64 now, __u64 last, __u64 rtt)
{
	return mgrp_mpat_may_halve(now, last, rtt);
}
__u32 mgrp_host_mpat_halve(__u32 c) { return mgrp_mpat_halve(c); }
__u32 mgrp_host_mpat_member_cwnd(__u64 c, __u32 w, __u32 ws)
{
	return mgrp_mpat_member_cwnd(c, w, ws);
}
__u32 mgrp_host_mpat_pick(const __u32 *c, __u32 n, __u32 r) { return mgrp_mpat_pick(c, n, r); }
__u32 mgrp_host_multcp_ai_window(__u32 c, __u32 n) { return mgrp_multcp_ai_window(c, n); }
__u32 mgrp_host_multcp_ssthresh(__u32 c, __u32 n) { return mgrp_multcp_cut(c, n); }
