//! The client's side of a session: numbers trains, builds their probes and announcements, and
//! picks the report of the train it waits for out of the control stream.

use super::{kind, ProtoError};
use crate::train::{SpecError, TrainSpec};
use mgrp_wire::control::{Control, RxRecord};
use mgrp_wire::probe::{self, ProbeHeader, FLAG_LAST, FLAG_MAY_CARRY};
use std::time::Duration;

/// A train ready to go: its probes (sender stamps filled in at departure) and announcement.
#[derive(Debug)]
pub struct Outgoing {
    pub train: u32,
    /// The sequence number of the first probe (probe i carries `first_seq + i`).
    pub first_seq: u32,
    pub packets: Vec<Vec<u8>>,
    pub start: Control,
}

/// What the receiver said about a train.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub records: Vec<RxRecord>,
    pub truncated: bool,
}

#[derive(Debug)]
pub struct SenderSession {
    session: u32,
    seq: u32,
    next_train: u32,
    awaiting: Option<u32>,
}

impl SenderSession {
    pub fn new(session: u32) -> SenderSession {
        SenderSession {
            session,
            seq: 0,
            next_train: 1,
            awaiting: None,
        }
    }

    pub fn session(&self) -> u32 {
        self.session
    }

    /// Number the train, encode its probes and its announcement. `report_timeout` is how long
    /// the receiver should wait for it before reporting anyway.
    pub fn begin_train(
        &mut self,
        spec: &TrainSpec,
        report_timeout: Duration,
    ) -> Result<Outgoing, SpecError> {
        spec.validate()?;
        let train = self.next_train;
        // Train 0 is reserved for riders sent on their own.
        self.next_train = self.next_train.wrapping_add(1).max(1);
        let n = spec.probes.len();
        let first_seq = self.seq;
        let packets = spec
            .probes
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let mut flags = if p.may_carry { FLAG_MAY_CARRY } else { 0 };
                if i + 1 == n {
                    flags |= FLAG_LAST;
                }
                let h = ProbeHeader {
                    flags,
                    session: self.session,
                    seq: self.seq,
                    train,
                    index: i as u16,
                    train_len: n as u16,
                    sent_ns: 0,
                };
                self.seq = self.seq.wrapping_add(1);
                let mut buf = vec![0u8; p.size as usize];
                probe::encode(&h, &[], p.size as usize, &mut buf)
                    .expect("a validated probe size holds the header");
                buf
            })
            .collect();
        self.awaiting = Some(train);
        Ok(Outgoing {
            train,
            first_seq,
            packets,
            start: Control::TrainStart {
                train,
                count: n as u16,
                bytes: spec.bytes().min(u32::MAX as u64) as u32,
                timeout_ms: report_timeout.as_millis().min(u32::MAX as u128) as u32,
            },
        })
    }

    /// The train's last probe left; `sent` of them made it out.
    pub fn end_train(&self, train: u32, sent: u16) -> Control {
        Control::TrainEnd { train, sent }
    }

    /// A control message from the agent: `Some` with the report of the train awaited; late
    /// reports of earlier trains are skipped. An error or other message ends the session.
    pub fn handle_control(&mut self, msg: Control) -> Result<Option<Report>, ProtoError> {
        match msg {
            Control::TrainReport {
                train,
                truncated,
                received,
            } => {
                if self.awaiting != Some(train) {
                    return Ok(None);
                }
                self.awaiting = None;
                Ok(Some(Report {
                    records: received,
                    truncated,
                }))
            }
            Control::Error { code, message } => Err(ProtoError::PeerError { code, message }),
            other => Err(ProtoError::Unexpected(kind(&other))),
        }
    }

    /// Give up on the awaited report (it is missing; the train counts as lost).
    pub fn abandon(&mut self) {
        self.awaiting = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::ProbeSpec;

    #[test]
    fn trains_are_numbered_and_probes_built_as_asked() {
        let mut s = SenderSession::new(42);
        let mut spec = TrainSpec::uniform(3, 100, 1000);
        spec.probes[1].may_carry = true;
        let o = s.begin_train(&spec, Duration::from_millis(2500)).unwrap();
        assert_eq!(o.train, 1);
        assert_eq!(
            o.start,
            Control::TrainStart {
                train: 1,
                count: 3,
                bytes: 300,
                timeout_ms: 2500
            }
        );
        let hs: Vec<_> = o
            .packets
            .iter()
            .map(|p| probe::decode(p).unwrap().header)
            .collect();
        assert!(o.packets.iter().all(|p| p.len() == 100));
        assert_eq!(hs.iter().map(|h| h.seq).collect::<Vec<_>>(), vec![0, 1, 2]);
        assert!(hs
            .iter()
            .all(|h| h.session == 42 && h.train == 1 && h.train_len == 3));
        assert_eq!(hs[1].flags, FLAG_MAY_CARRY);
        assert_eq!(hs[2].flags, FLAG_LAST);
        let o2 = s.begin_train(&spec, Duration::from_secs(1)).unwrap();
        assert_eq!(o2.train, 2);
        assert_eq!((o.first_seq, o2.first_seq), (0, 3));
        assert_eq!(probe::decode(&o2.packets[0]).unwrap().header.seq, 3);
        // Train ids wrap past 0.
        s.next_train = u32::MAX;
        assert_eq!(
            s.begin_train(&spec, Duration::ZERO).unwrap().train,
            u32::MAX
        );
        assert_eq!(s.begin_train(&spec, Duration::ZERO).unwrap().train, 1);
    }

    #[test]
    fn bad_specs_are_refused_before_anything_is_sent() {
        let mut s = SenderSession::new(1);
        let bad = TrainSpec::new(vec![ProbeSpec::new(10, 0)]);
        assert!(matches!(
            s.begin_train(&bad, Duration::ZERO),
            Err(SpecError::Size { index: 0, size: 10 })
        ));
        // The failed train used no id.
        let o = s
            .begin_train(&TrainSpec::uniform(1, 64, 0), Duration::ZERO)
            .unwrap();
        assert_eq!(o.train, 1);
    }

    #[test]
    fn only_the_awaited_report_is_taken() {
        let mut s = SenderSession::new(1);
        let spec = TrainSpec::uniform(2, 64, 10);
        s.begin_train(&spec, Duration::ZERO).unwrap();
        s.abandon();
        s.begin_train(&spec, Duration::ZERO).unwrap();
        let rep = |train| Control::TrainReport {
            train,
            truncated: false,
            received: vec![],
        };
        assert_eq!(s.handle_control(rep(1)), Ok(None), "late report of train 1");
        assert_eq!(
            s.handle_control(rep(2)),
            Ok(Some(Report {
                records: vec![],
                truncated: false
            }))
        );
        assert_eq!(s.handle_control(rep(2)), Ok(None), "only once");
        assert_eq!(
            s.handle_control(Control::Close),
            Err(ProtoError::Unexpected("Close"))
        );
        assert!(matches!(
            s.handle_control(Control::Error {
                code: 3,
                message: "budget".into()
            }),
            Err(ProtoError::PeerError { code: 3, .. })
        ));
    }
}
