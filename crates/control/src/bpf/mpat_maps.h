/* MPAT's maps, shared by mpat.bpf.c and the loader (src/mpat_kernel.rs mirrors them with
 * #[repr(C)]; keep the two in step). */
#ifndef MGRP_MPAT_MAPS_H
#define MGRP_MPAT_MAPS_H

#define MGRP_MPAT_AGGS 64	/* aggregates; the id is the index */
#define MGRP_MPAT_WINDOWS 16	/* windows (= member flows counted) per aggregate */
#define MGRP_MPAT_RULES 1024

/* A member rule: destination (IPv6 or v4-mapped; all zero = any) and port (0 = any). */
struct mgrp_mpat_rule_key {
	__u8 addr[16];
	__u16 port;
	__u16 pad;
};

struct mgrp_mpat_rule {
	__u32 agg;
	__u32 weight;		/* > 0; the share is weight / Σ weights of the aggregate's flows */
	__u64 flows;		/* sockets that matched, ever */
	__u64 acked_bytes;	/* their acked bytes */
};

/* An aggregate: the windows of its member flows, in thousandths of a packet. */
struct mgrp_mpat_agg {
	struct bpf_spin_lock lock;
	__u32 used;		/* set by the loader; flows of an unused slot are left alone */
	__u32 n;		/* windows = member flows now */
	__u32 weight_sum;	/* Σ weights of the member flows now */
	__u32 gen;		/* bumped each time the slot is created: members of a removed
				 * aggregate do not touch its successor */
	__u32 pad;
	__u64 csum_milli;	/* C = Σ cwnd */
	__u32 cwnd_milli[MGRP_MPAT_WINDOWS];
	__u32 ssthresh_milli[MGRP_MPAT_WINDOWS];
	__u64 last_halving_ns[MGRP_MPAT_WINDOWS];
	__u64 acks;
	__u64 losses;
	__u64 halvings;
	__u64 flows_opened;
	__u64 flows_closed;
	__u64 refused;		/* flows that matched but found the aggregate full */
};

#endif
