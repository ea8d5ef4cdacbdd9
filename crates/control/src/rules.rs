//! The transfer modes' rules: the C functions the programs run (`src/bpf/rules.h`, compiled for
//! the host here) and the seed's formulas in floating point, which the tests hold them to.

mod ffi {
    extern "C" {
        pub fn mgrp_host_bdp_bytes(rate_bps: u64, rtt_us: u32) -> u64;
        pub fn mgrp_host_bg_max_cwnd(
            a: u64,
            rtt: u32,
            mss: u32,
            g: u32,
            thr: u32,
            floor: u32,
        ) -> u32;
        pub fn mgrp_host_fs_target(a: u64, rtt: u32, mss: u32) -> u32;
        pub fn mgrp_host_fs_increase(cwnd: u32, target: u32, h: u32) -> u32;
        pub fn mgrp_host_ai_window(cwnd: u32, inc: u32) -> u32;
        pub fn mgrp_host_base_rtt_us(min_rtt: u32, srtt: u32) -> u32;
        pub fn mgrp_host_queue_target_us(base: u32) -> u32;
        pub fn mgrp_host_bg_lift_next(lift: i32, cap: u32, rmin: u32, base: u32, at: i32) -> i32;
        pub fn mgrp_host_bg_limit(cap: u32, lift: i32) -> u32;
        pub fn mgrp_host_delivery_bps(delivered: u32, interval_us: u32, mss: u32) -> u64;
        pub fn mgrp_host_fs_ssthresh(ssthresh: u32, target: u32) -> u32;
        pub fn mgrp_host_fs_jump_cwnd(cwnd: u32, target: u32, clamp: u32) -> u32;
        pub fn mgrp_host_fs_jump_pacing(avail_bps: u64) -> u64;
        pub fn mgrp_host_fs_jump_rescale(cwnd: u32, rtt_used: u32, rtt_now: u32) -> u32;
        pub fn mgrp_host_ledbat_off_target_milli(qdelay_us: u32, target_us: u32) -> i64;
        pub fn mgrp_host_mpat_on_ack(cwnd: u32, ssthresh: u32, acked: u32) -> u32;
        pub fn mgrp_host_mpat_may_halve(now: u64, last: u64, rtt: u64) -> i32;
        pub fn mgrp_host_mpat_halve(cwnd: u32) -> u32;
        pub fn mgrp_host_mpat_member_cwnd(csum: u64, weight: u32, weight_sum: u32) -> u32;
        pub fn mgrp_host_mpat_pick(cwnd: *const u32, n: u32, r: u32) -> u32;
        pub fn mgrp_host_multcp_ai_window(cwnd: u32, n: u32) -> u32;
        pub fn mgrp_host_multcp_ssthresh(cwnd: u32, n: u32) -> u32;
    }
}

/// Bytes in flight at `rate_bps` over `rtt_us` (saturating at 2^50), as the programs compute it.
pub fn bdp_bytes(rate_bps: u64, rtt_us: u32) -> u64 {
    // SAFETY: a pure C function of its arguments.
    unsafe { ffi::mgrp_host_bdp_bytes(rate_bps, rtt_us) }
}

/// Background: the largest cwnd in packets, or 0 for no cap (see `rules.h`).
pub fn bg_max_cwnd(
    avail_bps: u64,
    rtt_us: u32,
    mss: u32,
    g_milli: u32,
    threshold: u32,
    floor: u32,
) -> u32 {
    // SAFETY: as above.
    unsafe { ffi::mgrp_host_bg_max_cwnd(avail_bps, rtt_us, mss, g_milli, threshold, floor) }
}

/// Full-speed: V = A·RTT/M in packets.
pub fn fs_target(avail_bps: u64, rtt_us: u32, mss: u32) -> u32 {
    // SAFETY: as above.
    unsafe { ffi::mgrp_host_fs_target(avail_bps, rtt_us, mss) }
}

/// Full-speed: the increase per RTT, max(1, h(1 − cwnd/V)).
pub fn fs_increase(cwnd: u32, target: u32, h: u32) -> u32 {
    // SAFETY: as above.
    unsafe { ffi::mgrp_host_fs_increase(cwnd, target, h) }
}

/// The kernel's additive-increase window for `increase` packets per RTT at `cwnd`.
pub fn ai_window(cwnd: u32, increase: u32) -> u32 {
    // SAFETY: as above.
    unsafe { ffi::mgrp_host_ai_window(cwnd, increase) }
}

/// The RTT windows are sized with: the minimum RTT, else the smoothed one.
pub fn base_rtt_us(min_rtt_us: u32, srtt_us: u32) -> u32 {
    // SAFETY: a pure C function of its arguments.
    unsafe { ffi::mgrp_host_base_rtt_us(min_rtt_us, srtt_us) }
}

/// Queueing delay that counts as a queue: max(1 ms, base RTT / 20).
pub fn queue_target_us(base_rtt_us: u32) -> u32 {
    // SAFETY: as above.
    unsafe { ffi::mgrp_host_queue_target_us(base_rtt_us) }
}

/// Background: the lift (limit − cap) after a round whose smallest RTT sample was
/// `round_min_rtt_us` (see `rules.h`).
pub fn bg_lift_next(
    lift: i32,
    cap: u32,
    round_min_rtt_us: u32,
    base_rtt_us: u32,
    at_limit: bool,
) -> i32 {
    // SAFETY: as above.
    unsafe {
        ffi::mgrp_host_bg_lift_next(lift, cap, round_min_rtt_us, base_rtt_us, at_limit as i32)
    }
}

/// Background: the window limit for a cap (0: none) and a lift, at least 2 packets.
pub fn bg_limit(cap: u32, lift: i32) -> u32 {
    // SAFETY: as above.
    unsafe { ffi::mgrp_host_bg_limit(cap, lift) }
}

/// A delivery-rate sample in bit/s.
pub fn delivery_bps(delivered_pkts: u32, interval_us: u32, mss: u32) -> u64 {
    // SAFETY: as above.
    unsafe { ffi::mgrp_host_delivery_bps(delivered_pkts, interval_us, mss) }
}

/// Full-speed: the slow-start threshold once a fresh estimate's V is known.
pub fn fs_ssthresh(ssthresh: u32, target: u32) -> u32 {
    // SAFETY: as above.
    unsafe { ffi::mgrp_host_fs_ssthresh(ssthresh, target) }
}

/// Full-speed: the window a new connection starts with when a fresh estimate gives V.
pub fn fs_jump_cwnd(cwnd: u32, target: u32, clamp: u32) -> u32 {
    // SAFETY: as above.
    unsafe { ffi::mgrp_host_fs_jump_cwnd(cwnd, target, clamp) }
}

/// Full-speed: a jump-started window rescaled to a lower minimum RTT than it was sized with.
pub fn fs_jump_rescale(cwnd: u32, rtt_used_us: u32, rtt_now_us: u32) -> u32 {
    // SAFETY: as above.
    unsafe { ffi::mgrp_host_fs_jump_rescale(cwnd, rtt_used_us, rtt_now_us) }
}

/// Full-speed: the pacing rate (bytes/s) of a jump-started window.
pub fn fs_jump_pacing(avail_bps: u64) -> u64 {
    // SAFETY: as above.
    unsafe { ffi::mgrp_host_fs_jump_pacing(avail_bps) }
}

/// LEDBAT's off_target in thousandths, clamped to [−1000, 1000].
pub fn ledbat_off_target_milli(queuing_delay_us: u32, target_us: u32) -> i64 {
    // SAFETY: as above.
    unsafe { ffi::mgrp_host_ledbat_off_target_milli(queuing_delay_us, target_us) }
}

/// MPAT: Reno on `acked` packets charged to a window (thousandths of a packet).
pub fn mpat_on_ack(cwnd_milli: u32, ssthresh_milli: u32, acked: u32) -> u32 {
    // SAFETY: a pure C function of its arguments.
    unsafe { ffi::mgrp_host_mpat_on_ack(cwnd_milli, ssthresh_milli, acked) }
}

/// MPAT: may a window halve now (last = 0: never halved)?
pub fn mpat_may_halve(now_ns: u64, last_ns: u64, rtt_ns: u64) -> bool {
    // SAFETY: as above.
    unsafe { ffi::mgrp_host_mpat_may_halve(now_ns, last_ns, rtt_ns) != 0 }
}

/// MPAT: the halved window, not below 2 packets (thousandths).
pub fn mpat_halve(cwnd_milli: u32) -> u32 {
    // SAFETY: as above.
    unsafe { ffi::mgrp_host_mpat_halve(cwnd_milli) }
}

/// MPAT: a member's cwnd in packets, max(2, round(x_i·C)).
pub fn mpat_member_cwnd(csum_milli: u64, weight: u32, weight_sum: u32) -> u32 {
    // SAFETY: as above.
    unsafe { ffi::mgrp_host_mpat_member_cwnd(csum_milli, weight, weight_sum) }
}

/// MPAT: the window (index) a random `r` charges an ack or loss to, ∝ cwnd. At most 16.
pub fn mpat_pick(cwnd_milli: &[u32], r: u32) -> u32 {
    let mut w = [0u32; 16];
    let n = cwnd_milli.len().min(16);
    w[..n].copy_from_slice(&cwnd_milli[..n]);
    // SAFETY: w has the 16 slots the C function may read.
    unsafe { ffi::mgrp_host_mpat_pick(w.as_ptr(), n as u32, r) }
}

/// mulTCP: the additive-increase window for +N per RTT.
pub fn multcp_ai_window(cwnd: u32, n: u32) -> u32 {
    // SAFETY: as above.
    unsafe { ffi::mgrp_host_multcp_ai_window(cwnd, n) }
}

/// mulTCP: cwnd·(1 − 1/(2N)), not below 2.
pub fn multcp_ssthresh(cwnd: u32, n: u32) -> u32 {
    // SAFETY: as above.
    unsafe { ffi::mgrp_host_multcp_ssthresh(cwnd, n) }
}

/// The seed's formulas, in floating point (packets).
pub mod seed {
    /// MaxCwnd = g·RTT·A/M when g·RTT·A > m·N (packets), else no cap.
    pub fn bg_max_cwnd(avail_bps: f64, rtt_s: f64, mss: f64, g: f64, m_n: f64) -> Option<f64> {
        let w = g * rtt_s * avail_bps / 8.0 / mss;
        (w > m_n).then_some(w)
    }

    /// One RTT of full-speed congestion avoidance: cwnd + max(1, h(1 − cwnd/V)).
    pub fn fs_next_cwnd(cwnd: f64, v: f64, h: f64) -> f64 {
        cwnd + (h * (1.0 - cwnd / v)).max(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u32 = 1448;

    #[test]
    fn bdp_is_exact_and_saturates() {
        assert_eq!(bdp_bytes(8_000_000, 1_000_000), 1_000_000);
        assert_eq!(bdp_bytes(10_000_000, 40_000), 50_000);
        assert_eq!(bdp_bytes(u64::MAX, u32::MAX), 1 << 50);
        assert_eq!(bdp_bytes(0, 1000), 0);
    }

    #[test]
    fn background_cap_follows_the_seed_within_one_packet() {
        // The seed's setting: A = 10 Mbit/s spare, RTT 40 ms, g = 0.9 → 31.1 packets of 1448 B.
        for &(a, rtt_us) in &[
            (10e6, 40_000u32),
            (50e6, 40_000),
            (100e6, 200_000),
            (2e6, 100_000),
            (1e9, 1_000),
            (300e6, 12_345),
        ] {
            let want = seed::bg_max_cwnd(a, rtt_us as f64 / 1e6, MSS as f64, 0.9, 25.0);
            let got = bg_max_cwnd(a as u64, rtt_us, MSS, 900, 25, 0);
            match want {
                Some(w) => assert!(
                    (got as f64 - w).abs() <= 1.0,
                    "A={a} rtt={rtt_us}: {got} vs {w}"
                ),
                None => assert_eq!(got, 0, "A={a} rtt={rtt_us}: seed leaves it uncapped"),
            }
        }
    }

    #[test]
    fn background_below_threshold_seed_or_floor() {
        // 2 Mbit/s × 40 ms × 0.9 = 6.2 packets: under m·N = 25.
        assert_eq!(bg_max_cwnd(2_000_000, 40_000, MSS, 900, 25, 0), 0);
        assert_eq!(bg_max_cwnd(2_000_000, 40_000, MSS, 900, 0, 2), 6);
        // Nothing available: the floor holds.
        assert_eq!(bg_max_cwnd(0, 40_000, MSS, 900, 0, 2), 2);
        // No RTT or MSS yet: no cap rather than a division by zero.
        assert_eq!(bg_max_cwnd(10_000_000, 0, MSS, 900, 0, 2), 0);
        assert_eq!(bg_max_cwnd(10_000_000, 40_000, 0, 900, 0, 2), 0);
    }

    #[test]
    fn full_speed_growth_matches_the_seed() {
        // 100 Mbit/s × 200 ms = 1726 packets of 1448 B.
        let v = fs_target(100_000_000, 200_000, MSS);
        assert_eq!(v, 1726);
        for &(cwnd, h) in &[
            (10u32, 100u32),
            (500, 100),
            (1700, 100),
            (1726, 100),
            (3000, 100),
            (10, 1),
        ] {
            let want = seed::fs_next_cwnd(cwnd as f64, v as f64, h as f64) - cwnd as f64;
            let got = fs_increase(cwnd, v, h);
            assert!(
                (got as f64 - want).abs() < 1.0,
                "cwnd {cwnd} h {h}: {got} vs {want}"
            );
        }
        // Unknown V: Reno's +1.
        assert_eq!(fs_increase(10, 0, 100), 1);
    }

    #[test]
    fn additive_window_gives_the_increase_per_rtt() {
        // +inc per RTT means +1 every cwnd/inc packets acked.
        assert_eq!(ai_window(100, 1), 100);
        assert_eq!(ai_window(100, 10), 10);
        assert_eq!(ai_window(5, 100), 1);
        assert_eq!(ai_window(0, 0), 1);
        // Iterating the per-ack rule over a few RTTs lands where the per-RTT formula does.
        let (v, h) = (1726u32, 100u32);
        let (mut cwnd, mut fcwnd) = (100u32, 100f64);
        for _ in 0..10 {
            let w = ai_window(cwnd, fs_increase(cwnd, v, h));
            cwnd += cwnd / w;
            fcwnd = seed::fs_next_cwnd(fcwnd, v as f64, h as f64);
        }
        assert!(
            (cwnd as f64 - fcwnd).abs() / fcwnd < 0.05,
            "{cwnd} vs {fcwnd}"
        );
    }

    #[test]
    fn windows_use_the_minimum_rtt() {
        // A standing queue of 20 ms on a 40 ms path: the cap is sized with 40 ms, so the flow's
        // rate is g·A·40/60 while the queue stands and it drains.
        assert_eq!(base_rtt_us(40_000, 60_000), 40_000);
        assert_eq!(base_rtt_us(0, 60_000), 60_000);
        // A minimum above the smoothed RTT (route change): the smaller, current one.
        assert_eq!(base_rtt_us(80_000, 60_000), 60_000);
        assert_eq!(base_rtt_us(40_000, 0), 40_000);
        let cap = bg_max_cwnd(10_000_000, base_rtt_us(40_000, 60_000), MSS, 900, 0, 2);
        assert_eq!(cap, bg_max_cwnd(10_000_000, 40_000, MSS, 900, 0, 2));
        assert_eq!(queue_target_us(40_000), 2000);
        assert_eq!(queue_target_us(10_000), 1000);
    }

    #[test]
    fn the_lift_grows_on_an_empty_path_and_shrinks_on_a_queue() {
        let base = 40_000;
        // At the limit, no queue: the limit +1/16 a round (32 → 34).
        assert_eq!(bg_lift_next(0, 32, 40_500, base, true), 2);
        assert_eq!(bg_lift_next(6, 4, 40_500, base, true), 7);
        // Not at the limit: unchanged; no sample: unchanged.
        assert_eq!(bg_lift_next(10, 32, 40_500, base, false), 10);
        assert_eq!(bg_lift_next(10, 32, 0, base, true), 10);
        assert_eq!(bg_lift_next(10, 32, 42_000, base, true), 12);
        // A standing queue above 2 ms: the limit −1/8 (42 → 37), at the limit or not, and below
        // the cap when the queue stays (32 → 28: a lift of −4), never under 2 packets.
        assert_eq!(bg_lift_next(10, 32, 42_001, base, true), 5);
        assert_eq!(bg_lift_next(10, 32, 42_001, base, false), 5);
        assert_eq!(bg_lift_next(0, 32, 50_000, base, true), -4);
        assert_eq!(bg_lift_next(-29, 32, 50_000, base, true), -30);
        assert_eq!(bg_lift_next(-40, 32, 50_000, base, true), -30);
        assert_eq!(bg_limit(32, -30), 2);
        assert_eq!(bg_limit(32, -100), 2);
        assert_eq!(bg_limit(32, 5), 37);
        assert_eq!(bg_limit(0, 5), 0, "no cap, no limit");
        assert_eq!(bg_lift_next(i32::MAX, 32, 40_000, base, true), 1 << 20);
        // From a 9 Mbit/s cap (31 packets at 40 ms) the limit reaches 0.9 × 48 Mbit/s
        // (149 packets) in about 26 rounds, about 1 s, when the path stays empty.
        let cap = bg_max_cwnd(10_000_000, base, MSS, 900, 0, 2);
        let target = bg_max_cwnd(48_000_000, base, MSS, 900, 0, 2);
        let mut lift = 0;
        let mut rounds = 0;
        while bg_limit(cap, lift) < target {
            lift = bg_lift_next(lift, cap, base, base, true);
            rounds += 1;
        }
        assert!((20..=30).contains(&rounds), "{rounds} rounds");
    }

    #[test]
    fn delivery_rate_and_slow_start_exit() {
        // 10 packets of 1448 B in 1 ms: 115.84 Mbit/s.
        assert_eq!(delivery_bps(10, 1000, MSS), 115_840_000);
        assert_eq!(delivery_bps(10, 0, MSS), 0);
        assert_eq!(delivery_bps(0, 1000, MSS), 0);
        // Slow start ends at V; a threshold a loss set lower stays.
        assert_eq!(fs_ssthresh(0x7fff_ffff, 1726), 1726);
        assert_eq!(fs_ssthresh(500, 1726), 500);
        assert_eq!(fs_ssthresh(500, 0), 500);
        assert_eq!(fs_ssthresh(500, 1), 2);
    }

    #[test]
    fn jump_start_is_v_paced_at_a() {
        // 100 Mbit/s over 200 ms with 1448 B segments: V = 1726 packets, from the seed's formula.
        let v = fs_target(100_000_000, 200_000, MSS);
        assert_eq!(v, (100e6 * 0.2 / 8.0 / 1448.0) as u32);
        assert_eq!(fs_jump_cwnd(10, v, u32::MAX), v);
        // Never lowers a window, never without V, never past the clamp.
        assert_eq!(fs_jump_cwnd(2000, v, u32::MAX), 2000);
        assert_eq!(fs_jump_cwnd(10, 0, u32::MAX), 10);
        assert_eq!(fs_jump_cwnd(10, v, 1000), 1000);
        assert_eq!(fs_jump_cwnd(10, v, 0), v);
        assert_eq!(fs_jump_cwnd(10, v, 5), 10);
        // 1.2·A in bytes/s: 15 MB/s at 100 Mbit/s; no overflow at the largest rate.
        assert_eq!(fs_jump_pacing(100_000_000), 15_000_000);
        assert_eq!(fs_jump_pacing(u64::MAX), u64::MAX / 8 * 6 / 5);
        // A handshake RTT of 490 ms on a 100 ms path (seen under load): V 677 → 138, the
        // seed's V with the true RTT; a higher or equal RTT, or none, changes nothing.
        let high = fs_target(16_000_000, 490_000, MSS);
        assert_eq!(high, 676);
        assert_eq!(fs_jump_rescale(high, 490_000, 100_000), 137);
        assert_eq!(fs_jump_rescale(138, 100_000, 120_000), 138);
        assert_eq!(fs_jump_rescale(138, 0, 100_000), 138);
        assert_eq!(fs_jump_rescale(3, 100_000, 1_000), 2);
    }

    #[test]
    fn ledbat_off_target() {
        assert_eq!(ledbat_off_target_milli(0, 100_000), 1000);
        assert_eq!(ledbat_off_target_milli(50_000, 100_000), 500);
        assert_eq!(ledbat_off_target_milli(100_000, 100_000), 0);
        assert_eq!(ledbat_off_target_milli(150_000, 100_000), -500);
        assert_eq!(ledbat_off_target_milli(400_000, 100_000), -1000);
        assert_eq!(ledbat_off_target_milli(10, 0), -1000);
    }

    #[test]
    fn mpat_window_rules_match_the_reference() {
        use crate::mpat::{may_halve, Mpat, Ticket};
        // One window through slow start and congestion avoidance, a loss, and more acks: the
        // kernel's thousandths track the reference's floats.
        let mut m = Mpat::new(1);
        m.join(0, 1.0).unwrap();
        m.set_window(0, 2.0, 10.0);
        let (mut c, mut s) = (2000u32, 10_000u32);
        let t = Ticket { flow: 0, window: 0 };
        for i in 0..400u64 {
            if i == 200 {
                m.loss(t, 1_000_000_000, 40_000_000);
                if mpat_may_halve(1_000_000_000, 0, 40_000_000) {
                    s = mpat_halve(c);
                    c = s;
                }
            } else {
                m.ack(t);
                c = mpat_on_ack(c, s, 1);
            }
            let want = m.window(0).unwrap().cwnd;
            // Each ack truncates under a thousandth of a packet: within 0.5 %.
            assert!(
                (c as f64 / 1000.0 - want).abs() / want < 0.005,
                "ack {i}: {c} vs {want}"
            );
        }
        for &(now, last, rtt) in &[
            (5u64, 0u64, 10u64),
            (15, 10, 10),
            (19, 10, 10),
            (25, 10, 10),
        ] {
            let r = if last == 0 { None } else { Some(last) };
            assert_eq!(mpat_may_halve(now, last, rtt), may_halve(now, r, rtt));
        }
        assert_eq!(mpat_halve(3000), 2000);
        assert_eq!(mpat_halve(50_000), 25_000);
    }

    #[test]
    fn mpat_member_share_matches_the_reference() {
        use crate::mpat::{whole_packets, Mpat};
        let mut m = Mpat::new(1);
        for (i, w) in [1.0, 2.0, 3.0].iter().enumerate() {
            m.join(i as u64, *w).unwrap();
            m.set_window(i as u64, 17.3, 1.0);
        }
        let csum = (m.aggregate_cwnd() * 1000.0).round() as u64;
        for (i, w) in [1u32, 2, 3].iter().enumerate() {
            let want = whole_packets(m.flow(i as u64).unwrap().allowance).max(2);
            assert_eq!(mpat_member_cwnd(csum, *w, 6), want);
        }
        // A tiny share keeps two packets; bad sums do not divide by zero.
        assert_eq!(mpat_member_cwnd(100_000, 1, 1000), 2);
        assert_eq!(mpat_member_cwnd(100_000, 1, 0), 2);
        assert_eq!(mpat_member_cwnd(100_000, 9, 3), 100);
    }

    #[test]
    fn mpat_pick_is_proportional_to_cwnd() {
        let cw = [1000u32, 3000, 6000];
        let mut hits = [0u32; 3];
        let mut rng = crate::mpat::Rng::new(3);
        for _ in 0..30_000 {
            hits[mpat_pick(&cw, rng.next_u64() as u32) as usize] += 1;
        }
        for (h, c) in hits.iter().zip(cw) {
            let want = 30_000.0 * c as f64 / 10_000.0;
            assert!((*h as f64 - want).abs() / want < 0.05, "{hits:?}");
        }
        assert_eq!(mpat_pick(&cw, 0), 0);
        assert_eq!(mpat_pick(&cw, u32::MAX), 2);
        assert_eq!(mpat_pick(&[], 7), 0);
    }

    #[test]
    fn multcp_rules() {
        // +N per RTT: one more packet every cwnd/N acked.
        assert_eq!(multcp_ai_window(90, 3), 30);
        assert_eq!(multcp_ai_window(2, 5), 1);
        // Cut by 1/(2N): N = 1 is Reno's half, N = 4 takes an eighth.
        assert_eq!(multcp_ssthresh(100, 1), 50);
        assert_eq!(multcp_ssthresh(80, 4), 70);
        assert_eq!(multcp_ssthresh(3, 4), 2);
        assert_eq!(multcp_ssthresh(100, 0), 50);
    }
}
