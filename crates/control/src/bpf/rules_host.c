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
__s64 mgrp_host_ledbat_off_target_milli(__u32 qd, __u32 t)
{
	return mgrp_ledbat_off_target_milli(qd, t);
}
