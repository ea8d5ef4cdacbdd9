//! The thin driver of one schedule: a thread that sleeps until [`Schedule`] says a
//! measurement is due, keeps a session to the peer, runs the method's estimator within the
//! allowance, and publishes what came out. The rules (when, how many bytes, backoff) are the
//! schedule's; this file holds the clock, the sockets and the threads.

use crate::budget;
use crate::cover::{Cover, CoverParams};
use crate::hub::Hub;
use crate::path::PathState;
use crate::record::{self, Series};
use crate::schedule::{Action, Schedule};
use crate::track;
use mgrp_engine::auth::Key;
use mgrp_engine::client::Session;
use mgrp_engine::pacer::Pacer;
use mgrp_engine::riders::RiderSender;
use mgrp_engine::run::run_estimator;
use mgrp_estimate::budget::Budgeted;
use mgrp_estimate::jitter::{Jitter, JitterTap};
use mgrp_estimate::methods::Method;
use mgrp_estimate::track::Tracker;
use mgrp_estimate::Estimator;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A capacity this much different from the one the default budget was derived for derives it
/// again.
const REDERIVE: f64 = 0.2;

/// The least time a scheduled round may run before it is ended (a longer period allows more).
/// Long enough for a slow round to conclude: `auto` on an idle 20 Mbit/s testbed path takes
/// 1–2 s at the median, but with the CPUs free to idle single rounds took 4–9 s; at the old 5 s
/// bound two rounds in 56 ended unconcluded, leaving 10–13 s without an estimate (docs/service.md,
/// "Round deadline"). `path::Counters::timed_out` must say the same number.
pub const ROUND_DEADLINE: Duration = Duration::from_secs(15);

/// The schedule's ceiling: configured, or tracking's default.
fn ceiling_share(p: &crate::config::PathSchedule) -> Option<f64> {
    p.ceiling
        .or((p.method == track::METHOD).then_some(crate::config::DEFAULT_CEILING))
}

/// What one round's estimator did.
struct Measured {
    result: Result<Option<mgrp_estimate::Estimate>, mgrp_engine::Error>,
    bytes: u64,
    /// The allowance stopped it before a train.
    cut: bool,
    /// Bytes (frames) of the train the allowance refused, when the estimator says.
    need: Option<u64>,
    /// Its estimate is news (a tracker's round cut before it concluded holds the old one).
    fresh: bool,
    cap: Option<mgrp_estimate::Estimate>,
    sent: u64,
    lost: u64,
    rtt: Option<(Duration, Duration)>,
    /// Frames' bytes the session's control connection sent during the round.
    control: u64,
    /// Read from the same trains: no probes of its own.
    jitter: Option<Jitter>,
    /// A tracker's random wait before its next round, on top of the schedule's.
    dither_ns: u64,
    /// A tracker's next round's frames, when it knows them (a phase reading).
    next_frames: Option<u64>,
}

/// What one schedule's thread needs.
pub(crate) struct Driver {
    pub st: Arc<PathState>,
    pub key: Key,
    pub pacer: Arc<Pacer>,
    pub hub: Arc<Hub>,
    pub riders: Option<Arc<RiderSender>>,
}

/// The session's state between rounds.
pub(crate) struct Link {
    pub(crate) session: Option<Session>,
    /// The path's capacity, once measured.
    capacity: Option<f64>,
    /// The capacity the default budget was derived for (`None`: derived for an unknown one).
    budget_for: Option<f64>,
    /// A tracked path's tracker: it lives across rounds (`crate::track`).
    tracker: Option<Tracker>,
    /// Whether passive or inline estimates of the path cover it (tracked paths only).
    cover: Cover,
    /// Every estimate the hub publishes: the passive and inline ones of this path feed `cover`.
    evidence: tokio::sync::broadcast::Receiver<Arc<mgrp_store::Record>>,
}

impl Driver {
    pub(crate) fn run(self) {
        let p = &self.st.sched;
        let mut link = Link {
            session: None,
            capacity: None,
            budget_for: None,
            tracker: None,
            cover: Cover::new(CoverParams::default()),
            evidence: self.hub.subscribe(),
        };
        let budget = match p.budget {
            Some(b) => b,
            // Tracking's first round is a full `auto` search that also measures C.
            None if p.method == track::METHOD => budget::default_budget("auto", None),
            None => budget::default_budget(&p.method, None),
        };
        self.st.set_budget(budget);
        let every = p.every.as_nanos().min(u64::MAX as u128) as u64;
        let mut sched = Schedule::new(mgrp_clock::now_ns(), every, budget);
        while let Some(action) = self.wait(&mut sched) {
            let stored = self.round(&mut sched, &mut link, action);
            self.st.round_done(&stored);
            if self.st.is_done() {
                break;
            }
        }
    }

    fn stopped(&self) -> bool {
        self.st.stop.load(Ordering::Relaxed)
    }

    /// Sleep in short slices until the schedule has something to do; `None` when told to stop.
    fn wait(&self, sched: &mut Schedule) -> Option<Action> {
        loop {
            if self.stopped() {
                return None;
            }
            if self.st.wake.swap(false, Ordering::Relaxed) {
                sched.handle_wake();
            }
            let now = mgrp_clock::now_ns();
            if let Some(a) = sched.poll(now) {
                return Some(a);
            }
            let left = sched.poll_timeout().saturating_sub(now);
            std::thread::sleep(Duration::from_nanos(left).min(Duration::from_millis(20)));
        }
    }

    fn connect(&self, link: &mut Link) -> Result<(), mgrp_engine::Error> {
        if link.session.is_some() {
            return Ok(());
        }
        let p = &self.st.sched;
        let s = Session::connect_marked(
            p.peer,
            &self.key,
            self.pacer.clone(),
            Duration::from_secs(3),
            // With riders on, the session's own sockets must not take the riders' route.
            self.riders.as_ref().map(|_| mgrp_shim::BYPASS_MARK),
        )?;
        let s = match &self.riders {
            Some(r) => s.with_riders(r.clone()),
            None => s,
        };
        self.st.set_name(format!(
            "{}->{}",
            s.local().map_or("?".to_string(), |a| a.ip().to_string()),
            p.peer.ip()
        ));
        link.session = Some(s);
        Ok(())
    }

    /// One round; the metrics it stored.
    fn round(&self, sched: &mut Schedule, link: &mut Link, action: Action) -> Vec<&'static str> {
        let (st, c) = (&self.st, &self.st.counters);
        let p = &st.sched;
        let allowance = match action {
            Action::Skip => {
                c.bump(&c.skipped_for_budget, 1);
                st.budget_ran_out(&format!(
                    "measurement skipped: {} B/min already spent",
                    sched.budget()
                ));
                return Vec::new();
            }
            Action::Measure { allowance } => allowance,
        };
        if let Some(src) = self.covered(link) {
            // Other evidence keeps the path fresh: no probes this round.
            c.bump(&c.covered, 1);
            st.set_covered(Some(src));
            st.set_load(sched.used(mgrp_clock::now_ns()), link.capacity);
            return Vec::new();
        }
        if let Err(e) = self.connect(link) {
            st.fail(&e.to_string());
            sched.handle_failed(mgrp_clock::now_ns(), 0);
            return Vec::new();
        }
        if p.method == crate::loss::METHOD {
            let before = c.snapshot().estimates_stored;
            self.loss_round(sched, link, allowance);
            return if c.snapshot().estimates_stored > before {
                vec!["episode_frequency", "episode_duration"]
            } else {
                Vec::new()
            };
        }
        let limit = p.every.max(ROUND_DEADLINE);
        let deadline = Instant::now() + limit;
        if p.method == track::METHOD {
            link.cover.handle_active(mgrp_clock::realtime_ns());
            st.set_covered(None);
        }
        let Some(m) = self.measure(link, allowance, deadline) else {
            sched.handle_failed(mgrp_clock::now_ns(), 0);
            return Vec::new();
        };
        let Measured {
            result,
            bytes,
            cut,
            need,
            fresh,
            cap,
            sent,
            lost,
            rtt,
            jitter,
            control,
            dither_ns,
            next_frames,
        } = m;
        let now = mgrp_clock::now_ns();
        // The estimator had not concluded by the deadline: its partial estimate is not stored
        // (consumers act on final ones).
        let timed_out = Instant::now() >= deadline
            && result
                .as_ref()
                .is_ok_and(|e| !(fresh && e.as_ref().is_some_and(|e| e.final_)));
        if timed_out {
            c.bump(&c.timed_out, 1);
        }
        c.bump(&c.probe_bytes, bytes);
        c.bump(&c.measurements, 1);
        st.last_ns
            .store(mgrp_clock::realtime_ns(), Ordering::Relaxed);
        if cut {
            c.bump(&c.cut_by_budget, 1);
        }
        // The schedule counts frames as the bottleneck does (UDP payload + Ethernet/IP/UDP
        // headers, and the control connection's frames: announcements, ACKs of the reports):
        // budgets and the ceiling then hold at the link's own counters.
        let wire = bytes + sent * mgrp_estimate::WIRE_OVERHEAD + control;
        let avail = match result {
            Ok(e) => {
                sched.expect_next(next_frames);
                sched.handle_measured(now, wire, cut);
                if let Some(need) = need.filter(|_| cut) {
                    sched.wait_for_room(need);
                }
                sched.defer(dither_ns);
                e
            }
            Err(e) => {
                // The session is broken: connect again next time.
                st.fail(&e.to_string());
                sched.handle_failed(now, wire);
                link.session = None;
                None
            }
        };
        let Some(path) = st.name() else {
            return Vec::new();
        };
        let at = |metric| Series {
            path: &path,
            metric,
            source: "active",
            t_ns: mgrp_clock::realtime_ns(),
        };
        let mut recs = Vec::new();
        let cap = cap.filter(|e| e.final_);
        if let Some(cap) = &cap {
            link.capacity = Some(cap.value_bps);
            recs.push(record::from_estimate(at("capacity"), cap));
        }
        // A capacity-only round (the first one of methods that need C) is not an A estimate.
        let avail = avail.filter(|e| fresh && e.final_ && e.quality.method != "capacity");
        // Cut by the budget before its estimate: say so rather than let the old one stand.
        let starved = cut && avail.is_none();
        if let Some(a) = &avail {
            recs.push(record::from_estimate(at("avail_bw"), a));
        }
        if let Some((srtt, var)) = rtt.filter(|_| link.session.is_some()) {
            let range = (
                srtt.saturating_sub(var).as_secs_f64(),
                (srtt + var).as_secs_f64(),
            );
            recs.push(record::scalar(
                at("rtt"),
                "tcp_info",
                srtt.as_secs_f64(),
                range,
                0.0,
            ));
        }
        if sent > 0 {
            // Probe loss: the share of this measurement's probes that did not arrive (probe
            // streams above A may cause some of it themselves).
            let share = lost as f64 / sent as f64;
            let mut r = record::scalar(at("loss"), &p.method, share, (share, share), 0.0);
            r.probe_bytes = bytes;
            recs.push(r);
        }
        if let Some(j) = jitter {
            let mut r = record::scalar(
                at("jitter"),
                "ipdv",
                j.rfc3550_s,
                (j.median_s.min(j.rfc3550_s), j.p95_s.max(j.rfc3550_s)),
                0.0,
            );
            r.trains = j.trains;
            recs.push(r);
        }
        let mut stored = Vec::new();
        if !recs.is_empty() {
            let n = recs.len() as u64;
            match self.hub.publish(&recs) {
                Ok(()) => {
                    c.bump(&c.estimates_stored, n);
                    stored = ["avail_bw", "capacity", "rtt", "loss", "jitter"]
                        .into_iter()
                        .filter(|m| recs.iter().any(|r| r.metric == *m))
                        .collect();
                    if !starved {
                        // Working again: the next failure is news.
                        st.ok();
                    }
                }
                Err(e) => st.fail(&e.to_string()),
            }
        }
        if timed_out && !starved {
            // After the publish, which clears the last error: the API says why no estimate came.
            st.timed_out(limit);
        }
        if starved {
            st.budget_ran_out(&format!(
                "measurement cut after {bytes} of {allowance} B allowed ({} B/min)",
                sched.budget()
            ));
        }
        self.follow_capacity(sched, link);
        st.set_load(sched.used(mgrp_clock::now_ns()), link.capacity);
        stored
    }

    /// A tracked path whose passive or inline estimates are fresh and agree with the held
    /// value: the source that covers it (`crate::cover`). Reads the estimates published since.
    fn covered(&self, link: &mut Link) -> Option<&'static str> {
        if self.st.sched.method != track::METHOD {
            return None;
        }
        let name = self.st.name();
        loop {
            use tokio::sync::broadcast::error::TryRecvError;
            match link.evidence.try_recv() {
                Ok(r) => {
                    if r.metric == "avail_bw" && r.final_ && name.as_deref() == Some(&r.path) {
                        link.cover.handle_evidence(&r.source, r.t_ns, r.value);
                    }
                }
                Err(TryRecvError::Lagged(_)) => continue,
                Err(_) => break,
            }
        }
        let held = link.tracker.as_ref()?.held().map(|e| e.value_bps);
        link.cover
            .poll(mgrp_clock::realtime_ns(), held, link.capacity)
    }

    /// Run one round's estimator within `allowance`: a fresh one of the method, or the path's
    /// tracker. `None` when it could not be built (the error is recorded).
    fn measure(&self, link: &mut Link, allowance: u64, deadline: Instant) -> Option<Measured> {
        let (st, p) = (&self.st, &self.st.sched);
        let stop = || st.stop.load(Ordering::Relaxed);
        let mut bytes = 0;
        if p.method == track::METHOD {
            if link.tracker.is_none() {
                let ceiling = ceiling_share(p).unwrap_or(crate::config::DEFAULT_CEILING);
                match track::tracker(link.capacity, ceiling) {
                    Ok(t) => link.tracker = Some(t),
                    Err(e) => {
                        st.fail(&e);
                        return None;
                    }
                }
            }
            let (Some(t), Some(s)) = (link.tracker.as_mut(), link.session.as_mut()) else {
                return None;
            };
            let ctl0 = s.control_wire_bytes();
            t.begin_round(mgrp_clock::now_ns(), Some(allowance));
            // Rider-aware, as every method: the host's own bytes in the probes come off A.
            let mut est = mgrp_estimate::riders::RiderAware::new(&mut *t);
            let mut tapped = JitterTap::new(Budgeted::new(&mut est, u64::MAX));
            let result = run_estimator(s, &mut tapped, deadline, stop, |pr| bytes = pr.probe_bytes);
            let jitter = tapped.jitter();
            let counted = tapped.inner();
            let (sent, lost) = (counted.probes_sent, counted.probes_lost);
            return Some(Measured {
                jitter,
                result,
                bytes,
                cut: t.round_cut(),
                need: t.pending_frames(),
                fresh: t.round_concluded(),
                cap: t.capacity(),
                sent,
                lost,
                rtt: s.control_rtt(),
                control: control_since(s, ctl0),
                dither_ns: t.round_dither_ns(),
                next_frames: t.next_round_frames(),
            });
        }
        // Rider-aware: the host's own bytes that rode in the probes are taken off the estimate.
        // A method that needs the capacity measures it first while none is known.
        let built = Method::from_name(&p.method).and_then(|m| m.build(link.capacity));
        let mut est = match built {
            Ok(e) => mgrp_estimate::riders::RiderAware::new(e),
            Err(e) => {
                st.fail(&e.to_string());
                return None;
            }
        };
        let s = link.session.as_mut()?;
        let ctl0 = s.control_wire_bytes();
        let mut tapped = JitterTap::new(Budgeted::new(&mut est, allowance));
        let result = run_estimator(s, &mut tapped, deadline, stop, |pr| bytes = pr.probe_bytes);
        let jitter = tapped.jitter();
        let bounded = tapped.inner();
        Some(Measured {
            jitter,
            result,
            bytes,
            cut: bounded.exhausted(),
            need: None,
            fresh: true,
            cap: bounded.capacity(),
            sent: bounded.probes_sent,
            lost: bounded.probes_lost,
            rtt: s.control_rtt(),
            control: control_since(s, ctl0),
            dither_ns: 0,
            next_frames: None,
        })
    }

    /// The default budget follows the path's capacity: derive it again when C moved. The
    /// ceiling, a share of C, follows it too.
    fn follow_capacity(&self, sched: &mut Schedule, link: &mut Link) {
        let p = &self.st.sched;
        if let (Some(c), Some(share)) = (link.capacity, ceiling_share(p)) {
            sched.set_ceiling(Some(share * c / 8.0));
            self.st.set_budget(sched.budget());
        }
        let (Some(c), None) = (link.capacity, p.budget) else {
            return;
        };
        if p.method == track::METHOD {
            // Tracking spends what the ceiling allows: no budget below it.
            sched.set_budget(u64::MAX);
            self.st.set_budget(sched.budget());
            return;
        }
        if link
            .budget_for
            .is_some_and(|b| (c - b).abs() <= REDERIVE * b)
        {
            return;
        }
        let b = budget::default_budget(&p.method, Some(c));
        link.budget_for = Some(c);
        sched.set_budget(b);
        self.st.set_budget(sched.budget());
    }
}

/// Frames' bytes the session's control connection sent since `before` (0 when the kernel
/// would not say).
pub(crate) fn control_since(s: &Session, before: Option<u64>) -> u64 {
    match (before, s.control_wire_bytes()) {
        (Some(a), Some(b)) => b.saturating_sub(a),
        _ => 0,
    }
}
