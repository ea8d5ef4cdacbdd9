//! The thin driver of one schedule: a thread that sleeps until [`Schedule`] says a
//! measurement is due, keeps a session to the peer, runs the method's estimator within the
//! allowance, and publishes what came out. The rules (when, how many bytes, backoff) are the
//! schedule's; this file holds the clock, the sockets and the threads.

use crate::budget;
use crate::hub::Hub;
use crate::path::PathState;
use crate::record::{self, Series};
use crate::schedule::{Action, Schedule};
use mgrp_engine::auth::Key;
use mgrp_engine::client::Session;
use mgrp_engine::pacer::Pacer;
use mgrp_engine::riders::RiderSender;
use mgrp_engine::run::run_estimator;
use mgrp_estimate::budget::Budgeted;
use mgrp_estimate::jitter::JitterTap;
use mgrp_estimate::methods::Method;
use mgrp_estimate::Estimator;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A capacity this much different from the one the default budget was derived for derives it
/// again.
const REDERIVE: f64 = 0.2;

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
}

impl Driver {
    pub(crate) fn run(self) {
        let p = &self.st.sched;
        let mut link = Link {
            session: None,
            capacity: None,
            budget_for: None,
        };
        let budget = match p.budget {
            Some(b) => b,
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
        // Rider-aware: the host's own bytes that rode in the probes are taken off the estimate.
        // A method that needs the capacity measures it first while none is known.
        let built = Method::from_name(&p.method).and_then(|m| m.build(link.capacity));
        let mut est = match built {
            Ok(e) => mgrp_estimate::riders::RiderAware::new(e),
            Err(e) => {
                st.fail(&e.to_string());
                sched.handle_failed(mgrp_clock::now_ns(), 0);
                return Vec::new();
            }
        };
        let Some(s) = link.session.as_mut() else {
            return Vec::new();
        };
        // Jitter is read from the same trains: no probes of its own.
        let mut tapped = JitterTap::new(Budgeted::new(&mut est, allowance));
        let deadline = Instant::now() + p.every.max(Duration::from_secs(5));
        let mut bytes = 0;
        let result = run_estimator(
            s,
            &mut tapped,
            deadline,
            || st.stop.load(Ordering::Relaxed),
            |pr| bytes = pr.probe_bytes,
        );
        let rtt = s.control_rtt();
        let now = mgrp_clock::now_ns();
        c.bump(&c.probe_bytes, bytes);
        c.bump(&c.measurements, 1);
        st.last_ns
            .store(mgrp_clock::realtime_ns(), Ordering::Relaxed);
        let jitter = tapped.jitter();
        let bounded = tapped.inner();
        let cut = bounded.exhausted();
        if cut {
            c.bump(&c.cut_by_budget, 1);
        }
        let cap = bounded.capacity();
        let (sent, lost) = (bounded.probes_sent, bounded.probes_lost);
        let avail = match result {
            Ok(e) => {
                sched.handle_measured(now, bytes, cut);
                e
            }
            Err(e) => {
                // The session is broken: connect again next time.
                st.fail(&e.to_string());
                sched.handle_failed(now, bytes);
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
        let avail = avail.filter(|e| e.final_ && e.quality.method != "capacity");
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
        if sent > 0 {
            // Probe loss: the share of this measurement's probes that did not arrive (probe
            // streams above A may cause some of it themselves).
            let share = lost as f64 / sent as f64;
            let mut r = record::scalar(at("loss"), &p.method, share, (share, share), 0.0);
            r.probe_bytes = bytes;
            recs.push(r);
        }
        let mut stored = Vec::new();
        if !recs.is_empty() {
            let n = recs.len() as u64;
            match self.hub.publish(&recs) {
                Ok(()) => {
                    stored = ["avail_bw", "capacity", "rtt", "loss", "jitter"]
                        .into_iter()
                        .filter(|m| recs.iter().any(|r| r.metric == *m))
                        .collect();
                    c.bump(&c.estimates_stored, n);
                    if !starved {
                        // Working again: the next failure is news.
                        st.ok();
                    }
                }
                Err(e) => st.fail(&e.to_string()),
            }
        }
        if starved {
            st.budget_ran_out(&format!(
                "measurement cut after {bytes} of {allowance} B allowed ({} B/min)",
                sched.budget()
            ));
        }
        self.follow_capacity(sched, link);
        stored
    }

    /// The default budget follows the path's capacity: derive it again when C moved.
    fn follow_capacity(&self, sched: &mut Schedule, link: &mut Link) {
        let p = &self.st.sched;
        let (Some(c), None) = (link.capacity, p.budget) else {
            return;
        };
        if link
            .budget_for
            .is_some_and(|b| (c - b).abs() <= REDERIVE * b)
        {
            return;
        }
        let b = budget::default_budget(&p.method, Some(c));
        link.budget_for = Some(c);
        sched.set_budget(b);
        self.st.set_budget(b);
    }
}
