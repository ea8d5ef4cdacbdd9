// SPDX-License-Identifier: GPL-2.0
/* `mgrp run --mode M -- CMD`: every TCP socket of the cgroup CMD runs in gets congestion
 * control `cc` before its SYN (active) or once established (passive). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char _license[] SEC("license") = "GPL";

#define SOL_TCP 6
#define TCP_CONGESTION 13

/* The only variable in .data: the loader writes the name at offset 0 before loading. */
char cc[16] = "mgrp_bg";

/* [0] sockets moved to `cc`, [1] sockets whose setsockopt failed. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} run_counts SEC(".maps");

static __always_inline void count(__u32 i)
{
	__u64 *c = bpf_map_lookup_elem(&run_counts, &i);
	if (c)
		__sync_fetch_and_add(c, 1);
}

SEC("sockops")
int mgrp_run_sockops(struct bpf_sock_ops *skops)
{
	switch (skops->op) {
	case BPF_SOCK_OPS_TCP_CONNECT_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		count(bpf_setsockopt(skops, SOL_TCP, TCP_CONGESTION, cc, sizeof(cc)) ? 1 : 0);
		break;
	}
	return 1;
}
