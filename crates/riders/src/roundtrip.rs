//! Sender buffer → riders and standalone fragments → receiver: every packet arrives byte for
//! byte, whatever the order the chunks travel in, and none waits longer than `T`.

use crate::{BufferConfig, Expired, Packet, PayloadBuffer, Reassembler, ReassemblyConfig};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::net::{IpAddr, Ipv4Addr};

const US: u64 = 1_000;
const MS: u64 = 1_000_000;
const TICK: u64 = 100 * US;

struct Train {
    next_probe_ns: u64,
    left: u32,
    gap_ns: u64,
    space: usize,
}

#[test]
fn buffer_to_reassembler_byte_for_byte() {
    for seed in 0..40 {
        let mut rng = StdRng::seed_from_u64(seed);
        let cfg = BufferConfig {
            hold_ns: rng.random_range(1..20) * MS,
            min_fragment: rng.random_range(1..200),
            ..BufferConfig::default()
        };
        let mut pb = PayloadBuffer::with_first_frag_id(cfg, rng.random());
        let sender = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
        let dsts: Vec<IpAddr> = (0..3)
            .map(|i| IpAddr::V4(Ipv4Addr::new(198, 51, 100, i)))
            .collect();
        let max_chunk = rng.random_range(200..1500);
        // Per destination: packets pushed, packets sent normally, chunks sent in probes or alone.
        let mut pushed = vec![Vec::new(); 3];
        let mut normal = vec![Vec::new(); 3];
        let mut chunks = vec![Vec::new(); 3];
        let mut trains: Vec<Option<Train>> = (0..3).map(|_| None).collect();
        let mut serial = 0u32;
        let leave = |now: u64, enqueued: u64| {
            assert!(
                now - enqueued <= cfg.hold_ns + TICK,
                "seed {seed}: held too long"
            );
        };
        let ix = |d: IpAddr| dsts.iter().position(|x| *x == d).unwrap();

        let mut now = 0;
        while now < 2_000 * MS {
            now += TICK;
            // Host traffic: a mix of ACK-sized and MSS-sized packets, each unique.
            if rng.random_bool(0.3) {
                let d = rng.random_range(0..3);
                let len = if rng.random_bool(0.3) {
                    rng.random_range(4..100)
                } else {
                    rng.random_range(4..3000)
                };
                serial += 1;
                // Cheap distinct contents (a random byte stream is slow in debug builds).
                let salt: u8 = rng.random();
                let mut data: Vec<u8> = (0..len).map(|i| salt ^ (i as u8)).collect();
                data[..4].copy_from_slice(&serial.to_be_bytes());
                pushed[d].push(data.clone());
                let p = Packet {
                    dst: dsts[d],
                    proto: 6,
                    data,
                    enqueued_ns: 0,
                };
                if let Some(p) = pb.push(now, p) {
                    normal[d].push(p.data);
                }
            }
            for d in 0..3 {
                match &mut trains[d] {
                    None if rng.random_bool(0.01) => {
                        let t = Train {
                            next_probe_ns: now + rng.random_range(0..3) * MS,
                            left: rng.random_range(1..30),
                            gap_ns: rng.random_range(1..10) * TICK,
                            space: rng.random_range(0..1500),
                        };
                        let until = t.next_probe_ns + t.left as u64 * t.gap_ns + TICK;
                        pb.expect_train(dsts[d], now, until);
                        trains[d] = Some(t);
                    }
                    Some(t) if t.next_probe_ns <= now => {
                        // Probe sizes vary within a train; some leave no room.
                        let space = rng.random_range(0..=t.space);
                        if let Some(r) = pb.take_rider(now, dsts[d], space) {
                            assert!(r.data.len() <= space);
                            if r.last {
                                leave(now, r.enqueued_ns);
                            }
                            chunks[d].push(r);
                        }
                        t.left -= 1;
                        t.next_probe_ns = now + t.gap_ns;
                        if t.left == 0 {
                            for r in pb.end_train(now, dsts[d], max_chunk) {
                                assert!(r.data.len() <= max_chunk);
                                if r.last {
                                    leave(now, r.enqueued_ns);
                                }
                                chunks[d].push(r);
                            }
                            trains[d] = None;
                        }
                    }
                    _ => {}
                }
            }
            for e in pb.poll_expired(now, max_chunk) {
                match e {
                    Expired::Whole(p) => {
                        leave(now, p.enqueued_ns);
                        normal[ix(p.dst)].push(p.data);
                    }
                    Expired::Fragment(r) => {
                        if r.last {
                            leave(now, r.enqueued_ns);
                        }
                        chunks[ix(r.dst)].push(r);
                    }
                }
            }
        }
        // Let everything still held go.
        for e in pb.poll_expired(u64::MAX, max_chunk) {
            match e {
                Expired::Whole(p) => normal[ix(p.dst)].push(p.data),
                Expired::Fragment(r) => chunks[ix(r.dst)].push(r),
            }
        }
        assert_eq!(pb.held_packets(), 0);

        let c = pb.counters();
        assert!(
            c.riders_whole > 0 && c.riders_fragments > 0,
            "seed {seed}: {c:?}"
        );
        for d in 0..3 {
            let mut rx = Reassembler::new(ReassemblyConfig::default());
            chunks[d].shuffle(&mut rng);
            let mut got = std::mem::take(&mut normal[d]);
            for r in &chunks[d] {
                if let Some(p) = rx.push(now, sender, r.proto, r.frag_id, r.offset, r.last, &r.data)
                {
                    got.push(p);
                }
            }
            let rc = rx.counters();
            assert_eq!(rc.buckets, 0, "seed {seed}: fragments left over");
            assert_eq!(
                (rc.bad, rc.duplicates, rc.conflicting_overlaps, rc.evicted),
                (0, 0, 0, 0)
            );
            got.sort();
            pushed[d].sort();
            assert!(got == pushed[d], "seed {seed}: destination {d} differs");
        }
    }
}
