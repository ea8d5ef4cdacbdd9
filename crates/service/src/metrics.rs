//! Prometheus metrics (OpenMetrics text): the newest estimate of every path and metric with its
//! quality, each schedule's counters, subscriptions, the transfer modes, and the probe agent's
//! counters. Built from the hub at scrape time, so nothing is kept twice.

use crate::passive::PassiveSnapshot;
use crate::path::CounterSnapshot;
use crate::transfer::{TransferSnapshot, TransferView};
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
type FSeconds = Family<Labels, Counter<f64, AtomicU64>>;

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

/// Per mode (`mode`, `congestion_control` labels): flows active, flows opened, acked bytes,
/// time held at the cap, acks without a fresh estimate, losses; per destination the A written
/// and whether it is stale; the feed's own counters.
fn transfer_metrics(reg: &mut Registry, v: &TransferView) {
    let available = Gauge::<i64>::default();
    available.set(i64::from(v.available));
    reg.register(
        "transfer_available",
        "1 while the transfer modes are registered and fed",
        available,
    );
    let active = Family::<Labels, Gauge>::default();
    reg.register(
        "transfer_flows_active",
        "Sockets on the mode now",
        active.clone(),
    );
    let opened = counter(reg, "transfer_flows_opened", "Sockets that took the mode");
    let acked = counter(
        reg,
        "transfer_acked_bytes",
        "Bytes acked on the mode's sockets",
    );
    let acks = counter(reg, "transfer_acks", "Acks the mode handled");
    let no_est = counter(
        reg,
        "transfer_acks_no_estimate",
        "Acks handled as Reno because the destination had no fresh estimate",
    );
    let limited_acks = counter(
        reg,
        "transfer_acks_limited",
        "Background: acks at which the cap held the window down",
    );
    let limited = FSeconds::default();
    reg.register(
        "transfer_limited_seconds",
        "Background: time the window was held at the cap",
        limited.clone(),
    );
    let losses = counter(
        reg,
        "transfer_losses",
        "Loss or ECN reductions of the mode's sockets",
    );
    for s in &v.stats {
        let l: Labels = vec![
            ("mode", s.mode.to_string()),
            ("congestion_control", s.congestion_control.clone()),
        ];
        active.get_or_create(&l).set(s.flows_active as i64);
        opened.get_or_create(&l).inc_by(s.flows_opened);
        acked.get_or_create(&l).inc_by(s.acked_bytes);
        acks.get_or_create(&l).inc_by(s.acks);
        no_est.get_or_create(&l).inc_by(s.acks_no_estimate);
        limited_acks.get_or_create(&l).inc_by(s.acks_limited);
        limited.get_or_create(&l).inc_by(s.limited_s);
        losses.get_or_create(&l).inc_by(s.losses);
    }
    let written = gauge(
        reg,
        "transfer_avail_written_bps",
        "A written into the modes' map for the destination, bit/s (measured + own rate)",
    );
    let own = gauge(
        reg,
        "transfer_own_rate_bps",
        "Background flows' rate to the destination over the last second, bit/s",
    );
    let stale = gauge(
        reg,
        "transfer_stale",
        "1 while the destination's entry is missing or older than max_age (Reno runs)",
    );
    for d in &v.destinations {
        let l: Labels = vec![("destination", d.destination.to_string())];
        if let Some(a) = d.a_written_bps {
            written.get_or_create(&l).set(a as f64);
        }
        own.get_or_create(&l).set(d.own_rate_now_bps.unwrap_or(0.0));
        stale.get_or_create(&l).set(f64::from(u8::from(d.stale)));
    }
    for ((n, h), (_, x)) in TransferSnapshot::HELP.iter().zip(v.counters.pairs()) {
        let c = Counter::<u64>::default();
        c.inc_by(x);
        reg.register(format!("transfer_{n}"), *h, c);
    }
}

/// The exposition text, or why it could not be made.
pub fn render(hub: &Hub, now_ns: u64) -> Result<String, RenderError> {
    let mut reg = Registry::with_prefix("mgrp");
    let value = gauge(
        &mut reg,
        "estimate",
        "Newest estimate (bit/s for avail_bw and capacity, s for rtt, jitter and episode_duration, fraction for loss and episode_frequency)",
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
    let scale = gauge(
        &mut reg,
        "estimate_timescale_seconds",
        "Time scale the newest estimate holds over (absent when its method states none)",
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
        if let Some(ms) = r.timescale_ms {
            scale.get_or_create(&l).set(ms / 1e3);
        }
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
    let load = gauge(
        &mut reg,
        "schedule_probe_load_share",
        "Probe bytes of the trailing minute as a share of the path's capacity (0..1)",
    );
    let ceiling = gauge(
        &mut reg,
        "schedule_probe_load_ceiling",
        "The schedule's ceiling on its probe load, as a share of capacity (0..1)",
    );
    let covered = gauge(
        &mut reg,
        "schedule_covered",
        "1 while fresh passive or inline estimates agreeing with the tracked value stand in for active rounds",
    );
    for p in hub.paths() {
        let l: Labels = vec![
            ("peer", p.sched.peer.to_string()),
            ("method", p.sched.method.clone()),
        ];
        let v = p.view();
        covered
            .get_or_create(&l)
            .set(if v.covered_by.is_some() { 1.0 } else { 0.0 });
        if let Some(share) = v.probe_load_share {
            load.get_or_create(&l).set(share);
        }
        if let Some(c) = v.ceiling_share {
            ceiling.get_or_create(&l).set(c);
        }
        for (f, (_, v)) in sched.iter().zip(p.counters().pairs()) {
            f.get_or_create(&l).inc_by(v);
        }
        budget.get_or_create(&l).set(p.budget() as f64);
        exhausted
            .get_or_create(&l)
            .set(if p.budget_exhausted() { 1.0 } else { 0.0 });
    }
    let qcounters: Vec<FCounter> = CounterSnapshot::HELP
        .iter()
        .map(|(n, h)| counter(&mut reg, &format!("query_{n}"), h))
        .collect();
    let qevents = counter(
        &mut reg,
        "query_events",
        "Notifications an event query sent",
    );
    let qbudget = gauge(
        &mut reg,
        "query_budget_bytes_per_minute",
        "A client-created query's probe byte budget",
    );
    let queries = hub.queries.list(hub);
    for q in &queries {
        let l: Labels = vec![
            ("query", q.spec.id.clone()),
            ("peer", q.spec.peer.to_string()),
        ];
        for (f, (_, v)) in qcounters.iter().zip(q.counters.pairs()) {
            f.get_or_create(&l).inc_by(v);
        }
        qevents.get_or_create(&l).inc_by(q.events);
        qbudget
            .get_or_create(&l)
            .set(q.spec.budget_bytes_per_min as f64);
    }
    let nq = Gauge::<i64>::default();
    nq.set(queries.len() as i64);
    reg.register("queries", "Client-created queries held", nq);
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
    let transfer = hub.transfer();
    if transfer.configured {
        transfer_metrics(&mut reg, &transfer);
    }
    if let Some(m) = hub.mpat() {
        crate::mpat::metrics(&mut reg, &m.view(now_ns));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TransferConfig;
    use crate::transfer::{DestinationView, Origin, TransferState};
    use mgrp_control::{Mode, ModeStats};
    use std::sync::Arc;
    use std::time::Duration;

    fn hub() -> Arc<Hub> {
        let s = mgrp_store::Store::in_memory(Duration::from_secs(3600)).unwrap();
        Hub::new(Box::new(s), None)
    }

    #[test]
    fn transfer_metrics_per_mode_and_destination() {
        let h = hub();
        let text = render(&h, 0).unwrap();
        assert!(!text.contains("mgrp_transfer"), "not configured: {text}");
        let mut v = TransferView::configured(&TransferConfig::default(), None);
        v.available = true;
        v.stats = vec![ModeStats {
            mode: Mode::Background,
            congestion_control: "mgrp_bg".into(),
            flows_opened: 3,
            flows_active: 1,
            acked_bytes: 1000,
            acks: 10,
            acks_no_estimate: 2,
            acks_limited: 4,
            limited_s: 1.5,
            losses: 1,
        }];
        v.destinations = vec![DestinationView {
            destination: "198.18.3.2".parse().unwrap(),
            origin: Origin::Scheduled,
            path: None,
            source: None,
            method: None,
            estimates: 1,
            a_measured_bps: Some(9e6),
            own_rate_bps: Some(1e6),
            a_written_bps: Some(10_000_000),
            age_s: Some(1.0),
            stale: false,
            own_rate_now_bps: Some(2e6),
            bg_acked_bytes: 1000,
        }];
        v.counters.entries_written = 7;
        h.set_transfer(Some(Arc::new(TransferState::fixed(v))));
        let text = render(&h, 0).unwrap();
        let l = "{mode=\"background\",congestion_control=\"mgrp_bg\"}";
        for want in [
            "mgrp_transfer_available 1".to_string(),
            format!("mgrp_transfer_flows_active{l} 1"),
            format!("mgrp_transfer_flows_opened_total{l} 3"),
            format!("mgrp_transfer_acked_bytes_total{l} 1000"),
            format!("mgrp_transfer_acks_no_estimate_total{l} 2"),
            format!("mgrp_transfer_limited_seconds_total{l} 1.5"),
            format!("mgrp_transfer_losses_total{l} 1"),
            "mgrp_transfer_avail_written_bps{destination=\"198.18.3.2\"} 10000000.0".into(),
            "mgrp_transfer_stale{destination=\"198.18.3.2\"} 0.0".into(),
            "mgrp_transfer_entries_written_total 7".into(),
        ] {
            assert!(text.contains(&want), "{want} not in\n{text}");
        }
    }

    #[test]
    fn the_time_scale_is_exported_only_where_stated() {
        let h = hub();
        let rec = |metric: &str, timescale_ms| Record {
            path: "a->b".into(),
            metric: metric.into(),
            t_ns: 1,
            value: 5e6,
            low: 4e6,
            high: 6e6,
            method: "auto".into(),
            source: "active".into(),
            probe_bytes: 1,
            trains: 1,
            confidence: 0.8,
            elapsed_s: 0.5,
            final_: true,
            timescale_ms,
        };
        h.store
            .lock()
            .unwrap()
            .insert(&[rec("avail_bw", Some(912.0)), rec("capacity", None)])
            .unwrap();
        let text = render(&h, 0).unwrap();
        let want = "mgrp_estimate_timescale_seconds{path=\"a->b\",metric=\"avail_bw\"} 0.912";
        assert!(text.contains(want), "{want} not in\n{text}");
        assert!(
            !text.contains("mgrp_estimate_timescale_seconds{path=\"a->b\",metric=\"capacity\"}"),
            "{text}"
        );
    }
}
