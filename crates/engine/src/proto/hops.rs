//! Tying ICMP errors (TTL expiry, unreachable) to the probes they answer: a pure function of
//! the quoted bytes and what was sent, so every rule is tested here without a network.
//!
//! The kernel hands a socket with `IP_RECVERR` the ICMP error's *quote* of our datagram from
//! the byte after the UDP header: the UDP header itself (ports, length, checksum) and the
//! quoted IP header are not delivered to a non-raw socket. So a probe is named by what the
//! MGRP header puts first in the payload (`docs/trace.md`):
//!
//! | quoted UDP payload | rule | names |
//! |---|---|---|
//! | ≥ 18 bytes (through the train index) | [`MatchRule::Header`] | session, train, index (and seq, checked) |
//! | 12..18 bytes | [`MatchRule::Seq`] | session and the per-session sequence number |
//! | < 12 bytes (RFC 792 routers quote 8 bytes of IP payload: the UDP header only) | [`MatchRule::Timing`] | only the one probe in flight |
//!
//! Each session has its own connected probe socket, so an error on it is for one of that
//! session's probes whatever the quote holds; the quote says which. A short quote is tied to
//! a probe only when exactly one probe of the train could have drawn it (sent before the
//! reply, within [`HOP_WAIT`]); otherwise it is counted ambiguous, never guessed.

use crate::train::{HopClock, HopReply, HopStats, MatchRule, MonoNs, WallNs};
use mgrp_wire::probe::{field, KIND_PROBE};
use std::net::IpAddr;
use std::time::Duration;

/// How long after a TTL-limited probe left its reply may come (then the router is silent).
pub const HOP_WAIT: Duration = Duration::from_secs(1);
/// Error-queue messages read per train at most, beyond two per probe.
pub const EXTRA_READS: usize = 32;
/// Bytes of quote worth reading: the fixed probe header.
pub const QUOTE_MAX: usize = mgrp_wire::probe::HEADER_LEN;

/// Who produced an error-queue message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Icmp,
    Icmp6,
    /// A local error or anything else (`SO_EE_ORIGIN_*`).
    Other(u8),
}

/// One ICMP error as the driver read it from the error queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IcmpError {
    pub origin: Origin,
    pub icmp_type: u8,
    pub icmp_code: u8,
    /// `SO_EE_OFFENDER`: the error's sender.
    pub offender: Option<IpAddr>,
    /// The quoted UDP payload (at most [`QUOTE_MAX`] bytes are kept).
    pub quote: Vec<u8>,
    /// Arrival on this host's CLOCK_MONOTONIC (from the kernel stamp where there is one).
    pub rx_mono: MonoNs,
    /// The kernel's RX timestamp, if it gave one.
    pub rx_kernel: Option<WallNs>,
}

/// What the quote names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quoted {
    Header {
        session: u32,
        seq: u32,
        train: u32,
        index: u16,
    },
    Seq {
        session: u32,
        seq: u32,
    },
    /// 8..12 bytes: the session only.
    Session(u32),
    /// Fewer than 8 bytes: nothing beyond "an MGRP probe" (or nothing at all).
    Nothing,
}

/// Read what a quote names; `None` if it is not the start of an MGRP probe.
pub fn parse_quote(q: &[u8]) -> Option<Quoted> {
    let be32 = |r: std::ops::Range<usize>| u32::from_be_bytes(q[r].try_into().expect("4 bytes"));
    if q.first().is_some_and(|v| *v != mgrp_wire::VERSION)
        || q.get(field::KIND).is_some_and(|k| *k != KIND_PROBE)
    {
        return None;
    }
    Some(if q.len() >= field::INDEX.end {
        Quoted::Header {
            session: be32(field::SESSION),
            seq: be32(field::SEQ),
            train: be32(field::TRAIN),
            index: u16::from_be_bytes(q[field::INDEX].try_into().expect("2 bytes")),
        }
    } else if q.len() >= field::SEQ.end {
        Quoted::Seq {
            session: be32(field::SESSION),
            seq: be32(field::SEQ),
        }
    } else if q.len() >= field::SESSION.end {
        Quoted::Session(be32(field::SESSION))
    } else {
        Quoted::Nothing
    })
}

/// One probe of the train as it left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SentProbe {
    pub ttl: Option<u8>,
    /// The pacer's clock just before the send; `None` if the send failed.
    pub mono: Option<MonoNs>,
    /// The kernel's TX timestamp, where it gave one.
    pub kernel: Option<WallNs>,
}

/// What became of one error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Matched(u16),
    Duplicate(u16),
    UnknownTrain,
    Ambiguous,
    Malformed,
    /// The per-train read bound is reached: stop reading.
    Bounded,
}

/// Collects the replies to one train's probes.
#[derive(Debug)]
pub struct HopMatcher {
    session: u32,
    train: u32,
    first_seq: u32,
    probes: Vec<SentProbe>,
    replies: Vec<Option<HopReply>>,
    /// The receiver reported these probes: they drew no reply to wait for.
    arrived: Vec<bool>,
    stats: HopStats,
    reads: usize,
    max_reads: usize,
}

impl HopMatcher {
    /// A train of `session` numbered `train` whose probe `i` carried sequence `first_seq + i`.
    pub fn new(session: u32, train: u32, first_seq: u32, probes: Vec<SentProbe>) -> HopMatcher {
        let n = probes.len();
        HopMatcher {
            session,
            train,
            first_seq,
            replies: vec![None; n],
            arrived: vec![false; n],
            probes,
            stats: HopStats::default(),
            reads: 0,
            max_reads: 2 * n + EXTRA_READS,
        }
    }

    /// Tie one error to its probe (or count why not).
    pub fn handle_error(&mut self, e: &IcmpError) -> Outcome {
        if self.reads >= self.max_reads {
            self.stats.bounded = true;
            return Outcome::Bounded;
        }
        self.reads += 1;
        let outcome = self.classify(e);
        match outcome {
            Outcome::Matched(i) => {
                self.stats.matched += 1;
                self.replies[i as usize] = Some(self.reply(i as usize, e));
            }
            Outcome::Duplicate(_) => self.stats.duplicates += 1,
            Outcome::UnknownTrain => self.stats.unknown_train += 1,
            Outcome::Ambiguous => self.stats.ambiguous += 1,
            Outcome::Malformed => self.stats.malformed += 1,
            Outcome::Bounded => {}
        }
        outcome
    }

    fn classify(&self, e: &IcmpError) -> Outcome {
        if matches!(e.origin, Origin::Other(_)) || e.offender.is_none() {
            return Outcome::Malformed;
        }
        let index = match parse_quote(&e.quote) {
            None => return Outcome::Malformed,
            Some(Quoted::Header {
                session,
                seq,
                train,
                index,
            }) => {
                if session != self.session || train != self.train {
                    return Outcome::UnknownTrain;
                }
                if index as usize >= self.probes.len()
                    || seq != self.first_seq.wrapping_add(index as u32)
                {
                    return Outcome::Malformed;
                }
                Some((index as usize, MatchRule::Header))
            }
            Some(Quoted::Seq { session, seq }) => {
                if session != self.session {
                    return Outcome::UnknownTrain;
                }
                let i = seq.wrapping_sub(self.first_seq) as usize;
                if i >= self.probes.len() {
                    return Outcome::UnknownTrain;
                }
                Some((i, MatchRule::Seq))
            }
            Some(Quoted::Session(s)) if s != self.session => return Outcome::UnknownTrain,
            Some(Quoted::Session(_)) | Some(Quoted::Nothing) => None,
        };
        let i = match index {
            Some((i, _)) => i,
            None => match self.by_timing(e.rx_mono) {
                Ok(i) => i,
                Err(o) => return o,
            },
        };
        if self.probes[i].mono.is_none() {
            // Never left: the reply cannot be for it.
            return Outcome::Malformed;
        }
        if self.replies[i].is_some() {
            Outcome::Duplicate(i as u16)
        } else {
            Outcome::Matched(i as u16)
        }
    }

    /// The one probe that could have drawn a reply arriving at `rx`.
    fn by_timing(&self, rx: MonoNs) -> Result<usize, Outcome> {
        let wait = HOP_WAIT.as_nanos() as u64;
        let mut candidates = self
            .probes
            .iter()
            .enumerate()
            .filter(|(_, p)| p.mono.is_some_and(|m| m <= rx && rx.since(m) <= wait));
        match (candidates.next(), candidates.next()) {
            (Some((i, _)), None) => Ok(i),
            (None, _) => Err(Outcome::UnknownTrain),
            (Some(_), Some(_)) => Err(Outcome::Ambiguous),
        }
    }

    fn reply(&self, i: usize, e: &IcmpError) -> HopReply {
        let p = self.probes[i];
        let (rtt_ns, clock) = match (p.kernel, e.rx_kernel) {
            (Some(tx), Some(rx)) => (rx.since(tx), HopClock::Kernel),
            _ => (
                e.rx_mono.since(p.mono.expect("matched probes were sent")),
                HopClock::User,
            ),
        };
        let rule = match parse_quote(&e.quote) {
            Some(Quoted::Header { .. }) => MatchRule::Header,
            Some(Quoted::Seq { .. }) => MatchRule::Seq,
            _ => MatchRule::Timing,
        };
        HopReply {
            from: e.offender.expect("checked in classify"),
            icmp_type: e.icmp_type,
            icmp_code: e.icmp_code,
            rx_mono_ns: e.rx_mono,
            rx_kernel_ns: e.rx_kernel,
            rtt_ns,
            clock,
            matched_by: rule,
        }
    }

    /// The receiver got probe `index`: it expired nowhere, so no reply is awaited for it.
    pub fn arrived(&mut self, index: u16) {
        if let Some(a) = self.arrived.get_mut(index as usize) {
            *a = true;
        }
    }

    /// Probes that left with a TTL, did not reach the receiver and have no reply yet.
    fn unanswered(&self) -> impl Iterator<Item = &SentProbe> {
        self.probes
            .iter()
            .zip(&self.replies)
            .zip(&self.arrived)
            .filter(|((p, r), a)| p.ttl.is_some() && p.mono.is_some() && r.is_none() && !**a)
            .map(|((p, _), _)| p)
    }

    /// Until when a reply is still worth waiting for: [`HOP_WAIT`] after the last TTL-limited
    /// probe that left and neither drew a reply nor reached the receiver. `None`: nothing to
    /// wait for.
    pub fn wait_until(&self) -> Option<MonoNs> {
        if self.reads >= self.max_reads {
            return None;
        }
        let last = self.unanswered().filter_map(|p| p.mono).max()?;
        Some(last.add_ns(HOP_WAIT.as_nanos() as u64))
    }

    /// The replies, per probe, and the train's accounting (TTL-limited probes left without a
    /// reply count as silent).
    pub fn finish(mut self) -> (Vec<Option<HopReply>>, HopStats) {
        self.stats.silent = self.unanswered().count() as u32;
        (self.replies, self.stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mgrp_wire::probe::{encode, ProbeHeader};

    const R1: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(198, 18, 0, 2));
    const R2: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(198, 18, 1, 2));

    /// A probe of session 7, train 3 (sequence 100 + index), as the sender built it.
    fn probe(session: u32, train: u32, index: u16) -> Vec<u8> {
        let h = ProbeHeader {
            session,
            seq: 100 + index as u32,
            train,
            index,
            train_len: 4,
            sent_ns: 55,
            ..Default::default()
        };
        let mut b = vec![0; 64];
        encode(&h, &[], 64, &mut b).unwrap();
        b
    }

    fn err(quote: &[u8], from: IpAddr, at_us: u64) -> IcmpError {
        IcmpError {
            origin: Origin::Icmp,
            icmp_type: 11,
            icmp_code: 0,
            offender: Some(from),
            quote: quote[..quote.len().min(QUOTE_MAX)].to_vec(),
            rx_mono: MonoNs(at_us * 1000),
            rx_kernel: None,
        }
    }

    /// Four TTL-limited probes (TTL 1..4) sent at 0, 10, 20, 30 us.
    fn matcher() -> HopMatcher {
        let probes = (0..4)
            .map(|i| SentProbe {
                ttl: Some(i as u8 + 1),
                mono: Some(MonoNs(i * 10_000)),
                kernel: None,
            })
            .collect();
        HopMatcher::new(7, 3, 100, probes)
    }

    #[test]
    fn full_header_quotes_match_in_any_order_and_duplicates_are_counted() {
        let mut m = matcher();
        assert_eq!(
            m.handle_error(&err(&probe(7, 3, 2), R2, 500)),
            Outcome::Matched(2)
        );
        assert_eq!(
            m.handle_error(&err(&probe(7, 3, 0), R1, 600)),
            Outcome::Matched(0)
        );
        assert_eq!(
            m.handle_error(&err(&probe(7, 3, 2), R2, 700)),
            Outcome::Duplicate(2)
        );
        let (replies, stats) = m.finish();
        let r0 = replies[0].unwrap();
        assert_eq!((r0.from, r0.icmp_type, r0.rtt_ns), (R1, 11, 600_000));
        assert_eq!(
            (r0.clock, r0.matched_by),
            (HopClock::User, MatchRule::Header)
        );
        // The duplicate did not replace the first reply.
        assert_eq!(replies[2].unwrap().rtt_ns, 500_000 - 20_000);
        assert_eq!(
            (stats.matched, stats.duplicates, stats.silent),
            (2, 1, 2),
            "{stats:?}"
        );
    }

    #[test]
    fn kernel_stamps_on_both_ends_give_the_rtt() {
        let mut m = matcher();
        m.probes[1].kernel = Some(WallNs(1_000_000));
        let mut e = err(&probe(7, 3, 1), R1, 400);
        e.rx_kernel = Some(WallNs(1_250_000));
        assert_eq!(m.handle_error(&e), Outcome::Matched(1));
        let r = m.finish().0[1].unwrap();
        assert_eq!((r.rtt_ns, r.clock), (250_000, HopClock::Kernel));
        assert_eq!(r.rx_kernel_ns, Some(WallNs(1_250_000)));
    }

    #[test]
    fn other_trains_and_sessions_are_counted_not_matched() {
        let mut m = matcher();
        assert_eq!(
            m.handle_error(&err(&probe(7, 2, 1), R1, 50)),
            Outcome::UnknownTrain,
            "late reply of the previous train"
        );
        assert_eq!(
            m.handle_error(&err(&probe(8, 3, 1), R1, 50)),
            Outcome::UnknownTrain
        );
        // Sequence numbers outside this train's.
        let mut other = probe(7, 3, 1);
        other[field::SEQ].copy_from_slice(&99u32.to_be_bytes());
        assert_eq!(
            m.handle_error(&err(&other[..14], R1, 50)),
            Outcome::UnknownTrain
        );
        // A header whose seq disagrees with its index is not ours.
        assert_eq!(m.handle_error(&err(&other, R1, 50)), Outcome::Malformed);
        assert_eq!(
            m.handle_error(&err(&probe(7, 3, 9), R1, 50)),
            Outcome::Malformed
        );
        let (replies, s) = m.finish();
        assert!(replies.iter().all(Option::is_none));
        assert_eq!((s.unknown_train, s.malformed, s.matched), (3, 2, 0));
    }

    #[test]
    fn sequence_numbers_name_the_probe_in_a_12_byte_quote() {
        let mut m = matcher();
        let q = probe(7, 3, 3);
        assert_eq!(m.handle_error(&err(&q[..12], R2, 900)), Outcome::Matched(3));
        assert_eq!(m.finish().0[3].unwrap().matched_by, MatchRule::Seq);
    }

    #[test]
    fn short_quotes_match_only_the_one_probe_in_flight() {
        // Only the UDP header was quoted (nothing of the payload) or 8 payload bytes.
        for len in [0usize, 8] {
            // One TTL-limited probe in flight: it is the one.
            let mut one = HopMatcher::new(
                7,
                3,
                100,
                vec![SentProbe {
                    ttl: Some(2),
                    mono: Some(MonoNs(0)),
                    kernel: None,
                }],
            );
            let q = probe(7, 3, 0);
            assert_eq!(
                one.handle_error(&err(&q[..len], R2, 300)),
                Outcome::Matched(0)
            );
            assert_eq!(
                one.handle_error(&err(&q[..len], R2, 301)),
                Outcome::Duplicate(0)
            );
            let r = one.finish().0[0].unwrap();
            assert_eq!((r.matched_by, r.rtt_ns), (MatchRule::Timing, 300_000));
            // Four in flight: refused, never guessed.
            let mut four = matcher();
            assert_eq!(
                four.handle_error(&err(&q[..len], R2, 300)),
                Outcome::Ambiguous
            );
            // Before the first probe left, or after the wait: no candidate at all.
            let mut m = HopMatcher::new(
                7,
                3,
                100,
                vec![SentProbe {
                    ttl: Some(1),
                    mono: Some(MonoNs(5_000_000)),
                    kernel: None,
                }],
            );
            assert_eq!(
                m.handle_error(&err(&q[..len], R1, 1)),
                Outcome::UnknownTrain
            );
            assert_eq!(
                m.handle_error(&err(&q[..len], R1, 5_000 + 1_000_001)),
                Outcome::UnknownTrain
            );
        }
        // 8 bytes name the session: another session's short quote is not ours.
        let mut m = matcher();
        assert_eq!(
            m.handle_error(&err(&probe(9, 3, 0)[..8], R1, 50)),
            Outcome::UnknownTrain
        );
    }

    #[test]
    fn foreign_and_local_errors_are_malformed() {
        let mut m = matcher();
        let mut not_mgrp = probe(7, 3, 0);
        not_mgrp[0] = 9;
        assert_eq!(m.handle_error(&err(&not_mgrp, R1, 50)), Outcome::Malformed);
        let mut local = err(&probe(7, 3, 0), R1, 50);
        local.origin = Origin::Other(1);
        assert_eq!(m.handle_error(&local), Outcome::Malformed);
        let mut anonymous = err(&probe(7, 3, 0), R1, 50);
        anonymous.offender = None;
        assert_eq!(m.handle_error(&anonymous), Outcome::Malformed);
        // A probe whose send failed draws no reply.
        m.probes[1].mono = None;
        assert_eq!(
            m.handle_error(&err(&probe(7, 3, 1), R1, 50)),
            Outcome::Malformed
        );
    }

    #[test]
    fn reads_per_train_are_bounded_and_the_wait_ends() {
        let mut m = matcher();
        assert_eq!(m.wait_until(), Some(MonoNs(30_000 + 1_000_000_000)));
        let e = err(&probe(7, 2, 0), R1, 50);
        for _ in 0..(2 * 4 + EXTRA_READS) {
            assert_eq!(m.handle_error(&e), Outcome::UnknownTrain);
        }
        assert_eq!(m.handle_error(&e), Outcome::Bounded);
        assert_eq!(m.wait_until(), None, "bounded: stop waiting");
        assert!(m.finish().1.bounded);
        // All answered: nothing to wait for.
        let mut m = matcher();
        for i in 0..4 {
            m.handle_error(&err(&probe(7, 3, i), R1, 100));
        }
        assert_eq!(m.wait_until(), None);
        // Probes the receiver got are not waited for.
        let mut m = matcher();
        m.handle_error(&err(&probe(7, 3, 0), R1, 100));
        m.arrived(3);
        assert_eq!(m.wait_until(), Some(MonoNs(20_000 + 1_000_000_000)));
        m.arrived(1);
        m.arrived(2);
        m.arrived(99); // not a probe of the train: ignored
        assert_eq!(m.wait_until(), None);
        assert_eq!(m.finish().1.silent, 0);
        // No TTL-limited probe: nothing to wait for either.
        let m = HopMatcher::new(7, 3, 100, vec![SentProbe::default()]);
        assert_eq!(m.wait_until(), None);
    }

    #[test]
    fn parse_quote_never_panics_on_any_length() {
        let q = probe(7, 3, 1);
        for n in 0..=q.len() {
            let _ = parse_quote(&q[..n]);
        }
        assert_eq!(parse_quote(&[]), Some(Quoted::Nothing));
        assert_eq!(parse_quote(&[mgrp_wire::VERSION, 2]), None);
    }
}
