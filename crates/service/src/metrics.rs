//! Prometheus metrics (OpenMetrics text): the newest estimate of every path and metric with its
//! quality, each schedule's counters, subscriptions, and the probe agent's counters. Built from
//! the hub at scrape time, so nothing is kept twice.

use crate::passive::PassiveSnapshot;
use crate::path::CounterSnapshot;
use crate::Hub;
use mgrp_store::Record;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU64, Ordering};

type Labels = Vec<(&'static str, String)>;
type FGauge = Family<Labels, Gauge<f64, AtomicU64>>;
type FCounter = Family<Labels, Counter<u64>>;

fn gauge(reg: &mut Registry, name: &str, help: &str) -> FGauge {
    let f = FGauge::default();
    reg.register(name, help, f.clone());
    f
}

fn counter(reg: &mut Registry, name: &str, help: &str) -> FCounter {
    let f = FCounter::default();
    reg.register(name, help, f.clone());
    f
}

/// Why the exposition text could not be made.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("the store's lock is poisoned")]
    Poisoned,
    #[error("reading the store: {0}")]
    Store(#[from] mgrp_store::Error),
    #[error("encoding the metrics: {0}")]
    Encode(#[from] std::fmt::Error),
}

/// The exposition text, or why it could not be made.
pub fn render(hub: &Hub, now_ns: u64) -> Result<String, RenderError> {
    let mut reg = Registry::with_prefix("mgrp");
    let value = gauge(
        &mut reg,
        "estimate",
        "Newest estimate (bit/s for avail_bw and capacity, s for rtt, fraction for loss)",
    );
    let low = gauge(
        &mut reg,
        "estimate_low",
        "Lower end of the newest estimate's range",
    );
    let high = gauge(
        &mut reg,
        "estimate_high",
        "Upper end of the newest estimate's range",
    );
    let conf = gauge(
        &mut reg,
        "estimate_confidence",
        "Confidence of the newest estimate, 0..1",
    );
    let age = gauge(
        &mut reg,
        "estimate_age_seconds",
        "Age of the newest estimate",
    );
    let bytes = gauge(
        &mut reg,
        "estimate_probe_bytes",
        "Probe bytes the newest estimate cost",
    );
    let info = gauge(
        &mut reg,
        "estimate_method",
        "Method and source of the newest estimate (value 1)",
    );
    let latest: Vec<Record> = {
        let s = hub.store.lock().map_err(|_| RenderError::Poisoned)?;
        let mut v = Vec::new();
        for (path, metric) in s.series()? {
            if let Some(r) = s.latest(&path, &metric)? {
                v.push(r);
            }
        }
        v
    };
    for r in &latest {
        let l: Labels = vec![("path", r.path.clone()), ("metric", r.metric.clone())];
        value.get_or_create(&l).set(r.value);
        low.get_or_create(&l).set(r.low);
        high.get_or_create(&l).set(r.high);
        conf.get_or_create(&l).set(r.confidence);
        age.get_or_create(&l)
            .set(now_ns.saturating_sub(r.t_ns) as f64 / 1e9);
        bytes.get_or_create(&l).set(r.probe_bytes as f64);
        let mut li = l.clone();
        li.push(("method", r.method.clone()));
        li.push(("source", r.source.clone()));
        info.get_or_create(&li).set(1.0);
    }
    // One family per counter, named and explained by the counter's declaration.
    let sched: Vec<FCounter> = CounterSnapshot::HELP
        .iter()
        .map(|(n, h)| counter(&mut reg, &format!("schedule_{n}"), h))
        .collect();
    let budget = gauge(
        &mut reg,
        "schedule_budget_bytes_per_minute",
        "Probe byte budget in force (configured, or derived from the method and capacity)",
    );
    let exhausted = gauge(
        &mut reg,
        "schedule_budget_exhausted",
        "1 while the schedule's last round gave no fresh estimate because its budget ran out",
    );
    for p in hub.paths() {
        let l: Labels = vec![
            ("peer", p.sched.peer.to_string()),
            ("method", p.sched.method.clone()),
        ];
        for (f, (_, v)) in sched.iter().zip(p.counters().pairs()) {
            f.get_or_create(&l).inc_by(v);
        }
        budget.get_or_create(&l).set(p.budget() as f64);
        exhausted
            .get_or_create(&l)
            .set(if p.budget_exhausted() { 1.0 } else { 0.0 });
    }
    let passive: Vec<FCounter> = PassiveSnapshot::HELP
        .iter()
        .map(|(n, h)| counter(&mut reg, &format!("passive_{n}"), h))
        .collect();
    for v in hub.passive() {
        let l: Labels = vec![("iface", v.iface.clone())];
        for (f, (_, x)) in passive.iter().zip(v.counters.pairs()) {
            f.get_or_create(&l).inc_by(x);
        }
    }
    let subs = Gauge::<i64>::default();
    subs.set(hub.subscribers.load(Ordering::Relaxed) as i64);
    reg.register("event_subscribers", "Open event subscriptions", subs);
    let lagged = Counter::<u64>::default();
    lagged.inc_by(hub.events_lagged.load(Ordering::Relaxed));
    reg.register(
        "events_lagged",
        "Estimates subscribers missed because they fell behind",
        lagged,
    );
    for (group, values) in hub.counter_groups() {
        let f = counter(&mut reg, group, "Counters of this component, by name");
        for (name, v) in values {
            f.get_or_create(&vec![("counter", name)]).inc_by(v);
        }
    }
    let mut out = String::new();
    encode(&mut out, &reg)?;
    Ok(out)
}
