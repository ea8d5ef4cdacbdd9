/* The maps shared by the congestion controls and the agent. Layouts are mirrored in
 * src/maps.rs (#[repr(C)]); keep the two in step. */
#ifndef MGRP_MAPS_H
#define MGRP_MAPS_H

#define MGRP_MODE_BG 0
#define MGRP_MODE_FS 1
#define MGRP_MODE_LEDBAT 2
#define MGRP_MODES 3

/* A destination: IPv6, or IPv4 mapped (::ffff:a.b.c.d). */
struct mgrp_path_key {
	__u8 addr[16];
};

/* What the agent knows about the path to a destination. */
struct mgrp_path {
	__u64 avail_bps;	/* A, already corrected for the background flows' own rate */
	__u64 updated_ns;	/* CLOCK_MONOTONIC when written (bpf_ktime_get_ns' clock) */
	__u64 max_age_ns;	/* older than this: fall back to the base behaviour */
	__u32 g_milli;		/* background: share of A to use, ×1000 (seed: 900) */
	__u32 threshold_pkts;	/* background: cap only above this many packets (seed: m·N = 25) */
	__u32 floor_pkts;	/* background: below the threshold cap at max(w, floor); 0 = no cap */
	__u32 h;		/* full-speed: growth factor (seed: 100) */
	__u32 flags;		/* MGRP_PATH_* */
	__u32 reserved;
};

/* Background: lift the cap while the path shows no queue (the estimate is stale). */
#define MGRP_PATH_PROBE 1
/* Full-speed: a new connection starts at V, paced at 1.2·A (jump start). */
#define MGRP_PATH_JUMP 2

/* Per mode; the agent reads them for its metrics. */
struct mgrp_mode_stats {
	__u64 flows_opened;
	__u64 flows_closed;
	__u64 acked_bytes;
	__u64 acks;
	__u64 acks_no_estimate;	/* acks handled by the base behaviour: no fresh estimate */
	__u64 acks_limited;	/* background: acks at which the cap held cwnd down */
	__u64 limited_ns;	/* background: time spent with cwnd held at the cap */
	__u64 losses;		/* ssthresh calls: loss or ECN reductions */
};

#endif
