//! The receiver's reassembly of fragmented riders (seed 000 §2.6): a table of buckets keyed by
//! (source, inner protocol, fragment id), each with an RFC 815 hole list.
//!
//! A bucket starts with one open-ended hole; only a `last` fragment closes it. A fragment fills
//! what it covers of the holes; where it overlaps bytes already received they must be identical
//! (a duplicate is ignored), else the whole bucket is dropped, as RFC 5722 does for IPv6. When the
//! last hole closes the packet is complete. Buckets die 30 s after their first fragment (TCP
//! retransmits what was lost), and when room is short the oldest go first.
//!
//! A fragment that arrives after its packet was completed starts a new bucket that simply times
//! out: it counts as a fragment, not as an error (the table keeps no memory of finished ids).
//! A whole rider (offset 0 and `last`) is passed on at once and never touches the table.
//!
//! Memory is charged per bucket as its bytes plus a fixed cost for the bucket and each hole, so a
//! sender of tiny scattered fragments cannot hold more than `max_bytes` either.

use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

/// Charged per bucket beyond its data: table entry and bookkeeping.
const BUCKET_COST: usize = 64;
/// Charged per hole.
const HOLE_COST: usize = 16;
/// End of the open-ended hole (the packet's length is not known yet).
const OPEN: usize = usize::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ReassemblyConfig {
    /// A bucket is dropped this long after its first fragment.
    pub timeout_ns: u64,
    /// Bound on memory held across all buckets (data plus bookkeeping, see the module doc).
    pub max_bytes: usize,
    /// Bound on buckets (at least 1 is always allowed).
    pub max_buckets: usize,
    /// Fragments reaching beyond this are bad.
    pub max_packet_len: usize,
}

impl Default for ReassemblyConfig {
    fn default() -> Self {
        ReassemblyConfig {
            timeout_ns: 30_000_000_000,
            max_bytes: 4 << 20,
            max_buckets: 1024,
            max_packet_len: 65_535,
        }
    }
}

/// What the reassembler did, since it was made (and `bytes_held`/`buckets` now).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReassemblyCounters {
    /// Whole packets (offset 0 and `last`), passed on at once.
    pub whole: u64,
    /// Fragments that brought something new (bytes, or the packet's end).
    pub fragments: u64,
    /// Packets completed from fragments.
    pub reassembled: u64,
    /// Fragments bringing nothing new (identical overlap): ignored.
    pub duplicates: u64,
    /// Buckets dropped because a fragment's bytes differed from what was received.
    pub conflicting_overlaps: u64,
    /// Fragments refused: empty and not last, an empty whole packet, beyond `max_packet_len`,
    /// `last` at an end other than the known one, or data beyond the known end.
    pub bad: u64,
    /// Buckets dropped by the timeout.
    pub timed_out: u64,
    /// Buckets dropped, oldest first, to stay within `max_bytes`/`max_buckets`.
    pub evicted: u64,
    pub bytes_held: usize,
    pub buckets: usize,
}

type Key = (IpAddr, u8, u32);

#[derive(Debug)]
struct Bucket {
    created_ns: u64,
    seq: u64,
    /// Bytes received so far, at their offsets; as long as the furthest byte received.
    data: Vec<u8>,
    /// Holes `start -> end` (sorted, disjoint); the open one ends at [`OPEN`] and always starts
    /// at `data.len()` (nothing beyond has been received).
    holes: BTreeMap<usize, usize>,
    /// The packet's length, once a `last` fragment said it.
    end: Option<usize>,
    /// What this bucket is charged, as last computed.
    cost: usize,
}

enum Added {
    Accepted,
    Duplicate,
    Conflict,
    Bad,
}

impl Bucket {
    fn new(created_ns: u64, seq: u64) -> Self {
        let mut b = Bucket {
            created_ns,
            seq,
            data: Vec::new(),
            holes: BTreeMap::from([(0, OPEN)]),
            end: None,
            cost: 0,
        };
        b.cost = b.cost_now();
        b
    }

    fn cost_now(&self) -> usize {
        BUCKET_COST + self.data.len() + HOLE_COST * self.holes.len()
    }

    fn complete(&self) -> bool {
        self.end.is_some() && self.holes.is_empty()
    }

    /// Fragment `bytes` at `[start, end)`.
    fn add(&mut self, start: usize, end: usize, last: bool, bytes: &[u8]) -> Added {
        let mut learned_end = false;
        match (last, self.end) {
            (true, Some(e)) if e != end => return Added::Bad,
            (true, None) => {
                if self.data.len() > end {
                    return Added::Bad;
                }
                // Close the open hole at the packet's end (or drop it if nothing is missing).
                let open = self.data.len();
                self.holes.remove(&open);
                if open < end {
                    self.holes.insert(open, end);
                }
                self.end = Some(end);
                learned_end = true;
            }
            (false, Some(e)) if end > e => return Added::Bad,
            _ => {}
        }
        // Holes the fragment touches, in order: the holes starting before its end, from the
        // right, while they reach past its start.
        let touched: Vec<(usize, usize)> = {
            let mut t: Vec<(usize, usize)> = self
                .holes
                .range(..end)
                .rev()
                .take_while(|(_, &he)| he > start)
                .map(|(&hs, &he)| (hs, he))
                .collect();
            t.reverse();
            t
        };
        // Bytes of the fragment outside the holes were received before: they must match.
        let mut cur = start;
        for &(hs, he) in &touched {
            if hs > cur && !self.same(cur, hs, start, bytes) {
                return Added::Conflict;
            }
            cur = cur.max(he.min(end));
        }
        if cur < end && !self.same(cur, end, start, bytes) {
            return Added::Conflict;
        }
        if touched.is_empty() {
            return if learned_end {
                Added::Accepted
            } else {
                Added::Duplicate
            };
        }
        if end > self.data.len() {
            self.data.reserve_exact(end - self.data.len());
            self.data.resize(end, 0);
        }
        for (hs, he) in touched {
            self.holes.remove(&hs);
            let (fs, fe) = (hs.max(start), he.min(end));
            self.data[fs..fe].copy_from_slice(&bytes[fs - start..fe - start]);
            if hs < start {
                self.holes.insert(hs, start);
            }
            if he > end {
                self.holes.insert(end, he);
            }
        }
        Added::Accepted
    }

    /// Do the received bytes at `[from, to)` equal the fragment's (which starts at `start`)?
    fn same(&self, from: usize, to: usize, start: usize, bytes: &[u8]) -> bool {
        match (self.data.get(from..to), bytes.get(from - start..to - start)) {
            (Some(a), Some(b)) => a == b,
            _ => false,
        }
    }
}

#[derive(Debug)]
pub struct Reassembler {
    cfg: ReassemblyConfig,
    buckets: HashMap<Key, Bucket>,
    /// Buckets by age, oldest first: for timeouts and eviction.
    age: BTreeMap<(u64, u64), Key>,
    next_seq: u64,
    bytes_held: usize,
    counters: ReassemblyCounters,
}

impl Reassembler {
    pub fn new(cfg: ReassemblyConfig) -> Self {
        Reassembler {
            cfg,
            buckets: HashMap::new(),
            age: BTreeMap::new(),
            next_seq: 0,
            bytes_held: 0,
            counters: ReassemblyCounters::default(),
        }
    }

    pub fn config(&self) -> &ReassemblyConfig {
        &self.cfg
    }

    /// One rider (whole or fragment) from `src`. Returns the packet when it is complete: at once
    /// for a whole one (offset 0 and `last`), else when the fragment closing its last hole
    /// arrives.
    #[allow(clippy::too_many_arguments)]
    pub fn push(
        &mut self,
        now_ns: u64,
        src: IpAddr,
        proto: u8,
        frag_id: u32,
        offset: u16,
        last: bool,
        data: &[u8],
    ) -> Option<Vec<u8>> {
        let start = offset as usize;
        let end = start.saturating_add(data.len());
        if (data.is_empty() && (!last || start == 0)) || end > self.cfg.max_packet_len {
            self.counters.bad += 1;
            return None;
        }
        if start == 0 && last {
            self.counters.whole += 1;
            return Some(data.to_vec());
        }
        let key = (src, proto, frag_id);
        if !self.buckets.contains_key(&key) {
            while self.buckets.len() >= self.cfg.max_buckets.max(1) {
                if !self.evict_oldest(None) {
                    break;
                }
            }
            self.next_seq += 1;
            let b = Bucket::new(now_ns, self.next_seq);
            self.bytes_held += b.cost;
            self.age.insert((now_ns, b.seq), key);
            self.buckets.insert(key, b);
        }
        let b = self.buckets.get_mut(&key)?;
        match b.add(start, end, last, data) {
            Added::Bad => {
                self.counters.bad += 1;
                self.drop_if_empty(key);
                None
            }
            Added::Duplicate => {
                self.counters.duplicates += 1;
                None
            }
            Added::Conflict => {
                self.counters.conflicting_overlaps += 1;
                self.remove(key);
                None
            }
            Added::Accepted => {
                self.counters.fragments += 1;
                let cost = b.cost_now();
                self.bytes_held = self.bytes_held - b.cost + cost;
                b.cost = cost;
                if b.complete() {
                    self.counters.reassembled += 1;
                    return self.remove(key).map(|b| b.data);
                }
                // Make room, oldest first; if this bucket alone is too big, it goes too.
                while self.bytes_held > self.cfg.max_bytes {
                    if !self.evict_oldest(Some(key)) {
                        self.remove(key);
                        self.counters.evicted += 1;
                        break;
                    }
                }
                None
            }
        }
    }

    /// Drop buckets older than the timeout (their packets are lost; TCP recovers). Returns how
    /// many.
    pub fn poll_timeouts(&mut self, now_ns: u64) -> usize {
        let mut n = 0;
        while let Some((&(created, _), &key)) = self.age.first_key_value() {
            if created.saturating_add(self.cfg.timeout_ns) > now_ns {
                break;
            }
            self.remove(key);
            n += 1;
        }
        self.counters.timed_out += n as u64;
        n
    }

    /// When the oldest bucket times out.
    pub fn next_timeout(&self) -> Option<u64> {
        self.age
            .first_key_value()
            .map(|(&(created, _), _)| created.saturating_add(self.cfg.timeout_ns))
    }

    pub fn bytes_held(&self) -> usize {
        self.bytes_held
    }

    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }

    pub fn counters(&self) -> ReassemblyCounters {
        ReassemblyCounters {
            bytes_held: self.bytes_held,
            buckets: self.buckets.len(),
            ..self.counters.clone()
        }
    }

    fn remove(&mut self, key: Key) -> Option<Bucket> {
        let b = self.buckets.remove(&key)?;
        self.age.remove(&(b.created_ns, b.seq));
        self.bytes_held -= b.cost;
        Some(b)
    }

    /// A bucket made for a fragment that was then refused holds nothing: drop it.
    fn drop_if_empty(&mut self, key: Key) {
        if self
            .buckets
            .get(&key)
            .is_some_and(|b| b.data.is_empty() && b.end.is_none())
        {
            self.remove(key);
        }
    }

    /// Evict the oldest bucket other than `keep`. False if there is none.
    fn evict_oldest(&mut self, keep: Option<Key>) -> bool {
        let victim = self.age.values().find(|k| Some(**k) != keep).copied();
        match victim {
            Some(k) => {
                self.remove(k);
                self.counters.evicted += 1;
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::seq::SliceRandom;
    use rand::{Rng, SeedableRng};
    use std::net::Ipv4Addr;

    const SEC: u64 = 1_000_000_000;

    fn src() -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1))
    }

    /// Bookkeeping agrees with the buckets, and the bounds hold.
    fn check(r: &Reassembler) {
        let cost: usize = r.buckets.values().map(|b| b.cost_now()).sum();
        assert_eq!(cost, r.bytes_held);
        assert!(r.buckets.values().all(|b| b.cost == b.cost_now()));
        assert_eq!(r.age.len(), r.buckets.len());
        assert!(r.bytes_held <= r.cfg.max_bytes);
        assert!(r.buckets.len() <= r.cfg.max_buckets.max(1));
        for b in r.buckets.values() {
            let mut prev = 0;
            for (&s, &e) in &b.holes {
                assert!(s >= prev && s < e, "holes sorted, disjoint, non-empty");
                prev = e;
            }
            if b.end.is_none() {
                assert_eq!(b.holes.last_key_value(), Some((&b.data.len(), &OPEN)));
            }
        }
    }

    /// Cut `len` bytes into pieces of random sizes: (offset, len).
    fn cuts(rng: &mut StdRng, len: usize, max_piece: usize) -> Vec<(usize, usize)> {
        let mut v = Vec::new();
        let mut off = 0;
        while off < len {
            let n = rng.random_range(1..=max_piece).min(len - off);
            v.push((off, n));
            off += n;
        }
        v
    }

    #[test]
    fn whole_packet_at_once() {
        let mut r = Reassembler::new(ReassemblyConfig::default());
        assert_eq!(
            r.push(0, src(), 6, 1, 0, true, b"abc"),
            Some(b"abc".to_vec())
        );
        assert_eq!(r.buckets(), 0);
        assert_eq!(r.counters().whole, 1);
    }

    #[test]
    fn random_fragmentations_reassemble() {
        for seed in 0..300 {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut r = Reassembler::new(ReassemblyConfig::default());
            // A few packets at once, interleaved, with the same ids on different protocols.
            let n_pkts = rng.random_range(1..4);
            let mut pkts = Vec::new();
            let mut pieces = Vec::new();
            for i in 0..n_pkts {
                let len = if rng.random_bool(0.1) {
                    rng.random_range(1..=65_535)
                } else {
                    rng.random_range(1..3000)
                };
                let mut data = vec![0u8; len];
                rng.fill(&mut data[..]);
                let max_piece = rng.random_range(1..=len.min(2000));
                let (proto, id) = (6 + (i % 2) as u8 * 11, 7 + i as u32 / 2);
                for (off, n) in cuts(&mut rng, len, max_piece) {
                    pieces.push((proto, id, off, n, off + n == len));
                }
                // Duplicates, and overlapping re-sends of arbitrary ranges (identical bytes).
                for _ in 0..rng.random_range(0..5) {
                    let off = rng.random_range(0..len);
                    let n = rng.random_range(1..=(len - off).min(3000));
                    pieces.push((proto, id, off, n, off + n == len));
                }
                pkts.push(((proto, id), data));
            }
            pieces.shuffle(&mut rng);
            let mut done = Vec::new();
            for (proto, id, off, n, last) in pieces {
                let data = &pkts.iter().find(|p| p.0 == (proto, id)).unwrap().1;
                let got = r.push(0, src(), proto, id, off as u16, last, &data[off..off + n]);
                check(&r);
                if let Some(got) = got {
                    // Later duplicates may start a new bucket and even complete it again:
                    // still the same bytes.
                    assert_eq!(&got, data, "seed {seed}");
                    done.push((proto, id));
                }
            }
            for p in &pkts {
                assert!(done.contains(&p.0), "seed {seed}: packet {:?} missing", p.0);
            }
            let c = r.counters();
            assert_eq!((c.bad, c.conflicting_overlaps, c.evicted), (0, 0, 0));
        }
    }

    #[test]
    fn conflicting_overlap_drops_bucket() {
        let mut r = Reassembler::new(ReassemblyConfig::default());
        assert!(r.push(0, src(), 6, 1, 0, false, b"abcd").is_none());
        assert!(
            r.push(0, src(), 6, 1, 2, false, b"cd").is_none(),
            "duplicate"
        );
        assert_eq!(r.counters().duplicates, 1);
        assert!(r.push(0, src(), 6, 1, 2, false, b"cX").is_none());
        let c = r.counters();
        assert_eq!((c.conflicting_overlaps, c.buckets, c.bytes_held), (1, 0, 0));
        // Partial overlap with identical bytes fills the rest.
        assert!(r.push(0, src(), 6, 2, 4, true, b"efgh").is_none());
        assert_eq!(
            r.push(0, src(), 6, 2, 0, false, b"abcdef"),
            Some(b"abcdefgh".to_vec())
        );
        // Conflict in a middle byte of a fragment spanning a hole.
        r.push(0, src(), 6, 3, 0, false, b"ab");
        r.push(0, src(), 6, 3, 4, false, b"ef");
        r.push(0, src(), 6, 3, 1, true, b"bcdXf");
        assert_eq!(r.counters().conflicting_overlaps, 2);
        assert_eq!(r.buckets(), 0);
    }

    #[test]
    fn timeout_drops_buckets() {
        let mut r = Reassembler::new(ReassemblyConfig::default());
        r.push(0, src(), 6, 1, 0, false, b"ab");
        r.push(SEC, src(), 6, 2, 0, false, b"ab");
        assert_eq!(r.next_timeout(), Some(30 * SEC));
        assert_eq!(r.poll_timeouts(30 * SEC - 1), 0);
        assert_eq!(r.poll_timeouts(30 * SEC), 1);
        assert_eq!(r.next_timeout(), Some(31 * SEC));
        // A late fragment of the dropped packet starts over and never completes alone.
        assert!(r.push(30 * SEC, src(), 6, 1, 2, true, b"cd").is_none());
        assert_eq!(r.poll_timeouts(100 * SEC), 2);
        let c = r.counters();
        assert_eq!((c.timed_out, c.buckets, c.bytes_held), (3, 0, 0));
        assert_eq!(r.next_timeout(), None);
    }

    #[test]
    fn flood_stays_bounded_and_legit_packet_gets_through() {
        let cfg = ReassemblyConfig::default();
        let mut r = Reassembler::new(cfg);
        let junk = [0xAAu8; 1000];
        for id in 0..100_000u32 {
            r.push(id as u64, src(), 6, id, 0, false, &junk);
            assert!(r.bytes_held() <= cfg.max_bytes);
            assert!(r.buckets() <= cfg.max_buckets);
        }
        check(&r);
        let c = r.counters();
        assert_eq!(c.evicted, 100_000 - c.buckets as u64);
        // The survivors are the newest.
        assert!(r.age.values().all(|k| k.2 >= 100_000 - c.buckets as u32));
        // Scattered 1-byte fragments are charged for their holes too.
        for i in 0..20_000u16 {
            r.push(200_000, src(), 17, 1, i * 3 + 1, false, &[1]);
            assert!(r.bytes_held() <= cfg.max_bytes);
        }
        check(&r);
        // A legitimate packet still reassembles afterwards.
        let pkt: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        assert!(r
            .push(300_000, src(), 6, 1_000_000, 1500, true, &pkt[1500..])
            .is_none());
        assert_eq!(
            r.push(300_001, src(), 6, 1_000_000, 0, false, &pkt[..1500]),
            Some(pkt)
        );
        // A single bucket that cannot fit at all is dropped, not kept over the bound.
        let mut r = Reassembler::new(ReassemblyConfig {
            max_bytes: 500,
            max_buckets: 0,
            ..cfg
        });
        r.push(0, src(), 6, 1, 0, false, &junk);
        assert_eq!((r.buckets(), r.bytes_held()), (0, 0));
        assert_eq!(r.counters().evicted, 1);
        r.push(0, src(), 6, 1, 0, false, &junk[..100]);
        r.push(0, src(), 6, 2, 0, false, &junk[..100]);
        assert_eq!(r.buckets(), 1, "max_buckets 0 still allows one");
        check(&r);
    }

    #[test]
    fn bad_fragments_counted() {
        let mut r = Reassembler::new(ReassemblyConfig::default());
        let bad = |r: &Reassembler| r.counters().bad;
        r.push(0, src(), 6, 1, 10, false, b"");
        assert_eq!(bad(&r), 1, "empty, not last");
        r.push(0, src(), 6, 1, 0, true, b"");
        assert_eq!(bad(&r), 2, "empty whole packet");
        r.push(0, src(), 6, 1, 65_535, true, b"x");
        assert_eq!(bad(&r), 3, "beyond max_packet_len");
        assert_eq!(r.buckets(), 0, "refused before making a bucket");
        r.push(0, src(), 6, 1, 10, true, b"abc"); // end 13
        r.push(0, src(), 6, 1, 10, true, b"abcd");
        assert_eq!(bad(&r), 4, "last disagreeing with the known end");
        r.push(0, src(), 6, 1, 12, false, b"cd");
        assert_eq!(bad(&r), 5, "data beyond the known end");
        r.push(0, src(), 6, 2, 10, false, b"abcd");
        r.push(0, src(), 6, 2, 5, true, b"ab");
        r.push(0, src(), 6, 2, 10, true, b"ab");
        assert_eq!(bad(&r), 7, "last before data already received");
        // An empty last fragment can close a packet.
        r.push(0, src(), 6, 3, 0, false, b"ab");
        assert_eq!(r.push(0, src(), 6, 3, 2, true, b""), Some(b"ab".to_vec()));
        // And bucket 1, its end known, completes when its first ten bytes come.
        let mut want = vec![0; 10];
        want.extend_from_slice(b"abc");
        assert_eq!(r.push(0, src(), 6, 1, 0, false, &[0; 10]), Some(want));
        check(&r);
    }

    #[test]
    fn arbitrary_fields_never_panic() {
        for seed in 0..20 {
            let mut rng = StdRng::seed_from_u64(1000 + seed);
            let cfg = ReassemblyConfig {
                timeout_ns: rng.random_range(0..1000),
                max_bytes: rng.random_range(0..200_000),
                max_buckets: rng.random_range(0..50),
                max_packet_len: rng.random_range(0..70_000),
            };
            let mut r = Reassembler::new(cfg);
            let mut now = 0u64;
            for _ in 0..5000 {
                // Fields straight from random bytes, like a decoded probe from a hostile peer.
                let mut f = [0u8; 12];
                rng.fill(&mut f[..]);
                let src = IpAddr::V4(Ipv4Addr::new(10, 0, 0, f[0] % 3));
                let proto = f[1] % 3;
                let id = u32::from_be_bytes([0, 0, 0, f[2] % 8]);
                // Offsets near each other mostly, so fragments meet; sometimes anywhere.
                let offset = if f[3] < 200 {
                    u16::from(f[4]) % 64
                } else {
                    u16::from_be_bytes([f[5], f[6]])
                };
                let last = f[7] & 1 == 1;
                let len = if f[8] < 250 {
                    (f[9] % 64) as usize
                } else {
                    rng.random_range(0..70_000)
                };
                // Mostly a consistent byte pattern (so overlaps often agree), sometimes noise.
                let data: Vec<u8> = if f[10] < 200 {
                    (0..len).map(|i| (offset as usize + i) as u8).collect()
                } else {
                    (0..len).map(|_| rng.random()).collect()
                };
                now = now.wrapping_add(u64::from(f[11]) * 3);
                if f[11] == 0 {
                    now = rng.random();
                }
                r.push(now, src, proto, id, offset, last, &data);
                if f[11] % 16 == 0 {
                    r.poll_timeouts(now);
                }
                check(&r);
            }
        }
    }
}
